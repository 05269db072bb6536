package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	epb "go.etcd.io/etcd/server/v3/etcdserver/api/v3election/v3electionpb"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3lock/v3lockpb"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// leTranscript is what one server answered to the lock and election
// script, one line per answer, with the IDs that differ between two fresh
// members (cluster, member, raft term, leases the server chose) left out.
// Revisions stay: both start empty and see the same writes.
type leTranscript struct {
	mu    sync.Mutex
	lines []string
}

func (tr *leTranscript) add(format string, args ...any) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.lines = append(tr.lines, fmt.Sprintf(format, args...))
}

func leErr(err error) string {
	if err == nil {
		return "ok"
	}
	st := status.Convert(err)
	return fmt.Sprintf("error %v %q", st.Code(), st.Message())
}

func leHdr(h *pb.ResponseHeader) string {
	if h == nil {
		return "header <nil>"
	}
	return fmt.Sprintf("rev=%d", h.Revision)
}

func leKV(kv *mvccpb.KeyValue) string {
	if kv == nil {
		return "kv <nil>"
	}
	return fmt.Sprintf("kv %q=%q create=%d mod=%d ver=%d lease=%x", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease)
}

// Leases of fixed IDs, granted by the script on each server, so lock and
// leader keys (name/<lease in hex>) compare as they are.
const (
	leaseA = 0x1a
	leaseB = 0x1b
	leaseC = 0x1c
	leaseD = 0x1d
	leaseE = 0x1e
	leaseF = 0x1f
)

// TestLockElectionDiff runs one script of Lock, Unlock, Campaign, Proclaim,
// Leader, Observe and Resign calls (over gRPC and over the JSON gateway),
// with contenders, bad input and auth, against etcd v3.7.3 and kvd (bolt),
// and requires the same answers.
func TestLockElectionDiff(t *testing.T) {
	kp := harness.StartKVD(t, harness.Options{Engine: "bolt"})
	ep := harness.StartEtcd(t, harness.Options{})
	var got [2][]string
	for i, p := range []*harness.Process{ep, kp} {
		got[i] = lockElectionScript(t, p)
	}
	n := max(len(got[0]), len(got[1]))
	for i := range n {
		var e, k string
		if i < len(got[0]) {
			e = got[0][i]
		}
		if i < len(got[1]) {
			k = got[1][i]
		}
		if e != k {
			t.Errorf("answer %d differs:\netcd: %s\nkvd:  %s", i, e, k)
		}
	}
	// Both could be wrong alike: the answers that show the script ran as
	// meant.
	for _, want := range []string{
		"second lock: waiting",
		`lock lk 1b: key "lk/1b" rev=4`,
		`lock lk 1e: error Unknown "etcdserver: requested lease not found"`,
		"second campaign: waiting",
		`campaign el 1d v2: leader name="el" key="el/1d" rev=13 lease=1d rev=13`,
		`proclaim true x: error Unknown "election: not leader"`,
		`leader el: error Unknown "election: no leader"`,
		`lock /other/l 1f: error Unknown "etcdserver: permission denied"`,
		`lock /app/l 1f: key "/app/l/1f" rev=20`,
		`POST /v3/election/leader {"name":"Z2Vs"}: 500 {"code":2,"message":"election: no leader"}`,
		`POST /v3/lock/lock {"name":"L290aGVyL2c=","lease":"31"}: 500 {"code":2,"message":"etcdserver: permission denied"}`,
	} {
		if !slices.Contains(got[0], want) {
			t.Errorf("etcd did not answer %s", want)
		}
	}
	if testing.Verbose() {
		for _, l := range got[1] {
			t.Log(l)
		}
	}
}

