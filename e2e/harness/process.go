package harness

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/connectivity"
)

// StartTimeout bounds how long a process may take to become ready.
const StartTimeout = 60 * time.Second

// StopTimeout bounds how long a SIGTERM'd process may take to exit.
const StopTimeout = 30 * time.Second

// Options configures one member process.
type Options struct {
	// Engine is kvd's storage engine ("bolt" or "badger"), passed as
	// --backend. Ignored when the process is etcd.
	Engine string
	// Name is the member name; "e2e" when empty.
	Name string
	// DataDir is the member's data directory; a fresh t.TempDir() when empty.
	DataDir string
	// Args are extra flags appended to the command line.
	Args []string
	// Env is added to the process's environment (NAME=VALUE each).
	Env []string
	// Binary, when set, runs this kvd binary instead of KVDBinary's (for
	// example KVDFailpointBinary's). Ignored when the process is etcd.
	Binary string
	// Member, when set, places the process in a multi-member cluster: its
	// URLs and initial cluster come from here instead of a fresh
	// single-member cluster on free ports, and the start returns once the
	// process is launched, without waiting for readiness (a member of a new
	// cluster cannot become ready alone); see Process.WaitReady.
	Member *MemberConfig
}

// MemberConfig fixes the addresses and the initial membership of one member
// of a multi-member cluster.
type MemberConfig struct {
	// ClientURL is listened on and advertised.
	ClientURL string
	// PeerListenURL is where the member listens for peers.
	PeerListenURL string
	// PeerURL is the peer URL the member advertises; PeerListenURL when
	// empty. It differs when a proxy stands in front of the listener.
	PeerURL string
	// InitialCluster is the --initial-cluster value (name=peerURL,...).
	InitialCluster string
	// State is "new" or "existing".
	State string
	// Token is the --initial-cluster-token.
	Token string
}

// Process is one running (or stopped) member. Its methods must be called
// from the test goroutine, except Endpoint, Kill and Exited, which are safe
// from any goroutine.
type Process struct {
	t       testing.TB
	label   string // "kvd", "etcd" or "kvd(etcd)"
	name    string
	bin     string
	args    []string
	env     []string // added to the test's environment; SetEnv changes it
	dataDir string
	logDir  string
	client  string // client URL
	peer    string // peer URL
	isEtcd  bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current cmd has exited
	werr error         // cmd.Wait's result, valid after done is closed
	runs int           // number of starts, names the log files
	logs []string      // log files of every run, oldest first
	// clients are those Client made; WaitReady and Restart wait until
	// they are connected again.
	clients []*clientv3.Client
}

// StartKVD starts the server under test: kvd, or etcd when KVD_E2E_SERVER=etcd.
// The process is stopped and its logs shown (on failure) in t.Cleanup.
func StartKVD(t testing.TB, opts Options) *Process {
	t.Helper()
	if Kind() == KindEtcd {
		return start(t, "kvd(etcd)", EtcdBinary(t), true, opts)
	}
	if opts.Engine == "" {
		t.Fatalf("StartKVD: Options.Engine is required")
	}
	bin := opts.Binary
	if bin == "" {
		bin = KVDBinary(t)
	}
	return start(t, "kvd", bin, false, opts)
}

// StartEtcd starts a reference etcd v3.7.3 member.
func StartEtcd(t testing.TB, opts Options) *Process {
	t.Helper()
	return start(t, "etcd", EtcdBinary(t), true, opts)
}

