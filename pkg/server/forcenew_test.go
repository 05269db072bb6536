package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// A survivor of a three-member cluster whose other members are gone for
// good restarts with force-new-cluster as a one-member cluster with every
// write, serves writes, and grows again through MemberAdd.
func TestForceNewClusterSurvivor(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "bolt", "bolt")
	ms := startCluster(t, cs)
	for i := range 50 {
		put(t, ms[i%3], fmt.Sprintf("k%02d", i), "v")
	}
	// A follower may not know yet that the last writes are committed, and
	// force-new-cluster drops what it does not know committed (as etcd's):
	// let every member apply them first.
	for _, m := range ms {
		eventually(t, "every member applied every write", func() error {
			r, err := m.kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true, Serializable: true})
			if err != nil {
				return err
			}
			if r.Count != 50 {
				return fmt.Errorf("%d keys", r.Count)
			}
			return nil
		})
	}
	for _, m := range ms {
		m.stop()
	}

	cs[0].ForceNewCluster = true
	m := startMember(t, cs[0])
	put(t, m, "after", "1")
	r, err := m.kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true})
	if err != nil || r.Count != 50 {
		t.Fatalf("keys after force-new-cluster: %v %v", r, err)
	}
	ml, err := m.cluster().MemberList(ctx5(t), &pb.MemberListRequest{})
	if err != nil || len(ml.Members) != 1 || ml.Members[0].Name != "m1" {
		t.Fatalf("member list after force-new-cluster: %v %v", ml, err)
	}

	// A new member joins the one-member cluster.
	nc := testConfig(t, "bolt", t.TempDir())
	nc.Name = "m4"
	nc.HeartbeatInterval, nc.ElectionTimeout = 50, 500
	add, err := m.cluster().MemberAdd(ctx5(t), &pb.MemberAddRequest{PeerURLs: []string{nc.InitialAdvertisePeerURLs}})
	if err != nil {
		t.Fatalf("member add: %v", err)
	}
	if len(add.Members) != 2 {
		t.Fatalf("member add: %+v", add)
	}
	nc.InitialCluster = strings.Join([]string{"m1=" + cs[0].InitialAdvertisePeerURLs, "m4=" + nc.InitialAdvertisePeerURLs}, ",")
	nc.InitialClusterState = "existing"
	nc.Complete()
	if err := nc.Validate(); err != nil {
		t.Fatal(err)
	}
	m4 := startMember(t, nc)
	put(t, m4, "joined", "1")
	eventually(t, "the new member has every key", func() error {
		r, err := m4.kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("k"), RangeEnd: []byte("l"), CountOnly: true})
		if err != nil {
			return err
		}
		if r.Count != 50 {
			return fmt.Errorf("%d keys", r.Count)
		}
		return nil
	})
}

// A member whose cluster has no quorum says in its log, again and again,
// why it cannot publish itself.
func TestPublishWarnsWithoutQuorum(t *testing.T) {
	old := publishWarnInterval
	publishWarnInterval = 300 * time.Millisecond
	t.Cleanup(func() { publishWarnInterval = old })
	cs := clusterConfigs(t, "bolt", "bolt", "bolt")
	core, logs := observer.New(zapcore.WarnLevel)
	startMember(t, cs[0], fx.Decorate(func() *zap.Logger { return zap.New(core) }))
	deadline := time.Now().Add(10 * time.Second)
	for {
		warns := logs.FilterMessage("failed to publish local member to cluster through raft").All()
		if len(warns) >= 2 {
			if reason, _ := warns[0].ContextMap()["reason"].(string); !strings.Contains(reason, "no leader") {
				t.Fatalf("reason %q, want it to name the missing leader", reason)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d publish warnings after 10s", len(warns))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
