package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// convergeTimeout bounds how long members may take to agree after writes
// stop: applying is asynchronous on followers.
const convergeTimeout = 20 * time.Second

// forEachClusterEngine runs fn once per kvd storage engine, or once when
// the server under test is etcd (which has one engine).
func forEachClusterEngine(t *testing.T, fn func(t *testing.T, engine string)) {
	t.Helper()
	engines := harness.Engines()
	if harness.Kind() == harness.KindEtcd {
		engines = engines[:1]
	}
	for _, e := range engines {
		t.Run(e, func(t *testing.T) { fn(t, e) })
	}
}

// memberClients returns one client per member, each on that member's
// endpoint only.
func memberClients(t *testing.T, c *harness.Cluster) []*clientv3.Client {
	t.Helper()
	var out []*clientv3.Client
	for _, m := range c.Members() {
		out = append(out, c.ClientFor(t, m.Endpoint()))
	}
	return out
}

// eventually retries check until it returns nil or timeout passes, then
// fails the test with check's last error.
func eventually(t *testing.T, what string, timeout time.Duration, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shortCtx is a context for one request that must not hang.
func shortCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestClusterReplication runs one 3-member cluster through the basic
// guarantees of replication: read-your-writes across members, convergence
// of serializable reads, membership and status views, and equal HashKV on
// every member after a mixed workload; etcdctl sees the same.
func TestClusterReplication(t *testing.T) {
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		c := harness.StartCluster(t, 3, harness.ClusterOptions{Engine: engine})
		clis := memberClients(t, c)
		members := c.Members()

		t.Run("linearizable reads see writes on every member", func(t *testing.T) {
			for i, w := range clis {
				key, val := fmt.Sprintf("lin/%d", i), fmt.Sprintf("from-%s", members[i].Name())
				pr, err := w.Put(testCtx(t), key, val)
				mustOK(t, "put "+key+" on "+members[i].Name(), err)
				for j, r := range clis {
					g, err := r.Get(testCtx(t), key)
					mustOK(t, "linearizable get on "+members[j].Name(), err)
					if len(g.Kvs) != 1 || string(g.Kvs[0].Value) != val || g.Kvs[0].ModRevision != pr.Header.Revision {
						t.Errorf("put %s=%s on %s at revision %d; linearizable get on %s right after: %v",
							key, val, members[i].Name(), pr.Header.Revision, members[j].Name(), g.Kvs)
					}
					if g.Header.Revision < pr.Header.Revision {
						t.Errorf("get on %s after a put at revision %d: header revision %d", members[j].Name(), pr.Header.Revision, g.Header.Revision)
					}
				}
			}
		})

		t.Run("serializable reads converge", func(t *testing.T) {
			pr, err := clis[0].Put(testCtx(t), "ser", "v")
			mustOK(t, "put ser", err)
			for j, r := range clis {
				eventually(t, "serializable get on "+members[j].Name(), convergeTimeout, func() error {
					g, err := r.Get(shortCtx(t, 2*time.Second), "ser", clientv3.WithSerializable())
					if err != nil {
						return err
					}
					if len(g.Kvs) != 1 || g.Kvs[0].ModRevision != pr.Header.Revision {
						return fmt.Errorf("got %v, want ser=v at revision %d", g.Kvs, pr.Header.Revision)
					}
					return nil
				})
			}
		})

		t.Run("member list", func(t *testing.T) {
			for j, r := range clis {
				ml, err := r.MemberList(testCtx(t))
				mustOK(t, "member list on "+members[j].Name(), err)
				checkMemberList(t, members[j].Name(), ml.Members, members)
			}
		})

		t.Run("status", func(t *testing.T) {
			eventually(t, "same leader and raft index on every member", convergeTimeout, func() error {
				var sts []*clientv3.StatusResponse
				for _, m := range members {
					st, err := c.Status(m, 2*time.Second)
					if err != nil {
						return err
					}
					sts = append(sts, st)
				}
				for i, st := range sts {
					if st.Leader == 0 || st.Leader != sts[0].Leader {
						return fmt.Errorf("%s reports leader %x, %s %x", members[i].Name(), st.Leader, members[0].Name(), sts[0].Leader)
					}
					if st.RaftIndex != sts[0].RaftIndex || st.RaftAppliedIndex != st.RaftIndex {
						return fmt.Errorf("%s at raft index %d applied %d, %s at %d", members[i].Name(), st.RaftIndex, st.RaftAppliedIndex, members[0].Name(), sts[0].RaftIndex)
					}
				}
				return nil
			})
			l := c.Leader(t)
			if l < 0 {
				t.Fatalf("no member reports itself leader")
			}
			st, err := c.Status(members[l], 2*time.Second)
			mustOK(t, "status of leader", err)
			if st.Leader != st.Header.MemberId {
				t.Errorf("leader %s reports leader %x, its id %x", members[l].Name(), st.Leader, st.Header.MemberId)
			}
		})

		t.Run("hashkv equal after mixed workload", func(t *testing.T) {
			rev := mixedWorkload(t, clis)
			waitHashKVEqual(t, c, rev)
		})

		t.Run("etcdctl", func(t *testing.T) {
			checkEtcdctlCluster(t, c)
		})
	})
}

