package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/bolt"
	"github.com/kvd-dev/kvd/pkg/config"
)

// clusterConfigs returns configs for a new cluster of the given engines,
// members m1..mN on free loopback ports.
func clusterConfigs(t testing.TB, engines ...string) []*config.Config {
	t.Helper()
	var cs []*config.Config
	var ic []string
	for i, e := range engines {
		c := testConfig(t, e, t.TempDir())
		c.Name = fmt.Sprintf("m%d", i+1)
		c.HeartbeatInterval, c.ElectionTimeout = 50, 500
		cs = append(cs, c)
		ic = append(ic, c.Name+"="+c.InitialAdvertisePeerURLs)
	}
	for _, c := range cs {
		c.InitialCluster = strings.Join(ic, ",")
		c.InitialClusterToken = t.Name()
		c.Complete()
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	return cs
}

// startCluster starts the members concurrently: none is ready alone.
func startCluster(t *testing.T, cs []*config.Config) []*member {
	t.Helper()
	ms := make([]*member, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms[i] = startMember(t, c)
		}()
	}
	wg.Wait()
	// startMember's Fatal on another goroutine only ends that goroutine.
	for _, m := range ms {
		if m == nil {
			t.FailNow()
		}
	}
	return ms
}

func (m *member) maint() pb.MaintenanceClient { return pb.NewMaintenanceClient(m.conn) }
func (m *member) cluster() pb.ClusterClient   { return pb.NewClusterClient(m.conn) }