func start(t testing.TB, label, bin string, isEtcd bool, opts Options) *Process {
	t.Helper()
	name := opts.Name
	if name == "" {
		name = "e2e"
	}
	dataDir := opts.DataDir
	if dataDir == "" {
		dataDir = filepath.Join(t.TempDir(), "data")
	}
	p := &Process{t: t, label: label, name: name, bin: bin, env: opts.Env, dataDir: dataDir, logDir: t.TempDir(), isEtcd: isEtcd}
	t.Cleanup(p.cleanup)
	if opts.Member != nil {
		p.startMember(isEtcd, opts)
		return p
	}

	// A port picked free can be taken by someone else before the process
	// binds it; a fresh pair is tried when that is why the start failed.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		p.client = fmt.Sprintf("http://127.0.0.1:%d", ports[0])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
		p.peer = peer
		p.args = []string{
			"--name", name,
			"--data-dir", dataDir,
			"--listen-client-urls", p.client,
			"--advertise-client-urls", p.client,
			"--listen-peer-urls", peer,
			"--initial-advertise-peer-urls", peer,
			"--initial-cluster", name + "=" + peer,
			"--initial-cluster-state", "new",
		}
		if isEtcd {
			p.args = append(p.args, "--log-level", "warn")
		} else {
			p.args = append(p.args, "--backend", opts.Engine)
		}
		p.args = append(p.args, opts.Args...)
		lastErr = p.launchAndWait()
		if lastErr == nil {
			return p
		}
		if !p.logContains("address already in use") {
			break
		}
		p.Kill()
	}
	t.Fatalf("start %s: %v", label, lastErr)
	return nil
}

func (p *Process) startMember(isEtcd bool, opts Options) {
	p.t.Helper()
	m := opts.Member
	p.client = m.ClientURL
	p.peer = m.PeerURL
	if p.peer == "" {
		p.peer = m.PeerListenURL
	}
	p.args = []string{
		"--name", p.name,
		"--data-dir", p.dataDir,
		"--listen-client-urls", p.client,
		"--advertise-client-urls", p.client,
		"--listen-peer-urls", m.PeerListenURL,
		"--initial-advertise-peer-urls", p.peer,
		"--initial-cluster", m.InitialCluster,
		"--initial-cluster-state", m.State,
		"--initial-cluster-token", m.Token,
	}
	if isEtcd {
		p.args = append(p.args, "--log-level", "warn")
	} else {
		p.args = append(p.args, "--backend", opts.Engine)
	}
	p.args = append(p.args, opts.Args...)
	if err := p.launch(); err != nil {
		p.t.Fatalf("start %s %s: %v", p.label, p.name, err)
	}
}

// Name is the member name (--name).
func (p *Process) Name() string { return p.name }

// PID is the process id of the current run, or 0 when it is not running.
// Safe from any goroutine.
func (p *Process) PID() int {
	if exited, _ := p.Exited(); exited {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// SetEnv sets the variables (NAME=VALUE) added to the environment of the
// next runs, replacing those set before.
func (p *Process) SetEnv(env ...string) { p.env = env }

// Start launches the member again on the same data directory and ports
// without waiting for readiness; it is an error to call it while the
// member runs. Use it to restart members that cannot become ready alone
// (all of a cluster's members stopped, or a learner).
func (p *Process) Start() {
	p.t.Helper()
	if exited, _ := p.Exited(); !exited {
		p.t.Fatalf("start %s %s: already running", p.label, p.name)
	}
	if err := p.launch(); err != nil {
		p.t.Fatalf("start %s %s: %v", p.label, p.name, err)
	}
}

// WaitReady waits up to timeout until the member reports a leader and
// serves a linearizable read, and fails the test otherwise or as soon as the
// process exits.
func (p *Process) WaitReady(timeout time.Duration) {
	p.t.Helper()
	if err := p.waitReady(timeout); err != nil {
		p.t.Fatalf("%s %s: %v", p.label, p.name, err)
	}
	p.awaitClients(timeout)
}

// awaitClients waits until the connections of the clients Client made are
// up again. A test may call the API through a client's connection without
// clientv3's retries, and an RPC on a connection that is between two
// attempts to reconnect fails at once.
func (p *Process) awaitClients(timeout time.Duration) {
	p.mu.Lock()
	clients := append([]*clientv3.Client(nil), p.clients...)
	p.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, c := range clients {
		conn := c.ActiveConnection()
		conn.Connect()
		for s := conn.GetState(); s != connectivity.Ready && s != connectivity.Shutdown; s = conn.GetState() {
			if !conn.WaitForStateChange(ctx, s) {
				p.t.Fatalf("%s %s: a client did not reconnect within %v (%v)", p.label, p.name, timeout, s)
			}
		}
	}
}

// Endpoint is the client URL, e.g. "http://127.0.0.1:23790".
func (p *Process) Endpoint() string { return p.client }

// PeerURL is the peer URL the member advertises; it is also where it
// listens unless MemberConfig put a proxy in front.
func (p *Process) PeerURL() string { return p.peer }

// DataDir is the member's data directory.
func (p *Process) DataDir() string { return p.dataDir }

// Label names the process in messages: "kvd", "etcd" or "kvd(etcd)".
func (p *Process) Label() string { return p.label }

// IsEtcd reports whether this process is an etcd binary.
func (p *Process) IsEtcd() bool { return p.isEtcd }

// Client returns a new clientv3 client for this member, closed in t.Cleanup.
func (p *Process) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := newClient(p.client)
	if err != nil {
		t.Fatalf("%s: new client: %v", p.label, err)
	}
	t.Cleanup(func() { c.Close() })
	p.mu.Lock()
	p.clients = append(p.clients, c)
	p.mu.Unlock()
	return c
}

func newClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(ClientConfig(endpoint))
}

