package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ClusterOptions configures StartCluster.
type ClusterOptions struct {
	// Engine is kvd's storage engine for every member; required for kvd.
	Engine string
	// HeartbeatInterval and ElectionTimeout are the raft timings of every
	// member: 100ms and 1s when zero.
	HeartbeatInterval, ElectionTimeout time.Duration
	// SnapshotCount is --snapshot-count; the server's default when zero.
	SnapshotCount int
	// PeerProxy puts a Proxy in front of each member's peer listener; the
	// member advertises the proxy's address. Isolate needs it.
	PeerProxy bool
	// Args are extra flags for every member.
	Args []string
	// Binary, when set, is the kvd binary of every member (Options.Binary).
	Binary string
	// DataDir, when set, gives a member's data directory by its name; an
	// empty answer (or a nil DataDir) is a fresh temporary directory.
	DataDir func(name string) string
}

// Cluster is a multi-member cluster of the server under test, each member
// its own process. Its methods must be called from the test goroutine,
// except Members, Endpoints, Index, Proxy and Status, which are safe from
// any goroutine.
type Cluster struct {
	t     testing.TB
	opts  ClusterOptions
	token string

	mu      sync.Mutex
	members []*Process
	proxies map[*Process]*Proxy
	clients map[*Process]*clientv3.Client // one per member, for Status
}

// StartCluster starts n members named m0..m{n-1} as a new cluster, all at
// once, and waits until every member reports the same leader and serves a
// linearizable read. Everything is stopped in t.Cleanup.
func StartCluster(t testing.TB, n int, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.HeartbeatInterval == 0 {
		opts.HeartbeatInterval = 100 * time.Millisecond
	}
	if opts.ElectionTimeout == 0 {
		opts.ElectionTimeout = time.Second
	}
	c := &Cluster{
		t:       t,
		opts:    opts,
		token:   fmt.Sprintf("e2e-%x", time.Now().UnixNano()),
		proxies: map[*Process]*Proxy{},
		clients: map[*Process]*clientv3.Client{},
	}
	t.Cleanup(c.cleanup)
	type planned struct {
		name string
		addr memberAddrs
	}
	plan := make([]planned, n)
	var initial []string
	for i := range plan {
		plan[i] = planned{name: fmt.Sprintf("m%d", i), addr: c.allocate(t)}
		initial = append(initial, plan[i].name+"="+plan[i].addr.peerURL)
	}
	for _, pl := range plan {
		c.launch(t, pl.name, pl.addr, strings.Join(initial, ","), "new")
	}
	c.WaitHealthy(t, StartTimeout)
	return c
}

// memberAddrs are one member's URLs; proxy is non-empty with PeerProxy.
type memberAddrs struct {
	clientURL, peerListenURL, peerURL string
	proxyAddr                         string
}

func (c *Cluster) allocate(t testing.TB) memberAddrs {
	t.Helper()
	k := 2
	if c.opts.PeerProxy {
		k = 3
	}
	ports, err := freePorts(k)
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	a := memberAddrs{
		clientURL:     fmt.Sprintf("http://127.0.0.1:%d", ports[0]),
		peerListenURL: fmt.Sprintf("http://127.0.0.1:%d", ports[1]),
	}
	a.peerURL = a.peerListenURL
	if c.opts.PeerProxy {
		a.proxyAddr = fmt.Sprintf("127.0.0.1:%d", ports[2])
		a.peerURL = "http://" + a.proxyAddr
	}
	return a
}