// eventually retries f until it returns nil or 20 s pass.
func eventually(t testing.TB, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctx5(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Three members on mixed engines: a write on any member is seen at once by
// a linearizable read on every member, MemberList shows everyone with the
// client URLs they published, and the members' hashes agree.
func TestThreeMembersAgree(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "badger", "bolt")
	ms := startCluster(t, cs)
	for i, m := range ms {
		put(t, m, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
		for j, o := range ms {
			resp, err := o.kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte(fmt.Sprintf("k%d", i))})
			if err != nil || len(resp.Kvs) != 1 {
				t.Fatalf("read k%d on m%d after writing on m%d: %v %v", i, j+1, i+1, resp, err)
			}
		}
	}
	eventually(t, "member list with client URLs", func() error {
		resp, err := ms[1].cluster().MemberList(ctx5(t), &pb.MemberListRequest{})
		if err != nil {
			return err
		}
		if len(resp.Members) != 3 {
			return fmt.Errorf("%d members", len(resp.Members))
		}
		for _, pm := range resp.Members {
			var c *config.Config
			for _, cc := range cs {
				if cc.Name == pm.Name {
					c = cc
				}
			}
			if c == nil || len(pm.ClientURLs) != 1 || pm.ClientURLs[0] != c.AdvertiseClientURLs || pm.PeerURLs[0] != c.InitialAdvertisePeerURLs {
				return fmt.Errorf("member %+v", pm)
			}
		}
		return nil
	})
	eventually(t, "equal hashes", func() error { return sameHash(t, ms) })
	before, err := ms[0].maint().Hash(ctx5(t), &pb.HashRequest{})
	if err != nil {
		t.Fatal(err)
	}
	put(t, ms[0], "k0", "changed")
	after, err := ms[0].maint().Hash(ctx5(t), &pb.HashRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if after.Hash == before.Hash || after.Header.Revision <= before.Header.Revision {
		t.Fatalf("backend hash %d at %d before a put, %d at %d after", before.Hash, before.Header.Revision, after.Hash, after.Header.Revision)
	}
	eventually(t, "equal hashes after the put", func() error { return sameHash(t, ms) })
	leaders := map[uint64]bool{}
	for _, m := range ms {
		st, err := m.maint().Status(ctx5(t), &pb.StatusRequest{})
		if err != nil {
			t.Fatal(err)
		}
		leaders[st.Leader] = true
	}
	if len(leaders) != 1 {
		t.Fatalf("members see leaders %v", leaders)
	}
}

// sameHash reports whether the running members agree on HashKV at one
// revision and on the whole-backend Hash, whatever their engines.
func sameHash(t testing.TB, ms []*member) error {
	var first *pb.HashKVResponse
	var firstWhole *pb.HashResponse
	for i, m := range ms {
		if m.app == nil {
			continue
		}
		st, err := m.maint().Status(ctx5(t), &pb.StatusRequest{})
		if err != nil {
			return err
		}
		h, err := m.maint().HashKV(ctx5(t), &pb.HashKVRequest{Revision: st.Header.Revision})
		if err != nil {
			return err
		}
		whole, err := m.maint().Hash(ctx5(t), &pb.HashRequest{})
		if err != nil {
			return err
		}
		if first == nil {
			first, firstWhole = h, whole
			continue
		}
		if h.HashRevision != first.HashRevision || h.Hash != first.Hash {
			return fmt.Errorf("member %d: hash %d at %d, first member %d at %d", i+1, h.Hash, h.HashRevision, first.Hash, first.HashRevision)
		}
		if whole.Header.Revision != firstWhole.Header.Revision || whole.Hash != firstWhole.Hash {
			return fmt.Errorf("member %d: backend hash %d at %d, first member %d at %d", i+1, whole.Hash, whole.Header.Revision, firstWhole.Hash, firstWhole.Header.Revision)
		}
	}
	return nil
}

// A member that was down while the others wrote past their snapshot and
// the catch-up entries comes back by installing the leader's snapshot, on
// another engine than the leader's, then the log tail. (Watchers across an
// install: watchhub's TestResyncAfterStoreReset.)
func TestLaggingMemberInstallsSnapshot(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "bolt", "badger")
	for _, c := range cs {
		c.SnapshotCount = 100
		c.SnapshotCatchupEntries = 10
	}
	ms := startCluster(t, cs)
	put(t, ms[0], "before", "1")
	eventually(t, "m3 has the first write", func() error {
		r, err := ms[2].kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("before"), Serializable: true})
		if err == nil && len(r.Kvs) == 0 {
			err = errors.New("not yet")
		}
		return err
	})
	ms[2].stop()
	for i := 0; i < 400; i++ {
		put(t, ms[i%2], fmt.Sprintf("key-%03d", i), "v")
	}
	ms[2] = startMember(t, cs[2])
	eventually(t, "m3 caught up", func() error {
		r, err := ms[2].kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("key-"), RangeEnd: []byte("key."), CountOnly: true, Serializable: true})
		if err == nil && r.Count != 400 {
			err = fmt.Errorf("%d keys", r.Count)
		}
		return err
	})
	eventually(t, "equal hashes", func() error { return sameHash(t, ms) })
	if got := metric(t, cs[2], "etcd_network_snapshot_receive_success"); got < 1 {
		t.Fatalf("m3 received %v snapshots, want at least 1", got)
	}
	put(t, ms[2], "after", "1")
	if r, err := ms[0].kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("after")}); err != nil || len(r.Kvs) != 1 {
		t.Fatalf("write through the caught-up member: %v %v", r, err)
	}
}

