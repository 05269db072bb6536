package apply

import (
	"fmt"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
	"github.com/kvd-dev/kvd/pkg/entrybatch"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

type snapCall struct{ index, keep uint64 }

type recordSnapshots struct{ calls []snapCall }

func (r *recordSnapshots) CreateSnapshotKeeping(index uint64, _ *raftpb.ConfState, _ []byte, keep uint64) error {
	r.calls = append(r.calls, snapCall{index, keep})
	return nil
}

// snapshot-count counts requests, as etcd's "committed transactions", not
// entries: a batched entry counts each request it carries, so batching
// does not stretch the raft log kept in memory and on disk. The entries
// kept for slow followers hold about snapshot-catchup-entries requests.
func TestSnapshotEveryCountRequests(t *testing.T) {
	st, err := mvcc.Open(enginetest.OpenT(t, enginetest.Names[0]), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	snaps := &recordSnapshots{}
	a := New(Config{Store: st, Registry: NewRegistry(), Applied: NewApplied(0),
		Snapshots: snaps, SnapshotCount: 100, SnapshotCatchup: 50, ConfState: &raftpb.ConfState{Voters: []uint64{1}}})
	// Entries of 10 requests each: the 10th entry reaches 100 requests.
	seq := 0
	batch := func(n int) []byte {
		data := entrybatch.Begin(nil)
		for range n {
			seq++
			data = entrybatch.Append(data, marshalReq(t, &pb.InternalRaftRequest{
				Header: &pb.RequestHeader{ID: uint64(seq)},
				Put:    &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", seq)), Value: []byte("v")}}))
		}
		return data
	}
	for i := uint64(1); i <= 25; i++ {
		if err := a.applyEntries([]*raftpb.Entry{entryAt(i, batch(10))}); err != nil {
			t.Fatal(err)
		}
		if err := a.maybeSnapshot(); err != nil {
			t.Fatal(err)
		}
	}
	// 50 requests are 5 entries of 10.
	want := []snapCall{{10, 5}, {20, 5}}
	if fmt.Sprint(snaps.calls) != fmt.Sprint(want) {
		t.Fatalf("snapshots %v, want %v", snaps.calls, want)
	}
	// Entries of one request each count one: 100 of them to the next.
	for i := uint64(26); i <= 124; i++ {
		if err := a.applyEntries([]*raftpb.Entry{entryAt(i, marshalReq(t, &pb.InternalRaftRequest{
			Header: &pb.RequestHeader{ID: 1000 + i}, Put: &pb.PutRequest{Key: []byte("one"), Value: []byte("v")}}))}); err != nil {
			t.Fatal(err)
		}
		if err := a.maybeSnapshot(); err != nil {
			t.Fatal(err)
		}
	}
	// Since 20: 5 entries of 10 (21-25), then 50 of one (26-75) reach 100
	// requests in 55 entries; 50 requests are about 28 of those entries.
	want = append(want, snapCall{75, 28})
	if fmt.Sprint(snaps.calls) != fmt.Sprint(want) {
		t.Fatalf("snapshots %v, want %v", snaps.calls, want)
	}
}

func TestCatchUpEntries(t *testing.T) {
	for _, c := range []struct{ catchUp, ents, reqs, want uint64 }{
		{5000, 10000, 10000, 5000}, // one request an entry: etcd's count
		{5000, 455, 10000, 228},    // 22 requests an entry
		{5000, 0, 0, 5000},
		{10, 3, 100, 1}, // rounded up
		{0, 10, 100, 0},
	} {
		if got := catchUpEntries(c.catchUp, c.ents, c.reqs); got != c.want {
			t.Errorf("catchUpEntries(%d, %d, %d) = %d, want %d", c.catchUp, c.ents, c.reqs, got, c.want)
		}
	}
}

// After a restart the applier is handed again the entries since the last
// snapshot that the backend already holds; they are skipped but still in
// the log, so their requests count toward the next snapshot.
func TestSnapshotCountsReplayedEntries(t *testing.T) {
	st, err := mvcc.Open(enginetest.OpenT(t, enginetest.Names[0]), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	seq := 0
	batch := func() []byte {
		data := entrybatch.Begin(nil)
		for range 10 {
			seq++
			data = entrybatch.Append(data, marshalReq(t, &pb.InternalRaftRequest{
				Header: &pb.RequestHeader{ID: uint64(seq)},
				Put:    &pb.PutRequest{Key: []byte(fmt.Sprintf("k%d", seq)), Value: []byte("v")}}))
		}
		return data
	}
	ents := make([]*raftpb.Entry, 10)
	for i := range ents {
		ents[i] = entryAt(uint64(i+1), batch())
	}
	newApplier := func(snaps *recordSnapshots) *Applier {
		return New(Config{Store: st, Registry: NewRegistry(), Applied: NewApplied(0),
			Snapshots: snaps, SnapshotCount: 100, SnapshotCatchup: 50, ConfState: &raftpb.ConfState{Voters: []uint64{1}}})
	}
	before := &recordSnapshots{}
	a := newApplier(before)
	if err := a.applyEntries(ents[:6]); err != nil {
		t.Fatal(err)
	}
	if err := a.maybeSnapshot(); err != nil || len(before.calls) != 0 {
		t.Fatalf("snapshot before 100 requests: %v, %v", before.calls, err)
	}
	// Restart: the backend holds entries 1-6, the log replays them.
	after := &recordSnapshots{}
	a = newApplier(after)
	if err := a.applyEntries(ents); err != nil {
		t.Fatal(err)
	}
	if err := a.maybeSnapshot(); err != nil {
		t.Fatal(err)
	}
	if want := []snapCall{{10, 5}}; fmt.Sprint(after.calls) != fmt.Sprint(want) {
		t.Fatalf("snapshots after the restart %v, want %v", after.calls, want)
	}
}
