package apply

import (
	"context"
	"math/rand/v2"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/mvcc"
)

func TestHeaderID(t *testing.T) {
	reqs := []*pb.InternalRaftRequest{
		{Header: &pb.RequestHeader{ID: 1}, Put: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}},
		{Header: &pb.RequestHeader{ID: 1<<63 + 12345, Username: "alice", AuthRevision: 7}, Txn: &pb.TxnRequest{}},
		{Header: &pb.RequestHeader{Username: "no id"}, Put: &pb.PutRequest{Key: []byte("k")}},
		{ID: 99, Put: &pb.PutRequest{Key: []byte("legacy id only")}},
		{Put: &pb.PutRequest{Key: []byte("no header")}},
		{Header: &pb.RequestHeader{ID: 42}, Compaction: &pb.CompactionRequest{Revision: 3}, LeaseGrant: &pb.LeaseGrantRequest{TTL: 5}},
	}
	for _, req := range reqs {
		data, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := headerID(data), req.GetHeader().GetID(); got != want {
			t.Errorf("headerID(%v) = %d, want %d", req, got, want)
		}
		// A truncated or damaged encoding never panics.
		for i := range data {
			headerID(data[:i])
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		b := make([]byte, r.IntN(64))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		headerID(b)
	}
}

// The applier applies the request its own member registered for an entry,
// not a decode of the entry: the registered request here differs from the
// entry's encoding on purpose, to tell the two apart. Without a
// registration (another member's proposal) it decodes.
func TestApplierUsesRegisteredRequest(t *testing.T) {
	eachEngine(t, func(t *testing.T, a *Applier, st *mvcc.Store) {
		enc := func(id uint64, v string) []byte {
			data, err := proto.Marshal(&pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: id}, Put: &pb.PutRequest{Key: []byte("k" + v[:1]), Value: []byte(v)}})
			if err != nil {
				t.Fatal(err)
			}
			return data
		}
		registered := &pb.InternalRaftRequest{Header: &pb.RequestHeader{ID: 7}, Put: &pb.PutRequest{Key: []byte("ka"), Value: []byte("as registered")}}
		ch := a.cfg.Registry.RegisterRequest(context.Background(), nil, 7, registered).C()
		i1, i2, term := uint64(1), uint64(2), uint64(1)
		ents := []*raftpb.Entry{
			{Index: &i1, Term: &term, Data: enc(7, "as encoded")},
			{Index: &i2, Term: &term, Data: enc(8, "b decoded")},
		}
		if err := a.applyEntries(ents); err != nil {
			t.Fatal(err)
		}
		if res := <-ch; res.Err != nil {
			t.Fatal(res.Err)
		}
		if v := get(t, st, "ka"); len(v.Kvs) != 1 || string(v.Kvs[0].Value) != "as registered" {
			t.Errorf("registered entry applied %v", v.Kvs)
		}
		if v := get(t, st, "kb"); len(v.Kvs) != 1 || string(v.Kvs[0].Value) != "b decoded" {
			t.Errorf("unregistered entry applied %v", v.Kvs)
		}
		if a.cfg.Registry.Request(7) != nil {
			t.Error("the registration outlived its result")
		}
	})
}