// Membership changes through the Cluster API with etcd's rules: a learner
// is refused writes and linearizable reads, cannot be promoted while it is
// missing from raft's view, two learners are refused; a removed member is
// gone from the list.
func TestMembershipChanges(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "bolt", "bolt")
	ms := startCluster(t, cs)
	put(t, ms[0], "x", "1")
	// A follower relays promotions to the leader's published client URL.
	waitClientURLs(t, ms[2])

	add, err := ms[1].cluster().MemberAdd(ctx5(t), &pb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:1"}, IsLearner: true})
	if err != nil {
		t.Fatalf("add learner: %v", err)
	}
	if !add.Member.IsLearner || len(add.Members) != 4 {
		t.Fatalf("add learner: %+v", add)
	}
	_, err = ms[0].cluster().MemberAdd(ctx5(t), &pb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:2"}, IsLearner: true})
	if !errors.Is(toEtcdErr(err), rpctypes.ErrTooManyLearners) {
		t.Fatalf("second learner: %v", err)
	}
	_, err = ms[0].cluster().MemberAdd(ctx5(t), &pb.MemberAddRequest{PeerURLs: []string{cs[1].InitialAdvertisePeerURLs}})
	if !errors.Is(toEtcdErr(err), rpctypes.ErrPeerURLExist) {
		t.Fatalf("add with a used peer URL: %v", err)
	}
	_, err = ms[0].cluster().MemberAdd(ctx5(t), &pb.MemberAddRequest{PeerURLs: []string{"ftp://x"}})
	if !errors.Is(toEtcdErr(err), rpctypes.ErrMemberBadURLs) {
		t.Fatalf("add with a bad URL: %v", err)
	}
	// The learner never started: its log is empty, it is not ready.
	_, err = ms[2].cluster().MemberPromote(ctx5(t), &pb.MemberPromoteRequest{ID: add.Member.ID})
	if !errors.Is(toEtcdErr(err), rpctypes.ErrMemberLearnerNotReady) {
		t.Fatalf("promote a learner that is behind: %v", err)
	}
	_, err = ms[0].cluster().MemberPromote(ctx5(t), &pb.MemberPromoteRequest{ID: cs2ID(t, ms[0], "m2")})
	if !errors.Is(toEtcdErr(err), rpctypes.ErrMemberNotLearner) {
		t.Fatalf("promote a voter: %v", err)
	}
	upd, err := ms[0].cluster().MemberUpdate(ctx5(t), &pb.MemberUpdateRequest{ID: add.Member.ID, PeerURLs: []string{"http://127.0.0.1:3"}})
	if err != nil || len(upd.Members) != 4 {
		t.Fatalf("update: %v %v", upd, err)
	}
	if _, err := ms[0].cluster().MemberRemove(ctx5(t), &pb.MemberRemoveRequest{ID: add.Member.ID}); err != nil {
		t.Fatalf("remove learner: %v", err)
	}
	_, err = ms[0].cluster().MemberRemove(ctx5(t), &pb.MemberRemoveRequest{ID: add.Member.ID})
	if !errors.Is(toEtcdErr(err), rpctypes.ErrMemberNotFound) {
		t.Fatalf("remove twice: %v", err)
	}
	eventually(t, "three members everywhere", func() error {
		for _, m := range ms {
			r, err := m.cluster().MemberList(ctx5(t), &pb.MemberListRequest{})
			if err != nil {
				return err
			}
			if len(r.Members) != 3 {
				return fmt.Errorf("%d members", len(r.Members))
			}
		}
		return nil
	})
	put(t, ms[2], "y", "2")
}

// A member removed while it was down never applies its removal: the peers
// refuse its streams, and it stops on its own as etcd's does, instead of
// campaigning forever.
func TestMemberRemovedWhileDownStops(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "bolt", "bolt")
	ms := startCluster(t, cs)
	put(t, ms[0], "x", "1")
	id := cs2ID(t, ms[0], "m3")
	ms[2].stop()
	eventually(t, "remove m3 while it is down", func() error {
		_, err := ms[0].cluster().MemberRemove(ctx5(t), &pb.MemberRemoveRequest{ID: id})
		return err
	})
	put(t, ms[1], "y", "2")

	m := startMember(t, cs[2])
	select {
	case sig := <-m.app.Wait():
		if sig.ExitCode != 0 {
			t.Fatalf("removed member stopped with exit code %d, want 0", sig.ExitCode)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a member removed while down kept running")
	}
	r, err := ms[0].cluster().MemberList(ctx5(t), &pb.MemberListRequest{})
	if err != nil || len(r.Members) != 2 {
		t.Fatalf("member list after removal: %v %v", r, err)
	}
}

func cs2ID(t testing.TB, m *member, name string) uint64 {
	t.Helper()
	r, err := m.cluster().MemberList(ctx5(t), &pb.MemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, pm := range r.Members {
		if pm.Name == name {
			return pm.ID
		}
	}
	t.Fatalf("no member %s", name)
	return 0
}

func toEtcdErr(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return rpctypes.Error(err)
	}
	return err
}

// A data dir remembers whose it is: another member's name or another
// cluster's token is refused with a clear error, and joining a cluster no
// peer of which answers fails instead of starting alone.
func TestDataDirIdentity(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	m := startMember(t, c)
	put(t, m, "a", "1")
	m.stop()

	other := *c
	other.Name = "m2"
	other.InitialCluster = "m2=" + c.InitialAdvertisePeerURLs
	if err := startErr(t, &other); err == nil || !strings.Contains(err.Error(), `belongs to member "m1"`) {
		t.Fatalf("start with another name: %v", err)
	}
	tok := *c
	tok.InitialClusterToken = "another-cluster"
	if err := startErr(t, &tok); err == nil || !strings.Contains(err.Error(), "mismatched cluster ID") {
		t.Fatalf("start with another token: %v", err)
	}
	startMember(t, c).stop()

	join := testConfig(t, "bolt", t.TempDir())
	join.Name = "j"
	join.InitialCluster = "j=" + join.InitialAdvertisePeerURLs + ",gone=http://127.0.0.1:1"
	join.InitialClusterState = "existing"
	if err := startErr(t, join); err == nil || !strings.Contains(err.Error(), "join existing cluster") {
		t.Fatalf("join with no peer: %v", err)
	}
}

// startErr starts a member expected to fail and returns why.
func startErr(t testing.TB, c *config.Config) error {
	t.Helper()
	app := fx.New(fx.Supply(c, zap.NewNop()), fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }), Module())
	if err := app.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	err := app.Start(ctx)
	if err == nil {
		_ = app.Stop(ctx)
	}
	return err
}