func lockElectionScript(t *testing.T, p *harness.Process) []string {
	t.Helper()
	cli := p.Client(t)
	conn := cli.ActiveConnection()
	lk, el, lc := v3lockpb.NewLockClient(conn), epb.NewElectionClient(conn), pb.NewLeaseClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr := &leTranscript{}
	grant := func(ctx context.Context, id int64) {
		_, err := lc.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: 60})
		tr.add("grant %x: %s", id, leErr(err))
	}
	lockResult := func(name string, lease int64, r *v3lockpb.LockResponse, err error) *v3lockpb.LockResponse {
		if err != nil {
			tr.add("lock %s %x: %s", name, lease, leErr(err))
			return nil
		}
		tr.add("lock %s %x: key %q %s", name, lease, r.Key, leHdr(r.Header))
		return r
	}
	lock := func(ctx context.Context, name string, lease int64) *v3lockpb.LockResponse {
		r, err := lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte(name), Lease: lease})
		return lockResult(name, lease, r, err)
	}
	unlock := func(ctx context.Context, key []byte) {
		r, err := lk.Unlock(ctx, &v3lockpb.UnlockRequest{Key: key})
		if err != nil {
			tr.add("unlock %q: %s", key, leErr(err))
			return
		}
		tr.add("unlock %q: %s", key, leHdr(r.Header))
	}
	keys := func(prefix string) {
		r, err := cli.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			tr.add("get %s: %s", prefix, leErr(err))
			return
		}
		for _, kv := range r.Kvs {
			tr.add("get %s: %s", prefix, leKV((*mvccpb.KeyValue)(kv)))
		}
		tr.add("get %s: %d keys", prefix, len(r.Kvs))
	}
	// waiting reports whether ch stays empty for a while: the call behind
	// it is still queued.
	waiting := func(what string, ch <-chan struct{}) {
		select {
		case <-ch:
			tr.add("%s: returned while it should wait", what)
		case <-time.After(300 * time.Millisecond):
			tr.add("%s: waiting", what)
		}
	}
	done := func(what string, ch <-chan struct{}) {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			tr.add("%s: still waiting", what)
		}
	}

	for _, id := range []int64{leaseA, leaseB, leaseC, leaseD, leaseE} {
		grant(ctx, id)
	}

	// Lock: two contenders, the second queued until the first unlocks.
	r1 := lock(ctx, "lk", leaseA)
	second := make(chan struct{})
	var (
		r2    *v3lockpb.LockResponse
		r2err error
	)
	go func() {
		r2, r2err = lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("lk"), Lease: leaseB})
		close(second)
	}()
	waiting("second lock", second)
	keys("lk/")
	if r1 != nil {
		unlock(ctx, r1.Key)
	}
	done("second lock", second)
	if r2 = lockResult("lk", leaseB, r2, r2err); r2 != nil {
		unlock(ctx, r2.Key)
	}
	// Locking twice on one lease is one acquisition.
	r3 := lock(ctx, "lk", leaseA)
	lock(ctx, "lk", leaseA)
	if r3 != nil {
		unlock(ctx, r3.Key)
	}
	// A lease the call grants itself (60 s, never kept alive).
	if r, err := lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("own")}); err != nil {
		tr.add("lock own 0: %s", leErr(err))
	} else {
		tr.add("lock own 0: key shape %v %s", regexp.MustCompile(`^own/[0-9a-f]+$`).Match(r.Key), leHdr(r.Header))
		kr, err := cli.Get(ctx, string(r.Key))
		if err == nil && len(kr.Kvs) == 1 {
			ttl, err := cli.TimeToLive(ctx, clientv3.LeaseID(kr.Kvs[0].Lease))
			tr.add("lock own 0: lease granted TTL %d %s", ttl.GrantedTTL, leErr(err))
		}
		ur, err := lk.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r.Key})
		tr.add("unlock own: %v %s", ur != nil, leErr(err))
	}
	// Bad input.
	if _, err := lc.LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: leaseE}); err != nil {
		t.Fatalf("%s: revoke: %v", p.Label(), err)
	}
	lock(ctx, "lk", leaseE)   // revoked
	lock(ctx, "lk", 0x999999) // never granted
	lock(ctx, "", leaseA)     // empty name: the key is "/<lease>"
	unlock(ctx, []byte("/1a"))
	unlock(ctx, nil)
	unlock(ctx, []byte("lk/nothing"))

	// Election: two candidates, an observer.
	campaignResult := func(name string, lease int64, val string, r *epb.CampaignResponse, err error) *epb.LeaderKey {
		if err != nil {
			tr.add("campaign %s %x %s: %s", name, lease, val, leErr(err))
			return nil
		}
		tr.add("campaign %s %x %s: leader name=%q key=%q rev=%d lease=%x %s", name, lease, val, r.Leader.Name, r.Leader.Key, r.Leader.Rev, r.Leader.Lease, leHdr(r.Header))
		return r.Leader
	}
	campaign := func(ctx context.Context, name string, lease int64, val string) *epb.LeaderKey {
		r, err := el.Campaign(ctx, &epb.CampaignRequest{Name: []byte(name), Lease: lease, Value: []byte(val)})
		return campaignResult(name, lease, val, r, err)
	}
	leader := func(name string) {
		r, err := el.Leader(ctx, &epb.LeaderRequest{Name: []byte(name)})
		if err != nil {
			tr.add("leader %s: %s", name, leErr(err))
			return
		}
		tr.add("leader %s: %s %s", name, leKV(r.Kv), leHdr(r.Header))
	}
	proclaim := func(l *epb.LeaderKey, val string) {
		r, err := el.Proclaim(ctx, &epb.ProclaimRequest{Leader: l, Value: []byte(val)})
		if err != nil {
			tr.add("proclaim %v %s: %s", l != nil, val, leErr(err))
			return
		}
		tr.add("proclaim %s: %s", val, leHdr(r.Header))
	}
	resign := func(what string, l *epb.LeaderKey) {
		r, err := el.Resign(ctx, &epb.ResignRequest{Leader: l})
		if err != nil {
			tr.add("resign %s: %s", what, leErr(err))
			return
		}
		tr.add("resign %s: %s", what, leHdr(r.Header))
	}

	leader("el")
	c1 := campaign(ctx, "el", leaseC, "v1")
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	obs, err := el.Observe(octx, &epb.LeaderRequest{Name: []byte("el")})
	if err != nil {
		t.Fatalf("%s: observe: %v", p.Label(), err)
	}
	observed := func(n int) {
		for range n {
			r, err := obs.Recv()
			if err != nil {
				tr.add("observe: %s", leErr(err))
				return
			}
			tr.add("observe: %s %s", leKV(r.Kv), leHdr(r.Header))
		}
	}
	observed(1)
	elected := make(chan struct{})
	var (
		c2r   *epb.CampaignResponse
		c2err error
	)
	go func() {
		c2r, c2err = el.Campaign(ctx, &epb.CampaignRequest{Name: []byte("el"), Lease: leaseD, Value: []byte("v2")})
		close(elected)
	}()
	waiting("second campaign", elected)
	proclaim(c1, "v1b")
	observed(1)
	leader("el")
	notLeader := &epb.LeaderKey{Name: []byte("el"), Key: []byte("el/1d"), Rev: 1, Lease: leaseD}
	proclaim(notLeader, "x")
	resign("not leader", notLeader)
	proclaim(nil, "x")
	resign("nil", nil)
	resign("leader", c1)
	done("second campaign", elected)
	c2 := campaignResult("el", leaseD, "v2", c2r, c2err)
	observed(1)
	leader("el")
	proclaim(c1, "stale")
	if c2 != nil {
		resign("second", c2)
	}
	leader("el")
	campaign(ctx, "el", leaseE, "revoked")
	campaign(ctx, "el", 0x999999, "missing")
	ocancel()

	// The JSON gateway.
	gw := func(path, body, token string) {
		req, err := http.NewRequest(http.MethodPost, p.Endpoint()+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			tr.add("POST %s %s: %v", path, body, err)
			return
		}
		defer resp.Body.Close()
		var raw []byte
		if path == "/v3/election/observe" {
			// A stream: its first message only.
			raw, _ = bufio.NewReader(resp.Body).ReadBytes('\n')
		} else {
			raw, _ = io.ReadAll(resp.Body)
		}
		tr.add("POST %s %s: %d %s", path, body, resp.StatusCode, gwNormalize(raw))
	}
	gw("/v3/lock/lock", `{"name":"Z3c=","lease":"26"}`, "") // gw, leaseA
	gw("/v3/lock/unlock", `{"key":"Z3cvMWE="}`, "")         // gw/1a
	gw("/v3/lock/lock", `{"name":"Z3c=","lease":"30"}`, "") // leaseE, revoked
	gw("/v3/lock/lock", `{"name":"Z3c=","lease":"x"}`, "")  // bad JSON
	gw("/v3/lock/unlock", `{}`, "")                         // no key
	gw("/v3/election/leader", `{"name":"Z2Vs"}`, "")        // gel: none
	gw("/v3/election/campaign", `{"name":"Z2Vs","lease":"26","value":"Z3Yx"}`, "")
	gw("/v3/election/leader", `{"name":"Z2Vs"}`, "")
	gw("/v3/election/observe", `{"name":"Z2Vs"}`, "")
	gw("/v3/election/proclaim", `{"leader":{"name":"Z2Vs","key":"Z2VsLzFh","rev":"0","lease":"26"},"value":"Z3Yy"}`, "")
	gw("/v3/election/proclaim", `{"value":"Z3Yy"}`, "")
	gw("/v3/election/resign", `{}`, "")
	gw("/v3/election/nope", `{}`, "")

	// Auth: alice may read and write /app/ only.
	auth := cli.Auth
	for _, step := range []func() error{
		func() error { _, err := auth.UserAdd(ctx, "root", "rootpw"); return err },
		func() error { _, err := auth.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := auth.RoleAdd(ctx, "app"); return err },
		func() error {
			_, err := auth.RoleGrantPermission(ctx, "app", "/app/", "/app0", clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := auth.UserAdd(ctx, "alice", "apw"); return err },
		func() error { _, err := auth.UserGrantRole(ctx, "alice", "app"); return err },
		func() error { _, err := auth.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			t.Fatalf("%s: auth setup: %v", p.Label(), err)
		}
	}
	token := func(user, pw string) string {
		var r *clientv3.AuthenticateResponse
		var err error
		for range 50 { // the first after enabling may still see auth off
			if r, err = cli.Authenticate(ctx, user, pw); err == nil {
				return r.Token
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: authenticate %s: %v", p.Label(), user, err)
		return ""
	}
	rootTok, aliceTok := token("root", "rootpw"), token("alice", "apw")
	root := metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, rootTok)
	alice := metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, aliceTok)
	grant(root, leaseF)
	lock(alice, "/other/l", leaseF)
	lock(ctx, "/app/l", leaseF)
	ra := lock(alice, "/app/l", leaseF)
	if ra != nil {
		unlock(ctx, ra.Key)
		unlock(alice, ra.Key)
	}
	campaign(alice, "/other/e", leaseF, "v")
	ca := campaign(alice, "/app/e", leaseF, "v")
	lr, err := el.Leader(alice, &epb.LeaderRequest{Name: []byte("/other/e")})
	tr.add("leader /other/e as alice: %v %s", lr != nil, leErr(err))
	if ca != nil {
		r, err := el.Resign(alice, &epb.ResignRequest{Leader: ca})
		tr.add("resign /app/e as alice: %v %s", r != nil, leErr(err))
	}
	gw("/v3/lock/lock", `{"name":"L290aGVyL2c=","lease":"31"}`, aliceTok) // /other/g
	gw("/v3/lock/lock", `{"name":"L2FwcC9n","lease":"31"}`, aliceTok)     // /app/g
	gw("/v3/lock/lock", `{"name":"L2FwcC9n","lease":"31"}`, "")
	gw("/v3/election/leader", `{"name":"L290aGVyL2U="}`, aliceTok)
	return tr.lines
}