func (p *Process) launch() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	base := filepath.Join(p.logDir, fmt.Sprintf("%s-run%d", strings.NewReplacer("(", "-", ")", "").Replace(p.label), p.runs))
	stdout, err := os.Create(base + ".stdout")
	if err != nil {
		return fmt.Errorf("create log %s.stdout: %w", base, err)
	}
	stderr, err := os.Create(base + ".stderr")
	if err != nil {
		stdout.Close()
		return fmt.Errorf("create log %s.stderr: %w", base, err)
	}
	p.logs = append(p.logs, stdout.Name(), stderr.Name())
	cmd := exec.Command(p.bin, p.args...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	// Its own process group, so that Kill also reaches anything it spawned.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		stdout.Close()
		stderr.Close()
		return fmt.Errorf("exec %s: %w", p.bin, err)
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go func() {
		err := cmd.Wait()
		stdout.Close()
		stderr.Close()
		if err == nil {
			// Say so: a clean exit nobody asked for is as much a failure
			// as a crash, and "<nil>" reads like no information.
			err = fmt.Errorf("%s", cmd.ProcessState)
		}
		p.mu.Lock()
		p.werr = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

func (p *Process) launchAndWait() error {
	if err := p.launch(); err != nil {
		return err
	}
	return p.waitReady(StartTimeout)
}

// waitReady polls until the member reports a leader and serves a
// linearizable read, or fails as soon as the process exits.
func (p *Process) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	c, err := newClient(p.client)
	if err != nil {
		return fmt.Errorf("new client: %w", err)
	}
	defer c.Close()
	var last error
	for time.Now().Before(deadline) {
		if exited, werr := p.Exited(); exited {
			return fmt.Errorf("process exited before becoming ready: %v", werr)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		st, err := c.Status(ctx, p.client)
		switch {
		case refusedByAuth(err):
			// Auth is on: the read below still needs a leader and the
			// applied index before it is refused.
			err = nil
		case err == nil && st.Leader == 0:
			err = errors.New("no leader yet")
		}
		if err == nil {
			_, err = c.Get(ctx, "e2e-readiness-probe")
		}
		cancel()
		if err == nil || refusedByAuth(err) {
			// An auth refusal of the anonymous read is an answer too.
			return nil
		}
		last = err
		select {
		case <-p.doneChan():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready after %v: %v", timeout, last)
}

func (p *Process) doneChan() chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Exited reports whether the current run has exited, and how: the error is
// never nil once it has ("exit status 0", "signal: killed", ...).
func (p *Process) Exited() (bool, error) {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return true, nil
	}
	select {
	case <-done:
		p.mu.Lock()
		defer p.mu.Unlock()
		return true, p.werr
	default:
		return false, nil
	}
}

// WaitExit waits up to timeout for the current run to exit on its own and
// reports whether it did.
func (p *Process) WaitExit(timeout time.Duration) bool {
	done := p.doneChan()
	if done == nil {
		return true
	}
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

func (p *Process) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
	switch sig {
	case syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGCONT:
		// The whole group, so that anything kvd spawned stops with it.
		_ = syscall.Kill(-cmd.Process.Pid, sig)
	default:
		_ = cmd.Process.Signal(sig)
	}
}

// Pause stops the process group with SIGSTOP (a member that hangs:
// connections stay open, nothing is answered) until Resume.
func (p *Process) Pause() { p.signal(syscall.SIGSTOP) }

// Resume continues a paused process group with SIGCONT.
func (p *Process) Resume() { p.signal(syscall.SIGCONT) }

// Stop sends SIGTERM and waits for the process to exit. A paused process
// is continued so that it can.
func (p *Process) Stop() {
	p.t.Helper()
	p.signal(syscall.SIGTERM)
	p.signal(syscall.SIGCONT)
	if !p.WaitExit(StopTimeout) {
		p.Kill()
		p.t.Fatalf("%s did not exit within %v of SIGTERM", p.label, StopTimeout)
	}
}

// Kill sends SIGKILL to the process group and waits for the process to exit.
func (p *Process) Kill() {
	p.signal(syscall.SIGKILL)
	if done := p.doneChan(); done != nil {
		<-done
	}
}

// Restart starts the member again on the same data directory and ports
// (stopping it first with SIGTERM if it is running) and waits until ready.
func (p *Process) Restart() {
	p.t.Helper()
	if exited, _ := p.Exited(); !exited {
		p.Stop()
	}
	if err := p.launchAndWait(); err != nil {
		p.t.Fatalf("restart %s: %v", p.label, err)
	}
	p.awaitClients(StartTimeout)
}

func (p *Process) logContains(s string) bool {
	p.mu.Lock()
	logs := append([]string(nil), p.logs...)
	p.mu.Unlock()
	return filesContain(logs, s)
}

// filesContain reports whether any of files holds s (an unreadable file
// holds nothing).
func filesContain(files []string, s string) bool {
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// LogTail returns the last n lines of each log file of every run.
func (p *Process) LogTail(n int) string {
	p.mu.Lock()
	logs := append([]string(nil), p.logs...)
	p.mu.Unlock()
	var b strings.Builder
	for _, f := range logs {
		lines, err := tail(f, n)
		if err != nil {
			fmt.Fprintf(&b, "==> %s: %v\n", f, err)
			continue
		}
		if len(lines) == 0 {
			continue
		}
		fmt.Fprintf(&b, "==> %s (last %d lines) <==\n%s\n", f, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

func tail(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return lines, sc.Err()
}

func (p *Process) cleanup() {
	p.Kill()
	if p.t.Failed() {
		p.t.Logf("%s %s\n%s", p.label, strings.Join(p.args, " "), p.LogTail(80))
	}
}

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

// FreePorts returns n distinct loopback ports that were free a moment ago
// and were never handed out before in this test binary (by it or by the
// harness's own member starts).
func FreePorts(n int) ([]int, error) { return freePorts(n) }

func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find free port: %w", err)
		}
		ls = append(ls, l)
		port := l.Addr().(*net.TCPAddr).Port
		if portsUsed[port] {
			continue
		}
		portsUsed[port] = true
		ports = append(ports, port)
	}
	return ports, nil
}

// refusedByAuth tells whether err is auth refusing an anonymous caller: the
// member is up and serving.
func refusedByAuth(err error) bool {
	return errors.Is(err, rpctypes.ErrUserEmpty) || errors.Is(err, rpctypes.ErrPermissionDenied)
}