// metric sums the samples of a metric on a member's /metrics.
func metric(t testing.TB, c *config.Config, name string) float64 {
	t.Helper()
	resp, err := http.Get(c.AdvertiseClientURLs + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// A member whose backend diverged from its peers' is refused at start with
// initial-corrupt-check; a healthy one starts.
func TestInitialCorruptCheck(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "bolt", "bolt")
	for _, c := range cs {
		c.InitialCorruptCheck = true
	}
	ms := startCluster(t, cs)
	for i := 0; i < 20; i++ {
		put(t, ms[0], fmt.Sprintf("k%d", i), "v")
	}
	eventually(t, "equal hashes", func() error { return sameHash(t, ms) })
	ms[2].stop()
	ms[2] = startMember(t, cs[2]) // the check passes on equal data
	ms[2].stop()

	be, err := bolt.Open(backend.Options{Dir: cs[2].BackendDir()}, bolt.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = be.Update(func(tx backend.WriteTx) error {
		var k, v []byte
		if err := tx.Range(backend.Key, nil, nil, 0, func(kk, vv []byte) bool {
			k, v = bytes.Clone(kk), bytes.Clone(vv)
			return true
		}); err != nil {
			return err
		}
		kv := &mvccpb.KeyValue{}
		if err := proto.Unmarshal(v, kv); err != nil {
			return err
		}
		kv.Value = []byte("diverged")
		nv, err := proto.Marshal(kv)
		if err != nil {
			return err
		}
		return tx.Put(backend.Key, k, nv)
	})
	if cerr := be.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("corrupt m3's backend: %v", err)
	}
	if err := startErr(t, cs[2]); err == nil || !strings.Contains(err.Error(), "data inconsistency") {
		t.Fatalf("start of a diverged member: %v, want a data inconsistency error", err)
	}
}

// clientv3.WithRequireLeader: once a member has lost its leader, a watch
// stream that requires one ends with etcd's "no leader", and a request
// that requires one is refused, as etcd does; without the metadata the
// stream stays open.
func TestRequireLeader(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "bolt", "bolt")
	ms := startCluster(t, cs)
	put(t, ms[0], "w", "0")
	rl := metadata.AppendToOutgoingContext(context.Background(), rpctypes.MetadataRequireLeaderKey, rpctypes.MetadataHasLeader)
	ctx, cancel := context.WithCancel(rl)
	defer cancel()
	w, err := pb.NewWatchClient(ms[0].conn).Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := pb.NewWatchClient(ms[0].conn).Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []pb.Watch_WatchClient{w, plain} {
		if err := s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("w")}}}); err != nil {
			t.Fatal(err)
		}
		if r, err := s.Recv(); err != nil || !r.Created {
			t.Fatalf("create watch: %v %v", r, err)
		}
	}
	ms[1].stop()
	ms[2].stop()
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := w.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if !errors.Is(toEtcdErr(err), rpctypes.ErrNoLeader) {
			t.Fatalf("watch ended with %v, want no leader", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("watch that requires a leader still open 20 s after the quorum went away")
	}
	rctx, rcancel := context.WithTimeout(rl, 5*time.Second)
	defer rcancel()
	if _, err := ms[0].kv.Range(rctx, &pb.RangeRequest{Key: []byte("w"), Serializable: true}); !errors.Is(toEtcdErr(err), rpctypes.ErrNoLeader) {
		t.Fatalf("range requiring a leader: %v, want no leader", err)
	}
	if _, err := ms[0].kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("w"), Serializable: true}); err != nil {
		t.Fatalf("serializable range without the requirement: %v", err)
	}
	if err := plain.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}); err != nil {
		t.Fatalf("the plain watch stream ended: %v", err)
	}
}