// checkMemberList asserts that got lists exactly the processes in want,
// by name, peer URL and client URL.
func checkMemberList(t *testing.T, on string, got []*pb.Member, want []*harness.Process) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("member list on %s: %d members, want %d: %v", on, len(got), len(want), got)
		return
	}
	ids := map[uint64]bool{}
	for _, p := range want {
		i := slices.IndexFunc(got, func(m *pb.Member) bool { return m.Name == p.Name() })
		if i < 0 {
			t.Errorf("member list on %s: no member named %s in %v", on, p.Name(), got)
			continue
		}
		m := got[i]
		ids[m.ID] = true
		if m.ID == 0 || m.IsLearner {
			t.Errorf("member list on %s: %s has id %x learner %v", on, p.Name(), m.ID, m.IsLearner)
		}
		if !slices.Equal(m.PeerURLs, []string{p.PeerURL()}) || !slices.Equal(m.ClientURLs, []string{p.Endpoint()}) {
			t.Errorf("member list on %s: %s has peer URLs %v client URLs %v, want [%s] [%s]", on, p.Name(), m.PeerURLs, m.ClientURLs, p.PeerURL(), p.Endpoint())
		}
	}
	if len(ids) != len(want) {
		t.Errorf("member list on %s: ids not distinct: %v", on, got)
	}
}

// mixedWorkload runs puts, deletes, txns and a compaction spread over the
// members and returns the revision after the last write.
func mixedWorkload(t *testing.T, clis []*clientv3.Client) int64 {
	t.Helper()
	ctx := testCtx(t)
	var rev int64
	for i := range 300 {
		cli := clis[i%len(clis)]
		key := fmt.Sprintf("mix/%03d", i%50)
		switch i % 6 {
		case 0, 1, 2:
			r, err := cli.Put(ctx, key, fmt.Sprintf("v%d", i))
			mustOK(t, "put "+key, err)
			rev = r.Header.Revision
		case 3:
			r, err := cli.Delete(ctx, key)
			mustOK(t, "delete "+key, err)
			rev = max(rev, r.Header.Revision)
		case 4:
			r, err := cli.Txn(ctx).
				If(clientv3.Compare(clientv3.Version(key), ">", 0)).
				Then(clientv3.OpPut(key, "txn-then"), clientv3.OpDelete(key+"/x")).
				Else(clientv3.OpPut(key, "txn-else")).
				Commit()
			mustOK(t, "txn on "+key, err)
			rev = max(rev, r.Header.Revision)
		case 5:
			r, err := cli.Delete(ctx, fmt.Sprintf("mix/%02d", i%5), clientv3.WithPrefix())
			mustOK(t, "delete prefix", err)
			rev = max(rev, r.Header.Revision)
		}
		if i == 200 {
			_, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical())
			mustOK(t, fmt.Sprintf("compact at %d", rev), err)
		}
	}
	return rev
}

