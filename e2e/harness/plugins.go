package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// pluginPackages are the auth plugins PluginBinary builds: the product
// plugins under plugins/ and the plugin host's misbehaving test plugin.
var pluginPackages = map[string]string{
	"htpasswd":   "./plugins/htpasswd",
	"oidc":       "./plugins/oidc",
	"prefix":     "./plugins/prefix",
	"testplugin": "./pkg/pluginhost/internal/testplugin",
}

var (
	pluginBuildsMu sync.Mutex
	pluginBuilds   = map[string]*buildResult{}
)

// PluginBinary returns the path of the kvd auth plugin name ("htpasswd",
// "oidc", "prefix" or "testplugin") built from the repository root. Like
// kvd, each plugin is built once per test binary run.
func PluginBinary(t testing.TB, name string) string {
	t.Helper()
	pkg, ok := pluginPackages[name]
	if !ok {
		t.Fatalf("PluginBinary: unknown plugin %q", name)
	}
	pluginBuildsMu.Lock()
	r := pluginBuilds[name]
	if r == nil {
		r = &buildResult{}
		pluginBuilds[name] = r
	}
	pluginBuildsMu.Unlock()
	r.once.Do(func() {
		root, err := cacheRoot()
		if err != nil {
			r.err = err
			return
		}
		sum := sha256.Sum256([]byte(repoDir()))
		dir := filepath.Join(root, "kvd-"+hex.EncodeToString(sum[:])[:16], "plugins")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			r.err = fmt.Errorf("create plugin build dir %s: %w", dir, err)
			return
		}
		out := filepath.Join(dir, name)
		if err := goBuild(repoDir(), out, pkg); err != nil {
			r.err = err
			return
		}
		r.path = out
	})
	if r.err != nil {
		t.Fatalf("build plugin %s: %v", name, r.err)
	}
	return r.path
}

// PluginSpec is one entry of kvd's auth-plugins config list. Zero fields
// are left out of the file, so kvd's defaults apply.
type PluginSpec struct {
	Name      string
	Kind      string // "authenticator" or "authorizer"
	Command   string
	Args      []string
	Env       map[string]string
	Timeout   time.Duration
	OnFailure string
	// CacheTTL is written when non-nil (a pointer so that 0 can be asked).
	CacheTTL *time.Duration
}

// PluginConfigYAML renders specs as a kvd config file holding only the
// auth-plugins list.
func PluginConfigYAML(specs ...PluginSpec) string {
	q := func(s string) string {
		b, _ := json.Marshal(s) // a JSON string is a YAML double-quoted scalar
		return string(b)
	}
	var b strings.Builder
	b.WriteString("auth-plugins:\n")
	for _, s := range specs {
		fmt.Fprintf(&b, "  - name: %s\n", q(s.Name))
		fmt.Fprintf(&b, "    kind: %s\n", q(s.Kind))
		fmt.Fprintf(&b, "    command: %s\n", q(s.Command))
		if len(s.Args) > 0 {
			b.WriteString("    args:\n")
			for _, a := range s.Args {
				fmt.Fprintf(&b, "      - %s\n", q(a))
			}
		}
		if len(s.Env) > 0 {
			b.WriteString("    env:\n")
			keys := make([]string, 0, len(s.Env))
			for k := range s.Env {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Fprintf(&b, "      %s: %s\n", q(k), q(s.Env[k]))
			}
		}
		if s.Timeout > 0 {
			fmt.Fprintf(&b, "    timeout: %s\n", s.Timeout)
		}
		if s.OnFailure != "" {
			fmt.Fprintf(&b, "    on-failure: %s\n", s.OnFailure)
		}
		if s.CacheTTL != nil {
			fmt.Fprintf(&b, "    cache-ttl: %s\n", *s.CacheTTL)
		}
	}
	return b.String()
}

// WritePluginConfig writes PluginConfigYAML(specs...) into a fresh file
// under t.TempDir() and returns its path, for --config.
func WritePluginConfig(t testing.TB, specs ...PluginSpec) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kvd-plugins.yaml")
	if err := os.WriteFile(path, []byte(PluginConfigYAML(specs...)), 0o644); err != nil {
		t.Fatalf("write plugin config: %v", err)
	}
	return path
}

// KVDResult is how a kvd command run to its end went.
type KVDResult struct {
	Stdout, Stderr string
	// Exit is the exit status; -1 when kvd was killed at the deadline.
	Exit int
}

func (r KVDResult) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s--- stderr\n%s", r.Exit, r.Stdout, r.Stderr)
}

// RunKVD runs kvd with args (e.g. "plugins", "check", "--config", f) and
// waits up to timeout for it to exit; past it, kvd is killed and Exit is -1.
func RunKVD(t testing.TB, timeout time.Duration, args ...string) KVDResult {
	t.Helper()
	return runKVD(t, KVDBinary(t), timeout, args)
}

// StartKVDExpectExit starts a single-member kvd as StartKVD would (fresh
// data dir and free ports) and waits up to timeout for it to exit on its
// own, as it must when it refuses its configuration; a kvd still running at
// the deadline is killed and reported with Exit -1.
func StartKVDExpectExit(t testing.TB, opts Options, timeout time.Duration) KVDResult {
	t.Helper()
	if opts.Engine == "" {
		t.Fatalf("StartKVDExpectExit: Options.Engine is required")
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatalf("kvd: %v", err)
	}
	name := opts.Name
	if name == "" {
		name = "e2e"
	}
	dataDir := opts.DataDir
	if dataDir == "" {
		dataDir = filepath.Join(t.TempDir(), "data")
	}
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	args := []string{
		"--name", name,
		"--data-dir", dataDir,
		"--listen-client-urls", client,
		"--advertise-client-urls", client,
		"--listen-peer-urls", peer,
		"--initial-advertise-peer-urls", peer,
		"--initial-cluster", name + "=" + peer,
		"--initial-cluster-state", "new",
		"--backend", opts.Engine,
	}
	return runKVD(t, KVDBinary(t), timeout, append(args, opts.Args...))
}

func runKVD(t testing.TB, bin string, timeout time.Duration, args []string) KVDResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Its own process group, killed whole at the deadline so that no
	// plugin it started outlives it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	res := KVDResult{Stdout: stdout.String(), Stderr: stderr.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		res.Exit = -1
	case errors.As(err, &ee):
		res.Exit = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %s: %v", bin, err)
	}
	return res
}

// ChildPIDs lists the live processes whose parent is pid, read from /proc:
// for a kvd member, its plugin processes.
func ChildPIDs(pid int) []int {
	if pid <= 0 {
		return nil
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range ents {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 || f[0] == "Z" {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil && ppid == pid {
			out = append(out, child)
		}
	}
	sort.Ints(out)
	return out
}

// PluginPIDs returns the children of the running member p whose executable
// is bin (a path PluginBinary returned, or a copy of it).
func (p *Process) PluginPIDs(bin string) []int {
	if real, err := filepath.EvalSymlinks(bin); err == nil {
		bin = real
	}
	var out []int
	for _, c := range ChildPIDs(p.PID()) {
		exe, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(c), "exe"))
		if err != nil {
			continue
		}
		exe = strings.TrimSuffix(exe, " (deleted)")
		if exe == bin {
			out = append(out, c)
		}
	}
	return out
}