// leaderIndex returns the index of the member that leads.
func leaderIndex(t testing.TB, ms []*member) int {
	t.Helper()
	var idx int
	eventually(t, "a leader", func() error {
		for i, m := range ms {
			if m.app == nil {
				continue
			}
			st, err := m.maint().Status(ctx5(t), &pb.StatusRequest{})
			if err != nil {
				return err
			}
			if st.Leader == st.Header.MemberId {
				idx = i
				return nil
			}
		}
		return errors.New("no member leads")
	})
	return idx
}

// Leases in a cluster: keep-alives and time-to-live work through any
// member (followers relay them), the lease survives a leadership transfer
// (extended on promotion), and once keep-alives stop the new leader
// revokes it and its key goes.
func TestLeasesAcrossLeaderChange(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "bolt", "bolt")
	ms := startCluster(t, cs)
	lead := leaderIndex(t, ms)
	f1, f2 := (lead+1)%3, (lead+2)%3
	lc := pb.NewLeaseClient(ms[f1].conn)
	var g *pb.LeaseGrantResponse
	eventually(t, "grant", func() (err error) {
		g, err = lc.LeaseGrant(ctx5(t), &pb.LeaseGrantRequest{TTL: 3})
		return err
	})
	if _, err := ms[f2].kv.Put(ctx5(t), &pb.PutRequest{Key: []byte("leased"), Value: []byte("v"), Lease: g.ID}); err != nil {
		t.Fatal(err)
	}
	waitClientURLs(t, ms[f1])
	ka, err := pb.NewLeaseClient(ms[f2].conn).LeaseKeepAlive(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	keepAlive := func() {
		t.Helper()
		if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: g.ID}); err != nil {
			t.Fatal(err)
		}
		r, err := ka.Recv()
		if err != nil || r.TTL != 3 {
			t.Fatalf("keep-alive through a follower: %v %v", r, err)
		}
	}
	keepAlive()
	if _, err := ms[lead].maint().MoveLeader(ctx5(t), &pb.MoveLeaderRequest{TargetID: mustID(t, ms[f1])}); err != nil {
		t.Fatalf("move leader: %v", err)
	}
	if got := leaderIndex(t, ms); got != f1 {
		t.Fatalf("leader is m%d after moving it to m%d", got+1, f1+1)
	}
	eventually(t, "keep-alive after the transfer", func() error {
		if err := ka.Send(&pb.LeaseKeepAliveRequest{ID: g.ID}); err != nil {
			return err
		}
		r, err := ka.Recv()
		if err == nil && r.TTL != 3 {
			err = fmt.Errorf("TTL %d", r.TTL)
		}
		return err
	})
	ttl, err := pb.NewLeaseClient(ms[lead].conn).LeaseTimeToLive(ctx5(t), &pb.LeaseTimeToLiveRequest{ID: g.ID, Keys: true})
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 {
		t.Fatalf("time-to-live on the old leader: %v %v", ttl, err)
	}
	_ = ka.CloseSend()
	// Unrenewed: the lease expires (TTL plus at most the promotion
	// extension) and the leader revokes it.
	eventually(t, "key deleted at expiry", func() error {
		r, err := ms[f2].kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("leased")})
		if err == nil && len(r.Kvs) != 0 {
			err = errors.New("still there")
		}
		return err
	})
}