// launch starts one member (its proxy first) without waiting for it.
func (c *Cluster) launch(t testing.TB, name string, a memberAddrs, initialCluster, state string) *Process {
	t.Helper()
	var proxy *Proxy
	if a.proxyAddr != "" {
		var err error
		proxy, err = NewProxy(a.proxyAddr, strings.TrimPrefix(a.peerListenURL, "http://"), c.identify)
		if err != nil {
			t.Fatalf("cluster: member %s: %v", name, err)
		}
	}
	args := []string{
		"--heartbeat-interval", strconv.FormatInt(c.opts.HeartbeatInterval.Milliseconds(), 10),
		"--election-timeout", strconv.FormatInt(c.opts.ElectionTimeout.Milliseconds(), 10),
	}
	if c.opts.SnapshotCount > 0 {
		args = append(args, "--snapshot-count", strconv.Itoa(c.opts.SnapshotCount))
	}
	args = append(args, c.opts.Args...)
	var dataDir string
	if c.opts.DataDir != nil {
		dataDir = c.opts.DataDir(name)
	}
	p := StartKVD(t, Options{
		Engine:  c.opts.Engine,
		Binary:  c.opts.Binary,
		DataDir: dataDir,
		Name:    name,
		Args:    args,
		Member: &MemberConfig{
			ClientURL:      a.clientURL,
			PeerListenURL:  a.peerListenURL,
			PeerURL:        a.peerURL,
			InitialCluster: initialCluster,
			State:          state,
			Token:          c.token,
		},
	})
	cli, err := newClient(p.Endpoint())
	if err != nil {
		t.Fatalf("cluster: member %s: new client: %v", name, err)
	}
	c.mu.Lock()
	c.members = append(c.members, p)
	c.clients[p] = cli
	if proxy != nil {
		c.proxies[p] = proxy
	}
	c.mu.Unlock()
	return p
}

// identify names the member process that dialed a proxied connection.
func (c *Cluster) identify(remote, local net.Addr) string {
	c.mu.Lock()
	members := append([]*Process(nil), c.members...)
	c.mu.Unlock()
	pids := make([]int, len(members))
	for i, m := range members {
		pids[i] = m.PID()
	}
	pid := socketOwner(remote, local, pids)
	if pid == 0 {
		return ""
	}
	for i, m := range members {
		if pids[i] == pid {
			return m.Name()
		}
	}
	return ""
}

func (c *Cluster) cleanup() {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Processes are killed by their own cleanups, registered after this
	// one and so run before it.
	for _, cli := range c.clients {
		cli.Close()
	}
	for _, p := range c.proxies {
		p.Close()
	}
}

// Members returns the current members, in the order they were added.
func (c *Cluster) Members() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Process(nil), c.members...)
}

// Endpoints returns the client URLs of the current members.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, m := range c.Members() {
		out = append(out, m.Endpoint())
	}
	return out
}

// Index returns p's position in Members, or -1.
func (c *Cluster) Index(p *Process) int {
	for i, m := range c.Members() {
		if m == p {
			return i
		}
	}
	return -1
}

// Proxy returns the proxy in front of p's peer listener (nil without
// PeerProxy).
func (c *Cluster) Proxy(p *Process) *Proxy {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proxies[p]
}

// Client returns a client balanced across every current member's
// endpoint, closed in t.Cleanup.
func (c *Cluster) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	return c.ClientFor(t, c.Endpoints()...)
}