// gwNormalize drops the header fields that differ between two fresh members
// from a gateway answer and prints it back as sorted JSON.
func gwNormalize(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return strings.TrimSpace(string(raw))
	}
	b, _ := json.Marshal(stripIDs(v))
	return string(b)
}

// TestEtcdctlLockElect runs etcdctl v3.7.3's lock and elect (client-side
// concurrency over KV, Lease and Watch) against etcd v3.7.3 and kvd (bolt):
// a lock held by one etcdctl makes the second wait until the first is
// interrupted; an elected etcdctl is seen by a listener, and the next
// candidate takes over when it is interrupted.
func TestEtcdctlLockElect(t *testing.T) {
	kp := harness.StartKVD(t, harness.Options{Engine: "bolt"})
	ep := harness.StartEtcd(t, harness.Options{})
	var got [2][]string
	for i, p := range []*harness.Process{ep, kp} {
		got[i] = etcdctlLockElect(t, p)
	}
	want := []string{
		"first: lk/<lease>", "second: <timeout>", "second: got lk/<lease>", "first: ", "first: <eof>",
		"c1: el/<lease>", "c1: p1", "listen: el/<lease>", "listen: p1", "c2: <timeout>",
		"c2: el/<lease>", "c2: p2", "listen: el/<lease>", "listen: p2", "c1: <eof>",
	}
	if !reflect.DeepEqual(got[0], want) {
		t.Errorf("etcd's etcdctl lock and elect: %q, want %q", got[0], want)
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Errorf("etcdctl lock and elect differ:\netcd: %q\nkvd:  %q", got[0], got[1])
	}
	if testing.Verbose() {
		for _, l := range got[1] {
			t.Log(l)
		}
	}
}