func mustID(t testing.TB, m *member) uint64 {
	t.Helper()
	st, err := m.maint().Status(ctx5(t), &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return st.Header.MemberId
}

// Five members tolerate two down; with three down a write fails with
// etcd's error instead of hanging, and succeeds again once one is back.
func TestFiveMembersQuorum(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "bolt", "bolt", "badger", "bolt")
	ms := startCluster(t, cs)
	put(t, ms[4], "a", "1")
	ms[0].stop()
	ms[1].stop()
	put(t, ms[3], "b", "2")
	ms[2].stop()
	_, err := ms[3].kv.Put(context.Background(), &pb.PutRequest{Key: []byte("c"), Value: []byte("3")})
	if e := toEtcdErr(err); !errors.Is(e, rpctypes.ErrTimeout) && !errors.Is(e, rpctypes.ErrNoLeader) {
		t.Fatalf("put without quorum: %v, want request timed out or no leader", err)
	}
	ms[2] = startMember(t, cs[2])
	put(t, ms[4], "c", "3")
	eventually(t, "equal hashes", func() error { return sameHash(t, ms) })
}

// waitClientURLs waits until m's member list has every member's client URLs
// (each member publishes them through raft after it starts).
func waitClientURLs(t testing.TB, m *member) {
	t.Helper()
	eventually(t, "client URLs published", func() error {
		r, err := m.cluster().MemberList(ctx5(t), &pb.MemberListRequest{})
		if err != nil {
			return err
		}
		for _, pm := range r.Members {
			if len(pm.ClientURLs) == 0 {
				return fmt.Errorf("%s has no client URLs yet", pm.Name)
			}
		}
		return nil
	})
}

// A learner added after the leader's last raft snapshot joins from a
// snapshot (the leader describes its backend with the configuration that
// includes the learner), catches up, is promoted, and serves writes.
func TestLearnerJoinsFromSnapshot(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "bolt", "bolt")
	for _, c := range cs {
		c.SnapshotCount = 100
		c.SnapshotCatchupEntries = 10
	}
	ms := startCluster(t, cs)
	for i := 0; i < 300; i++ {
		put(t, ms[i%3], fmt.Sprintf("key-%03d", i), "v")
	}
	waitClientURLs(t, ms[0])
	nc := testConfig(t, "badger", t.TempDir())
	nc.Name = "m4"
	nc.HeartbeatInterval, nc.ElectionTimeout = 50, 500
	nc.SnapshotCount, nc.SnapshotCatchupEntries = 100, 10
	add, err := ms[0].cluster().MemberAdd(ctx5(t), &pb.MemberAddRequest{PeerURLs: []string{nc.InitialAdvertisePeerURLs}, IsLearner: true})
	if err != nil {
		t.Fatalf("add learner: %v", err)
	}
	nc.InitialCluster = cs[0].InitialCluster + ",m4=" + nc.InitialAdvertisePeerURLs
	nc.InitialClusterState = "existing"
	nc.InitialClusterToken = cs[0].InitialClusterToken
	nc.Complete()
	if err := nc.Validate(); err != nil {
		t.Fatal(err)
	}
	m4 := startMember(t, nc)
	eventually(t, "learner caught up", func() error {
		r, err := m4.kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("key-"), RangeEnd: []byte("key."), CountOnly: true, Serializable: true})
		if err == nil && r.Count != 300 {
			err = fmt.Errorf("%d keys", r.Count)
		}
		return err
	})
	if got := metric(t, nc, "etcd_network_snapshot_receive_success"); got < 1 {
		t.Fatalf("the learner received %v snapshots, want at least 1", got)
	}
	if _, err := m4.kv.Put(ctx5(t), &pb.PutRequest{Key: []byte("l"), Value: []byte("v")}); status.Convert(err).Message() != status.Convert(rpctypes.ErrGRPCNotSupportedForLearner).Message() {
		t.Fatalf("put on a learner: %v", err)
	}
	eventually(t, "promote", func() error {
		_, err := ms[1].cluster().MemberPromote(ctx5(t), &pb.MemberPromoteRequest{ID: add.Member.ID})
		return err
	})
	eventually(t, "write through the promoted member", func() error {
		_, err := m4.kv.Put(ctx5(t), &pb.PutRequest{Key: []byte("l"), Value: []byte("v")})
		return err
	})
	eventually(t, "equal hashes", func() error { return sameHash(t, append(ms, m4)) })
}

