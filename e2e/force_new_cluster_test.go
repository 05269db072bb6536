package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// A three-member cluster loses two members for good (SIGKILL, data dirs
// deleted). The survivor, restarted with --force-new-cluster, is a
// one-member cluster with every acknowledged write, takes writes, and grows
// back to three members through MemberAdd; the new members get the data.
func TestForceNewCluster(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.ClusterOptions{Engine: "bolt"})
	// The leader has every acknowledged write in its log and knows it
	// committed; a follower may not yet, and force-new-cluster drops what
	// the member does not know committed (as etcd).
	lead := c.Leader(t)
	survivor := c.Members()[lead]
	cli := c.ClientFor(t, survivor.Endpoint())

	const n = 300
	acked := map[string]string{}
	for i := range n {
		k, v := fmt.Sprintf("k%04d", i), fmt.Sprintf("v%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Put(ctx, k, v)
		cancel()
		if err == nil {
			acked[k] = v
		}
	}
	if len(acked) < n/2 {
		t.Fatalf("only %d of %d puts acknowledged", len(acked), n)
	}
	for i, m := range c.Members() {
		if i == lead {
			continue
		}
		m.Kill()
		if err := os.RemoveAll(m.DataDir()); err != nil {
			t.Fatal(err)
		}
	}

	survivor.Stop()
	survivor.AddArgs("--force-new-cluster")
	survivor.Restart() // waits for a leader and a linearizable read
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cli = survivor.Client(t)
	ml, err := cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 1 || ml.Members[0].Name != survivor.Name() {
		t.Fatalf("member list after force-new-cluster: %v %v", ml, err)
	}
	checkKeys(t, "survivor", cli, acked, false)
	if _, err := cli.Put(ctx, "after-force", "1"); err != nil {
		t.Fatalf("put after force-new-cluster: %v", err)
	}
	acked["after-force"] = "1"

	added := []*harness.Process{c.AddMember(t, "m3", false), c.AddMember(t, "m4", false)}
	ml, err = cli.MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("member list after adding two members: %v %v", ml, err)
	}
	for _, m := range added {
		mc := c.ClientFor(t, m.Endpoint())
		eventually(t, m.Name()+" applied every write", convergeTimeout, func() error {
			r, err := mc.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
			if err != nil {
				return err
			}
			if r.Count != int64(len(acked)) {
				return fmt.Errorf("%d keys, want %d", r.Count, len(acked))
			}
			return nil
		})
		checkKeys(t, m.Name(), mc, acked, true)
		if _, err := mc.Put(ctx, "on-"+m.Name(), "1"); err != nil {
			t.Fatalf("put on %s: %v", m.Name(), err)
		}
		acked["on-"+m.Name()] = "1"
	}
}

// checkKeys reads every key in want from cli and compares its value.
func checkKeys(t *testing.T, who string, cli *clientv3.Client, want map[string]string, serializable bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if serializable {
		opts = append(opts, clientv3.WithSerializable())
	}
	r, err := cli.Get(ctx, "", opts...)
	if err != nil {
		t.Fatalf("%s: get all: %v", who, err)
	}
	got := map[string]string{}
	for _, kv := range r.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s: key %s = %q, want %q (acknowledged)", who, k, got[k], v)
		}
	}
}

// A member started alone out of a new three-member cluster cannot publish
// itself (no quorum, no leader) and says so in its default log within 10
// seconds, as etcd's "failed to publish local member to cluster through
// raft", instead of waiting silently.
func TestPublishWarnsWithoutQuorum(t *testing.T) {
	var urls []string
	for range 4 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		urls = append(urls, "http://"+ln.Addr().String())
		ln.Close()
	}
	p := harness.StartKVD(t, harness.Options{Engine: "bolt", Name: "m0", Member: &harness.MemberConfig{
		ClientURL:      urls[0],
		PeerListenURL:  urls[1],
		InitialCluster: "m0=" + urls[1] + ",m1=" + urls[2] + ",m2=" + urls[3],
		State:          "new",
		Token:          "publish-warning",
	}})
	const msg = "failed to publish local member to cluster through raft"
	eventually(t, "the publish warning in the log", 10*time.Second, func() error {
		if !p.LogContains(msg) {
			return fmt.Errorf("no %q", msg)
		}
		return nil
	})
}