// ClientFor returns a client for the given endpoints, closed in t.Cleanup.
func (c *Cluster) ClientFor(t testing.TB, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(ClientConfig(endpoints...))
	if err != nil {
		t.Fatalf("cluster: new client for %v: %v", endpoints, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Status asks member p for its status, bounded by timeout.
func (c *Cluster) Status(p *Process, timeout time.Duration) (*clientv3.StatusResponse, error) {
	c.mu.Lock()
	cli := c.clients[p]
	c.mu.Unlock()
	if cli == nil {
		return nil, fmt.Errorf("status of %s: not a member of this cluster", p.Name())
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	st, err := cli.Status(ctx, p.Endpoint())
	if err != nil {
		return nil, fmt.Errorf("status of %s: %w", p.Name(), err)
	}
	return st, nil
}

// Leader returns the index in Members of the member that reports itself
// leader (the highest term wins if several do), or -1.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	best, term := -1, uint64(0)
	for i, m := range c.Members() {
		if exited, _ := m.Exited(); exited {
			continue
		}
		st, err := c.Status(m, time.Second)
		if err != nil || st.Leader == 0 || st.Leader != st.Header.MemberId {
			continue
		}
		if best < 0 || st.RaftTerm > term {
			best, term = i, st.RaftTerm
		}
	}
	return best
}

// WaitLeader waits up to timeout until one member reports itself leader
// and a majority of the members report it as their leader, and returns its
// index in Members.
func (c *Cluster) WaitLeader(t testing.TB, timeout time.Duration) int {
	t.Helper()
	var last error
	deadline := time.Now().Add(timeout)
	for {
		i, err := c.agreedLeader()
		if err == nil {
			return i
		}
		last = err
		if time.Now().After(deadline) {
			t.Fatalf("cluster: no leader within %v: %v", timeout, last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *Cluster) agreedLeader() (int, error) {
	members := c.Members()
	votes := map[uint64]int{}
	self := map[uint64]int{} // member id -> index, of members that report themselves leader
	var errs []error
	for i, m := range members {
		if exited, _ := m.Exited(); exited {
			continue
		}
		st, err := c.Status(m, time.Second)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Leader == 0 {
			continue
		}
		votes[st.Leader]++
		if st.Leader == st.Header.MemberId {
			self[st.Leader] = i
		}
	}
	for id, i := range self {
		if votes[id] > len(members)/2 {
			return i, nil
		}
	}
	return -1, fmt.Errorf("leader votes %v, self-reported leaders %v, status errors %v", votes, self, errors.Join(errs...))
}

// WaitHealthy waits up to timeout until every member reports the same
// leader and serves a linearizable read, failing at once if one exits.
func (c *Cluster) WaitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last error
	for {
		last = c.healthy()
		if last == nil {
			return
		}
		for _, m := range c.Members() {
			if exited, werr := m.Exited(); exited {
				t.Fatalf("cluster: member %s exited: %v", m.Name(), werr)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster: not healthy within %v: %v", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) healthy() error {
	var leader uint64
	for _, m := range c.Members() {
		st, err := c.Status(m, time.Second)
		if err != nil {
			return err
		}
		if st.Leader == 0 {
			return fmt.Errorf("%s has no leader", m.Name())
		}
		if leader != 0 && st.Leader != leader {
			return fmt.Errorf("%s reports leader %x, another member %x", m.Name(), st.Leader, leader)
		}
		leader = st.Leader
		if err := c.readProbe(m, !st.IsLearner); err != nil {
			return err
		}
	}
	return nil
}

// readProbe reads one key from p: linearizably, or serializably (a learner
// serves only those).
func (c *Cluster) readProbe(p *Process, linearizable bool) error {
	c.mu.Lock()
	cli := c.clients[p]
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	var opts []clientv3.OpOption
	if !linearizable {
		opts = append(opts, clientv3.WithSerializable())
	}
	if _, err := cli.Get(ctx, "e2e-readiness-probe", opts...); err != nil {
		return fmt.Errorf("read on %s: %w", p.Name(), err)
	}
	return nil
}

// MemberID returns p's member id, from the member list.
func (c *Cluster) MemberID(t testing.TB, p *Process) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli := c.anyClient(t, p)
	resp, err := cli.MemberList(ctx)
	if err != nil {
		t.Fatalf("cluster: member list: %v", err)
	}
	for _, m := range resp.Members {
		for _, u := range m.PeerURLs {
			if u == p.PeerURL() {
				return m.ID
			}
		}
	}
	t.Fatalf("cluster: %s (%s) not in the member list %v", p.Name(), p.PeerURL(), resp.Members)
	return 0
}

// anyClient returns the per-member client of a running member other than
// skip, for membership calls.
func (c *Cluster) anyClient(t testing.TB, skip *Process) *clientv3.Client {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.members {
		if exited, _ := m.Exited(); m != skip && !exited {
			return c.clients[m]
		}
	}
	t.Fatalf("cluster: no running member to ask")
	return nil
}

// AddMember adds a member named name through the cluster's MemberAdd (or
// MemberAddAsLearner), starts it with initial-cluster-state existing and the
// initial cluster the response implies, and waits until it serves a read:
// a voter a linearizable one (so it has joined), a learner a serializable
// one (it may still be catching up).
func (c *Cluster) AddMember(t testing.TB, name string, learner bool) *Process {
	t.Helper()
	a := c.allocate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := c.anyClient(t, nil)
	var resp *clientv3.MemberAddResponse
	for {
		var err error
		if learner {
			resp, err = cli.MemberAddAsLearner(ctx, []string{a.peerURL})
		} else {
			resp, err = cli.MemberAdd(ctx, []string{a.peerURL})
		}
		if err == nil {
			break
		}
		// etcd and kvd refuse to add while the member asked has not been
		// connected to enough voters for the health interval (5s): a
		// passing state.
		if !errors.Is(err, rpctypes.ErrUnhealthy) || ctx.Err() != nil {
			t.Fatalf("cluster: add member %s (learner %v): %v", name, learner, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	var initial []string
	for _, m := range resp.Members {
		n := m.Name
		if m.ID == resp.Member.ID {
			n = name
		}
		for _, u := range m.PeerURLs {
			initial = append(initial, n+"="+u)
		}
	}
	p := c.launch(t, name, a, strings.Join(initial, ","), "existing")
	deadline := time.Now().Add(StartTimeout)
	// etcd v3.7.3 now and then wedges a joining member right after it
	// applies the leader's snapshot: it resets its peer streams, gets no
	// further entries, answers no request, and spins on "etcdserver: too
	// many requests" publishing itself. A restart unsticks it. kvd gets no
	// such allowance.
	restartAt := time.Now().Add(8 * time.Second)
	if !p.IsEtcd() {
		restartAt = deadline
	}
	for {
		var err error
		if !learner {
			var st *clientv3.StatusResponse
			st, err = c.Status(p, time.Second)
			if err == nil && st.Leader == 0 {
				err = errors.New("no leader yet")
			}
		}
		if err == nil {
			err = c.readProbe(p, !learner)
		}
		if err == nil {
			return p
		}
		if exited, werr := p.Exited(); exited {
			t.Fatalf("cluster: added member %s exited: %v", name, werr)
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster: added member %s not ready within %v: %v", name, StartTimeout, err)
		}
		if time.Now().After(restartAt) {
			t.Logf("cluster: etcd member %s wedged after joining (%v); restarting it", name, err)
			p.Kill()
			p.Start()
			restartAt = deadline
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// RemoveMember removes p through MemberRemove on another member, then
// waits a while for p to exit on its own (etcd does), kills it otherwise,
// and drops it from Members.
func (c *Cluster) RemoveMember(t testing.TB, p *Process) {
	t.Helper()
	id := c.MemberID(t, p)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli := c.anyClient(t, p)
	for {
		_, err := cli.MemberRemove(ctx, id)
		if err == nil {
			break
		}
		// Like a member add, a remove is refused (strict reconfiguration
		// check, etcd and kvd alike) while the member asked has not been
		// connected to enough voters for the health interval (5s): a
		// passing state.
		if !errors.Is(err, rpctypes.ErrUnhealthy) || ctx.Err() != nil {
			t.Fatalf("cluster: remove member %s (%x): %v", p.Name(), id, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !p.WaitExit(10 * time.Second) {
		p.Kill()
	}
	c.mu.Lock()
	for i, m := range c.members {
		if m == p {
			c.members = append(c.members[:i], c.members[i+1:]...)
			break
		}
	}
	cli, proxy := c.clients[p], c.proxies[p]
	delete(c.clients, p)
	delete(c.proxies, p)
	c.mu.Unlock()
	cli.Close()
	if proxy != nil {
		proxy.Close()
	}
}

// Isolate cuts p off from every other member, both ways: its own proxy
// refuses everyone and every other proxy refuses p's connections. Needs
// PeerProxy.
func (c *Cluster) Isolate(t testing.TB, p *Process) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proxies[p] == nil {
		t.Fatalf("cluster: isolate %s: no peer proxy (ClusterOptions.PeerProxy)", p.Name())
	}
	for m, px := range c.proxies {
		if m == p {
			px.Blackhole()
		} else {
			px.Block(p.Name())
		}
	}
}

// Heal undoes Isolate and every proxy's Pause, Blackhole and Block.
func (c *Cluster) Heal(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, px := range c.proxies {
		px.Heal()
	}
}