// Writes to every member of three, many at once: the members turn entry
// batching on (each reads batches), batch, and agree on every key.
func TestThreeMembersBatchWrites(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "badger", "bolt")
	ms := startCluster(t, cs)
	eventually(t, "batching on everywhere", func() error {
		for i, c := range cs {
			if v := metric(t, c, "kvd_raft_entry_batching"); v != 1 {
				return fmt.Errorf("m%d: kvd_raft_entry_batching %v", i+1, v)
			}
		}
		return nil
	})
	const writers, each = 16, 40
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := ms[w%len(ms)]
			for i := 0; i < each; i++ {
				k, v := fmt.Sprintf("w%02d/%d", w, i%8), fmt.Sprintf("%d", i)
				if _, err := m.kv.Put(ctx5(t), &pb.PutRequest{Key: []byte(k), Value: []byte(v)}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var batched float64
	for _, c := range cs {
		batched += metric(t, c, "kvd_raft_batched_entries_total")
	}
	if batched == 0 {
		t.Fatal("no member proposed a batched entry")
	}
	eventually(t, "equal hashes", func() error { return sameHash(t, ms) })
	for j, m := range ms {
		resp, err := m.kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("w"), RangeEnd: []byte("x"), Serializable: true})
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) != writers*8 {
			t.Fatalf("m%d: %d keys, want %d", j+1, len(resp.Kvs), writers*8)
		}
		for _, kv := range resp.Kvs {
			// Each key was written each/8 times, the last value each-8+i%8.
			var w, i int
			if _, err := fmt.Sscanf(string(kv.Key), "w%02d/%d", &w, &i); err != nil {
				t.Fatal(err)
			}
			if want := fmt.Sprint(each - 8 + i); string(kv.Value) != want || kv.Version != each/8 {
				t.Fatalf("m%d: %s = %s version %d, want %s version %d", j+1, kv.Key, kv.Value, kv.Version, want, each/8)
			}
		}
	}
	t.Logf("%v batched entries", batched)

	// A member down turns batching off on the others; restarted, it
	// replays the batched entries in its WAL and agrees again.
	ms[1].stop()
	eventually(t, "batching off without m2", func() error {
		for _, i := range []int{0, 2} {
			if v := metric(t, cs[i], "kvd_raft_entry_batching"); v != 0 {
				return fmt.Errorf("m%d: kvd_raft_entry_batching %v", i+1, v)
			}
		}
		return nil
	})
	put(t, ms[0], "while-m2-down", "1")
	ms[1] = startMember(t, cs[1])
	eventually(t, "batching on again", func() error {
		for i, c := range cs {
			if v := metric(t, c, "kvd_raft_entry_batching"); v != 1 {
				return fmt.Errorf("m%d: kvd_raft_entry_batching %v", i+1, v)
			}
		}
		return nil
	})
	eventually(t, "equal hashes after m2's restart", func() error { return sameHash(t, ms) })
}