// ctlProc is a running etcdctl whose stdout is read line by line.
type ctlProc struct {
	cmd   *exec.Cmd
	lines chan string
}

func startCtl(t *testing.T, p *harness.Process, args ...string) *ctlProc {
	t.Helper()
	cmd := exec.Command(harness.EtcdctlBinary(t), append([]string{"--endpoints", p.Endpoint(), "--dial-timeout", "5s"}, args...)...)
	cmd.Env = etcdctlEnv()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &ctlProc{cmd: cmd, lines: make(chan string, 100)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return c
}

// next is the process's next output line, "<timeout>" or "<eof>".
func (c *ctlProc) next(d time.Duration) string {
	select {
	case l, ok := <-c.lines:
		if !ok {
			return "<eof>"
		}
		return l
	case <-time.After(d):
		return "<timeout>"
	}
}

func etcdctlLockElect(t *testing.T, p *harness.Process) []string {
	t.Helper()
	var out []string
	leaseHex := regexp.MustCompile(`/[0-9a-f]+$`)
	add := func(s string) { out = append(out, leaseHex.ReplaceAllString(s, "/<lease>")) }

	// A lock held until SIGINT; a second etcdctl runs its command once it
	// is released.
	first := startCtl(t, p, "lock", "lk")
	add("first: " + first.next(10*time.Second))
	second := startCtl(t, p, "lock", "lk", "--", "sh", "-c", `echo "got $ETCD_LOCK_KEY"`)
	add("second: " + second.next(500*time.Millisecond))
	_ = first.cmd.Process.Signal(syscall.SIGINT)
	add("second: " + second.next(10*time.Second))
	add("first: " + first.next(10*time.Second))
	add("first: " + first.next(10*time.Second))

	// An election: a candidate, a listener, a second candidate that takes
	// over when the first is interrupted.
	c1 := startCtl(t, p, "elect", "el", "p1")
	add("c1: " + c1.next(10*time.Second))
	add("c1: " + c1.next(10*time.Second))
	listen := startCtl(t, p, "elect", "-l", "el")
	add("listen: " + listen.next(10*time.Second))
	add("listen: " + listen.next(10*time.Second))
	c2 := startCtl(t, p, "elect", "el", "p2")
	add("c2: " + c2.next(500*time.Millisecond))
	_ = c1.cmd.Process.Signal(syscall.SIGINT)
	add("c2: " + c2.next(10*time.Second))
	add("c2: " + c2.next(10*time.Second))
	add("listen: " + listen.next(10*time.Second))
	add("listen: " + listen.next(10*time.Second))
	add("c1: " + c1.next(10*time.Second))
	return out
}