// waitHashKVEqual waits until every member has applied rev and reports the
// same HashKV at it.
func waitHashKVEqual(t *testing.T, c *harness.Cluster, rev int64) {
	t.Helper()
	cli := c.Client(t)
	eventually(t, fmt.Sprintf("equal HashKV at revision %d", rev), convergeTimeout, func() error {
		var hashes []string
		var first uint32
		for i, m := range c.Members() {
			h, err := cli.HashKV(shortCtx(t, 5*time.Second), m.Endpoint(), rev)
			if err != nil {
				return fmt.Errorf("hashkv on %s: %w", m.Name(), err)
			}
			hashes = append(hashes, fmt.Sprintf("%s:%d(compact %d)", m.Name(), h.Hash, h.CompactRevision))
			if i == 0 {
				first = h.Hash
			} else if h.Hash != first {
				return fmt.Errorf("hashes differ: %v", hashes)
			}
		}
		return nil
	})
}

// checkEtcdctlCluster runs etcdctl's cluster-wide endpoint status and
// hashkv against c.
func checkEtcdctlCluster(t *testing.T, c *harness.Cluster) {
	t.Helper()
	bin := harness.EtcdctlBinary(t)
	run := func(args ...string) []byte {
		t.Helper()
		all := append([]string{"--endpoints", strings.Join(c.Endpoints(), ","), "--dial-timeout", "5s", "--command-timeout", "20s"}, args...)
		cmd := exec.Command(bin, all...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		cmd.Env = etcdctlEnv()
		if err := cmd.Run(); err != nil {
			t.Fatalf("etcdctl %s: %v\nstdout: %s\nstderr: %s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.Bytes()
	}

	var statuses []struct {
		Endpoint string
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			} `json:"header"`
			Leader uint64 `json:"leader"`
		}
	}
	out := run("endpoint", "status", "--cluster", "-w", "json")
	if err := json.Unmarshal(out, &statuses); err != nil {
		t.Fatalf("endpoint status --cluster: %v in %s", err, out)
	}
	if len(statuses) != len(c.Members()) {
		t.Errorf("endpoint status --cluster: %d endpoints, want %d: %s", len(statuses), len(c.Members()), out)
	}
	leaders := 0
	for _, s := range statuses {
		if s.Status.Header.MemberID != 0 && s.Status.Leader == s.Status.Header.MemberID {
			leaders++
		}
		if s.Status.Leader == 0 || s.Status.Leader != statuses[0].Status.Leader {
			t.Errorf("endpoint status --cluster: leaders disagree: %s", out)
		}
	}
	if leaders != 1 {
		t.Errorf("endpoint status --cluster: %d members report themselves leader, want 1: %s", leaders, out)
	}

	var hashes []struct {
		Endpoint string
		HashKV   struct {
			Hash uint32 `json:"hash"`
		}
	}
	eventually(t, "etcdctl endpoint hashkv --cluster equal", convergeTimeout, func() error {
		out = run("endpoint", "hashkv", "--cluster", "-w", "json")
		hashes = nil
		if err := json.Unmarshal(out, &hashes); err != nil {
			t.Fatalf("endpoint hashkv --cluster: %v in %s", err, out)
		}
		if len(hashes) != len(c.Members()) {
			t.Fatalf("endpoint hashkv --cluster: %d endpoints, want %d: %s", len(hashes), len(c.Members()), out)
		}
		for _, h := range hashes {
			if h.HashKV.Hash == 0 || h.HashKV.Hash != hashes[0].HashKV.Hash {
				return fmt.Errorf("hashes differ: %s", out)
			}
		}
		return nil
	})
}

// etcdctlEnv is the environment without ETCDCTL_* settings of the caller.
func etcdctlEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "ETCDCTL_") {
			env = append(env, e)
		}
	}
	return env
}
