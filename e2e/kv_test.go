package e2e

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/e2e/harness"
)

func kvKeys(kvs []*mvccpb.KeyValue) []string {
	out := make([]string, len(kvs))
	for i, kv := range kvs {
		out[i] = string(kv.Key)
	}
	return out
}

func (m *member) put(t *testing.T, k, v string, opts ...clientv3.OpOption) *clientv3.PutResponse {
	t.Helper()
	r, err := m.cli.Put(testCtx(t), k, v, opts...)
	mustOK(t, "put "+k, err)
	checkHeader(t, "put "+k, r.Header)
	return r
}

func (m *member) get(t *testing.T, k string, opts ...clientv3.OpOption) *clientv3.GetResponse {
	t.Helper()
	r, err := m.cli.Get(testCtx(t), k, opts...)
	mustOK(t, "get "+k, err)
	checkHeader(t, "get "+k, r.Header)
	return r
}

// wantKV asserts one key-value's every field.
func wantKV(t *testing.T, what string, got *mvccpb.KeyValue, key, val string, create, mod, ver int64) {
	t.Helper()
	want := &mvccpb.KeyValue{Key: []byte(key), Value: []byte(val), CreateRevision: create, ModRevision: mod, Version: ver}
	if val == "" {
		want.Value = nil
	}
	if got == nil {
		t.Errorf("%s: got no kv, want %v", what, want)
		return
	}
	g := proto.Clone(got).(*mvccpb.KeyValue)
	if len(g.Value) == 0 {
		g.Value = nil
	}
	if !proto.Equal(g, want) {
		t.Errorf("%s: got kv %v, want %v", what, got, want)
	}
}

func TestFreshStoreAndMembership(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		g := m.get(t, "missing")
		if g.Header.Revision != 1 || len(g.Kvs) != 0 || g.Count != 0 || g.More {
			t.Errorf("fresh store: got rev %d kvs %v count %d more %v, want rev 1 and nothing", g.Header.Revision, g.Kvs, g.Count, g.More)
		}
		st, err := m.cli.Status(ctx, m.proc.Endpoint())
		mustOK(t, "status", err)
		checkHeader(t, "status", st.Header)
		if st.Header.Revision != 1 {
			t.Errorf("status: header revision %d, want 1", st.Header.Revision)
		}
		if st.Leader != st.Header.MemberId {
			t.Errorf("status: leader %x, want this member %x", st.Leader, st.Header.MemberId)
		}
		if st.Version == "" || st.DbSize <= 0 || st.RaftTerm == 0 || st.RaftIndex == 0 || st.IsLearner {
			t.Errorf("status: implausible %+v", st)
		}
		ml, err := m.cli.MemberList(ctx)
		mustOK(t, "member list", err)
		// etcd's Cluster service fills no revision in its headers.
		if h := ml.Header; h == nil || h.ClusterId == 0 || h.MemberId == 0 || h.RaftTerm == 0 || h.Revision != 0 {
			t.Errorf("member list header %v: want cluster_id, member_id, raft_term set and revision 0, as etcd", h)
		}
		if len(ml.Members) != 1 {
			t.Fatalf("member list: %d members, want 1: %v", len(ml.Members), ml.Members)
		}
		mem := ml.Members[0]
		if mem.ID != st.Header.MemberId || mem.Name != "e2e" || mem.IsLearner ||
			!slices.Equal(mem.ClientURLs, []string{m.proc.Endpoint()}) || len(mem.PeerURLs) != 1 {
			t.Errorf("member list: got %+v, want id %x name e2e client %s", mem, st.Header.MemberId, m.proc.Endpoint())
		}
		if ml.Header.ClusterId != st.Header.ClusterId {
			t.Errorf("cluster id differs: member list %x, status %x", ml.Header.ClusterId, st.Header.ClusterId)
		}
	})
}

func TestRangeLimitMoreCount(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		for _, k := range []string{"r/a", "r/b", "r/c", "r/d", "r/e", "s"} {
			m.put(t, k, "v-"+k)
		}
		cases := []struct {
			name  string
			key   string
			opts  []clientv3.OpOption
			keys  []string
			more  bool
			count int64
		}{
			{"single", "r/c", nil, []string{"r/c"}, false, 1},
			{"missing", "r/x", nil, []string{}, false, 0},
			{"prefix", "r/", []clientv3.OpOption{clientv3.WithPrefix()}, []string{"r/a", "r/b", "r/c", "r/d", "r/e"}, false, 5},
			{"limit2", "r/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(2)}, []string{"r/a", "r/b"}, true, 5},
			{"limit4", "r/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(4)}, []string{"r/a", "r/b", "r/c", "r/d"}, true, 5},
			{"limit-exact", "r/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(5)}, []string{"r/a", "r/b", "r/c", "r/d", "r/e"}, false, 5},
			{"limit-over", "r/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(50)}, []string{"r/a", "r/b", "r/c", "r/d", "r/e"}, false, 5},
			{"range", "r/b", []clientv3.OpOption{clientv3.WithRange("r/d")}, []string{"r/b", "r/c"}, false, 2},
			{"range-limit", "r/b", []clientv3.OpOption{clientv3.WithRange("r/e"), clientv3.WithLimit(1)}, []string{"r/b"}, true, 3},
			{"range-empty", "r/d", []clientv3.OpOption{clientv3.WithRange("r/b")}, []string{}, false, 0},
			{"from-key", "r/d", []clientv3.OpOption{clientv3.WithFromKey()}, []string{"r/d", "r/e", "s"}, false, 3},
			{"from-key-limit", "r/d", []clientv3.OpOption{clientv3.WithFromKey(), clientv3.WithLimit(2)}, []string{"r/d", "r/e"}, true, 3},
			{"from-zero", "\x00", []clientv3.OpOption{clientv3.WithFromKey()}, []string{"r/a", "r/b", "r/c", "r/d", "r/e", "s"}, false, 6},
			{"prefix-not-sibling", "r", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(1)}, []string{"r/a"}, true, 5},
		}
		for _, c := range cases {
			r := m.get(t, c.key, c.opts...)
			if got := kvKeys(r.Kvs); !slices.Equal(got, c.keys) || r.More != c.more || r.Count != c.count {
				t.Errorf("%s: got keys %q more %v count %d, want %q more %v count %d", c.name, got, r.More, r.Count, c.keys, c.more, c.count)
			}
			for _, kv := range r.Kvs {
				if string(kv.Value) != "v-"+string(kv.Key) {
					t.Errorf("%s: key %q has value %q", c.name, kv.Key, kv.Value)
				}
			}
			if r.Header.Revision != 7 {
				t.Errorf("%s: header revision %d, want 7", c.name, r.Header.Revision)
			}
		}
	})
}

func TestRangeSort(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		// Final state, chosen so that no two keys tie on any target:
		//   o/a: value c, create 3, mod 7, version 2
		//   o/b: value a, create 4, mod 4, version 1
		//   o/c: value b, create 2, mod 6, version 3
		m.put(t, "o/c", "b")
		m.put(t, "o/a", "c")
		m.put(t, "o/b", "a")
		m.put(t, "o/c", "b")
		m.put(t, "o/c", "b")
		m.put(t, "o/a", "c")
		asc := map[pb.RangeRequest_SortTarget][]string{
			pb.RangeRequest_KEY:     {"o/a", "o/b", "o/c"},
			pb.RangeRequest_VERSION: {"o/b", "o/a", "o/c"},
			pb.RangeRequest_CREATE:  {"o/c", "o/a", "o/b"},
			pb.RangeRequest_MOD:     {"o/b", "o/c", "o/a"},
			pb.RangeRequest_VALUE:   {"o/b", "o/c", "o/a"},
		}
		ctx := testCtx(t)
		for target, want := range asc {
			desc := slices.Clone(want)
			slices.Reverse(desc)
			for _, c := range []struct {
				order pb.RangeRequest_SortOrder
				want  []string
			}{
				// NONE with a target other than KEY sorts ascending.
				{pb.RangeRequest_NONE, map[bool][]string{true: asc[pb.RangeRequest_KEY], false: want}[target == pb.RangeRequest_KEY]},
				{pb.RangeRequest_ASCEND, want},
				{pb.RangeRequest_DESCEND, desc},
			} {
				for _, limit := range []int64{0, 2} {
					for _, keysOnly := range []bool{false, true} {
						name := fmt.Sprintf("target %v order %v limit %d keys_only %v", target, c.order, limit, keysOnly)
						// The raw stub: clientv3 rewrites KEY/ASCEND to NONE.
						r, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("o/"), RangeEnd: []byte("o0"), SortTarget: target, SortOrder: c.order, Limit: limit, KeysOnly: keysOnly})
						mustOK(t, name, err)
						checkHeader(t, name, r.Header)
						want := c.want
						if limit > 0 {
							want = want[:limit]
						}
						if got := kvKeys(r.Kvs); !slices.Equal(got, want) || r.More != (limit > 0) || r.Count != 3 {
							t.Errorf("%s: got %q more %v count %d, want %q more %v count 3", name, got, r.More, r.Count, want, limit > 0)
						}
						for _, kv := range r.Kvs {
							if keysOnly != (len(kv.Value) == 0) || kv.Version == 0 || kv.CreateRevision == 0 || kv.ModRevision == 0 {
								t.Errorf("%s: kv %v", name, kv)
							}
						}
					}
				}
			}
		}
		// Through clientv3 as well.
		r := m.get(t, "o/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
		if got := kvKeys(r.Kvs); !slices.Equal(got, []string{"o/a"}) || !r.More || r.Count != 3 {
			t.Errorf("clientv3 sort by mod desc limit 1: got %q more %v count %d", got, r.More, r.Count)
		}
		wantKV(t, "o/a", r.Kvs[0], "o/a", "c", 3, 7, 2)
		_, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("o/"), SortTarget: 99})
		wantErr(t, "bad sort target", err, rpctypes.ErrInvalidSortOption)
		_, err = m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("o/"), SortOrder: 7})
		wantErr(t, "bad sort order", err, rpctypes.ErrInvalidSortOption)
	})
}

func TestRangeRevisionAndSerializable(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		m.put(t, "k", "v1")                      // 2
		m.put(t, "k", "v2")                      // 3
		m.put(t, "k2", "x")                      // 4
		dr, err := m.cli.Delete(testCtx(t), "k") // 5
		mustOK(t, "delete", err)
		checkHeader(t, "delete", dr.Header)
		m.put(t, "k", "v3") // 6
		for _, serializable := range []bool{false, true} {
			var extra []clientv3.OpOption
			if serializable {
				extra = append(extra, clientv3.WithSerializable())
			}
			at := func(key string, rev int64, opts ...clientv3.OpOption) *clientv3.GetResponse {
				return m.get(t, key, append(append(opts, clientv3.WithRev(rev)), extra...)...)
			}
			name := fmt.Sprintf("serializable=%v", serializable)
			wantKV(t, name+" k@2", at("k", 2).Kvs[0], "k", "v1", 2, 2, 1)
			wantKV(t, name+" k@3", at("k", 3).Kvs[0], "k", "v2", 2, 3, 2)
			wantKV(t, name+" k@4", at("k", 4).Kvs[0], "k", "v2", 2, 3, 2)
			if r := at("k", 5); len(r.Kvs) != 0 || r.Count != 0 || r.Header.Revision != 6 {
				t.Errorf("%s k@5 (deleted): got %v count %d rev %d", name, r.Kvs, r.Count, r.Header.Revision)
			}
			wantKV(t, name+" k@6", at("k", 6).Kvs[0], "k", "v3", 6, 6, 1)
			wantKV(t, name+" k@0", at("k", 0).Kvs[0], "k", "v3", 6, 6, 1)
			if r := at("k", 1); len(r.Kvs) != 0 || r.Header.Revision != 6 {
				t.Errorf("%s k@1: got %v rev %d", name, r.Kvs, r.Header.Revision)
			}
			if r := at("k", 4, clientv3.WithPrefix()); !slices.Equal(kvKeys(r.Kvs), []string{"k", "k2"}) || r.Count != 2 {
				t.Errorf("%s prefix k@4: got %q count %d", name, kvKeys(r.Kvs), r.Count)
			}
			if r := at("k", 5, clientv3.WithPrefix()); !slices.Equal(kvKeys(r.Kvs), []string{"k2"}) || r.Count != 1 {
				t.Errorf("%s prefix k@5: got %q count %d", name, kvKeys(r.Kvs), r.Count)
			}
			_, err := m.cli.Get(testCtx(t), "k", append([]clientv3.OpOption{clientv3.WithRev(7)}, extra...)...)
			wantErr(t, name+" future rev", err, rpctypes.ErrFutureRev)
		}
	})
}

func TestRangeKeysOnlyCountOnly(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		for i := range 4 {
			m.put(t, fmt.Sprintf("q/%d", i), strings.Repeat("v", i+1))
		}
		r := m.get(t, "q/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if len(r.Kvs) != 4 || r.Count != 4 {
			t.Fatalf("keys only: got %v count %d", r.Kvs, r.Count)
		}
		for i, kv := range r.Kvs {
			wantKV(t, "keys only", kv, fmt.Sprintf("q/%d", i), "", int64(i+2), int64(i+2), 1)
		}
		r = m.get(t, "q/", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(3))
		if len(r.Kvs) != 3 || r.Count != 4 || !r.More || len(r.Kvs[2].Value) != 0 {
			t.Errorf("keys only limit 3: got %v count %d more %v", r.Kvs, r.Count, r.More)
		}
		r = m.get(t, "q/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if len(r.Kvs) != 0 || r.Count != 4 || r.More {
			t.Errorf("count only: got %v count %d more %v", r.Kvs, r.Count, r.More)
		}
		r = m.get(t, "q/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithLimit(2))
		if len(r.Kvs) != 0 || r.Count != 4 || r.More {
			t.Errorf("count only limit 2: got %v count %d more %v", r.Kvs, r.Count, r.More)
		}
		r = m.get(t, "q/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(3))
		if len(r.Kvs) != 0 || r.Count != 2 || r.Header.Revision != 5 {
			t.Errorf("count only at rev 3: got %v count %d rev %d", r.Kvs, r.Count, r.Header.Revision)
		}
		r = m.get(t, "q/3", clientv3.WithKeysOnly(), clientv3.WithSort(clientv3.SortByValue, clientv3.SortDescend))
		if len(r.Kvs) != 1 || len(r.Kvs[0].Value) != 0 || r.Kvs[0].Version != 1 {
			t.Errorf("keys only sorted by value: got %v", r.Kvs)
		}
	})
}

func TestRangeRevisionFilters(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		// f/a create 2 mod 6; f/b create 3 mod 3; f/c create 4 mod 5; f/d create 7 mod 7
		m.put(t, "f/a", "1")
		m.put(t, "f/b", "1")
		m.put(t, "f/c", "1")
		m.put(t, "f/c", "2")
		m.put(t, "f/a", "2")
		m.put(t, "f/d", "1")
		cases := []struct {
			name string
			opts []clientv3.OpOption
			keys []string
		}{
			{"min mod 5", []clientv3.OpOption{clientv3.WithMinModRev(5)}, []string{"f/a", "f/c", "f/d"}},
			{"max mod 5", []clientv3.OpOption{clientv3.WithMaxModRev(5)}, []string{"f/b", "f/c"}},
			{"min create 3", []clientv3.OpOption{clientv3.WithMinCreateRev(3)}, []string{"f/b", "f/c", "f/d"}},
			{"max create 3", []clientv3.OpOption{clientv3.WithMaxCreateRev(3)}, []string{"f/a", "f/b"}},
			{"mod window", []clientv3.OpOption{clientv3.WithMinModRev(4), clientv3.WithMaxModRev(6)}, []string{"f/a", "f/c"}},
			{"all four", []clientv3.OpOption{clientv3.WithMinModRev(3), clientv3.WithMaxModRev(6), clientv3.WithMinCreateRev(3), clientv3.WithMaxCreateRev(4)}, []string{"f/b", "f/c"}},
			{"none", []clientv3.OpOption{clientv3.WithMinModRev(100)}, []string{}},
		}
		for _, c := range cases {
			r := m.get(t, "f/", append(c.opts, clientv3.WithPrefix())...)
			// count is the number of keys in the range before filtering.
			if got := kvKeys(r.Kvs); !slices.Equal(got, c.keys) || r.Count != 4 || r.More {
				t.Errorf("%s: got %q count %d more %v, want %q count 4", c.name, got, r.Count, r.More, c.keys)
			}
			r = m.get(t, "f/", append(c.opts, clientv3.WithPrefix(), clientv3.WithLimit(1))...)
			want := c.keys
			if len(want) > 1 {
				want = want[:1]
			}
			if got := kvKeys(r.Kvs); !slices.Equal(got, want) || r.Count != 4 || r.More != (len(c.keys) > 1) {
				t.Errorf("%s limit 1: got %q count %d more %v, want %q", c.name, got, r.Count, r.More, want)
			}
		}
		r := m.get(t, "f/", clientv3.WithPrefix(), clientv3.WithMinModRev(3), clientv3.WithRev(4))
		if got := kvKeys(r.Kvs); !slices.Equal(got, []string{"f/b", "f/c"}) || r.Count != 3 {
			t.Errorf("min mod 3 at rev 4: got %q count %d", got, r.Count)
		}
	})
}

func TestPutOptions(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		r := m.put(t, "p", "v1", clientv3.WithPrevKV())
		if r.PrevKv != nil || r.Header.Revision != 2 {
			t.Errorf("first put with prev_kv: prev %v rev %d", r.PrevKv, r.Header.Revision)
		}
		r = m.put(t, "p", "v2", clientv3.WithPrevKV())
		wantKV(t, "second put prev_kv", r.PrevKv, "p", "v1", 2, 2, 1)
		if r.Header.Revision != 3 {
			t.Errorf("second put: rev %d, want 3", r.Header.Revision)
		}
		r = m.put(t, "p", "v3")
		if r.PrevKv != nil {
			t.Errorf("put without prev_kv returned %v", r.PrevKv)
		}
		r = m.put(t, "p", "", clientv3.WithIgnoreValue(), clientv3.WithPrevKV())
		wantKV(t, "ignore_value prev", r.PrevKv, "p", "v3", 2, 4, 3)
		wantKV(t, "after ignore_value", m.get(t, "p").Kvs[0], "p", "v3", 2, 5, 4)
		r = m.put(t, "p", "v6", clientv3.WithIgnoreLease())
		wantKV(t, "after ignore_lease", m.get(t, "p").Kvs[0], "p", "v6", 2, 6, 5)
		r = m.put(t, "p", "", clientv3.WithIgnoreValue(), clientv3.WithIgnoreLease())
		wantKV(t, "after ignore both", m.get(t, "p").Kvs[0], "p", "v6", 2, 7, 6)

		_, err := m.cli.Put(ctx, "missing", "", clientv3.WithIgnoreValue())
		wantErr(t, "ignore_value on missing key", err, rpctypes.ErrKeyNotFound)
		_, err = m.cli.Put(ctx, "missing", "x", clientv3.WithIgnoreLease())
		wantErr(t, "ignore_lease on missing key", err, rpctypes.ErrKeyNotFound)
		_, err = m.kv.Put(ctx, &pb.PutRequest{Key: []byte("p"), Value: []byte("x"), IgnoreValue: true})
		wantErr(t, "ignore_value with a value", err, rpctypes.ErrValueProvided)
		_, err = m.kv.Put(ctx, &pb.PutRequest{Key: []byte("p"), Lease: 5, IgnoreLease: true})
		wantErr(t, "ignore_lease with a lease", err, rpctypes.ErrLeaseProvided)
		_, err = m.cli.Put(ctx, "p", "x", clientv3.WithLease(0x1234))
		wantErr(t, "unknown lease", err, rpctypes.ErrLeaseNotFound)
		_, err = m.cli.Put(ctx, "new", "x", clientv3.WithLease(0x1234))
		wantErr(t, "unknown lease, new key", err, rpctypes.ErrLeaseNotFound)

		g := m.get(t, "p", clientv3.WithPrefix())
		if g.Header.Revision != 7 || len(g.Kvs) != 1 {
			t.Errorf("failed puts changed the store: rev %d kvs %v", g.Header.Revision, g.Kvs)
		}
		if g := m.get(t, "new"); len(g.Kvs) != 0 {
			t.Errorf("put with unknown lease created %v", g.Kvs)
		}
		// Binary keys and values, and an empty value, round-trip.
		bk, bv := "\x00\xff\x01k", "\x00\xfe"
		m.put(t, bk, bv)
		m.put(t, "empty", "")
		g = m.get(t, "\x00", clientv3.WithRange("\x01"))
		wantKV(t, "binary", g.Kvs[0], bk, bv, 8, 8, 1)
		wantKV(t, "empty value", m.get(t, "empty").Kvs[0], "empty", "", 9, 9, 1)
	})
}

func TestDeleteRange(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		for _, k := range []string{"d/a", "d/b", "d/c", "d/d", "e"} {
			m.put(t, k, "v"+k)
		}
		r, err := m.cli.Delete(ctx, "d/a", clientv3.WithPrevKV())
		mustOK(t, "delete d/a", err)
		checkHeader(t, "delete d/a", r.Header)
		if r.Deleted != 1 || len(r.PrevKvs) != 1 || r.Header.Revision != 7 {
			t.Errorf("delete d/a: %+v", r)
		} else {
			wantKV(t, "delete d/a prev", r.PrevKvs[0], "d/a", "vd/a", 2, 2, 1)
		}
		r, err = m.cli.Delete(ctx, "d/a", clientv3.WithPrevKV())
		mustOK(t, "delete d/a again", err)
		checkHeader(t, "delete d/a again", r.Header)
		if r.Deleted != 0 || len(r.PrevKvs) != 0 || r.Header.Revision != 7 {
			t.Errorf("delete missing: %+v (revision must not move)", r)
		}
		r, err = m.cli.Delete(ctx, "d/b", clientv3.WithRange("d/d"))
		mustOK(t, "delete range", err)
		if r.Deleted != 2 || len(r.PrevKvs) != 0 || r.Header.Revision != 8 {
			t.Errorf("delete [d/b, d/d): %+v", r)
		}
		r, err = m.cli.Delete(ctx, "d", clientv3.WithPrefix(), clientv3.WithPrevKV())
		mustOK(t, "delete prefix", err)
		if r.Deleted != 1 || len(r.PrevKvs) != 1 || r.Header.Revision != 9 {
			t.Errorf("delete prefix d: %+v", r)
		} else {
			wantKV(t, "delete prefix prev", r.PrevKvs[0], "d/d", "vd/d", 5, 5, 1)
		}
		g := m.get(t, "\x00", clientv3.WithFromKey())
		if !slices.Equal(kvKeys(g.Kvs), []string{"e"}) {
			t.Errorf("after deletes: %q", kvKeys(g.Kvs))
		}
		// History survives deletion.
		wantKV(t, "d/b at 8-1", m.get(t, "d/b", clientv3.WithRev(7)).Kvs[0], "d/b", "vd/b", 3, 3, 1)
		// Recreate: a new generation starts at version 1.
		m.put(t, "d/a", "again")
		wantKV(t, "recreated", m.get(t, "d/a").Kvs[0], "d/a", "again", 10, 10, 1)
		r, err = m.cli.Delete(ctx, "\x00", clientv3.WithFromKey())
		mustOK(t, "delete all", err)
		if r.Deleted != 2 || r.Header.Revision != 11 {
			t.Errorf("delete from key \\x00: %+v", r)
		}
		_, err = m.cli.Delete(ctx, "")
		wantErr(t, "delete empty key", err, rpctypes.ErrEmptyKey)
	})
}

func TestTxnCompares(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		m.put(t, "c/a", "m") // 2
		m.put(t, "c/b", "x") // 3
		m.put(t, "c/a", "m") // 4: c/a create 2 mod 4 version 2 value m
		ctx := testCtx(t)
		type cmpCase struct {
			cmp  clientv3.Cmp
			want bool
		}
		var cases []cmpCase
		add := func(cmpFor func(op string) clientv3.Cmp, eq, gt, lt bool) {
			cases = append(cases,
				cmpCase{cmpFor("="), eq},
				cmpCase{cmpFor("!="), !eq},
				cmpCase{cmpFor(">"), gt},
				cmpCase{cmpFor("<"), lt},
			)
		}
		for _, v := range []struct {
			val        string
			eq, gt, lt bool
		}{{"m", true, false, false}, {"a", false, true, false}, {"z", false, false, true}, {"", false, true, false}, {"mm", false, false, true}} {
			add(func(op string) clientv3.Cmp { return clientv3.Compare(clientv3.Value("c/a"), op, v.val) }, v.eq, v.gt, v.lt)
		}
		type intCase struct {
			target func(string) clientv3.Cmp
			key    string
			actual int64
		}
		for _, ic := range []intCase{
			{clientv3.Version, "c/a", 2},
			{clientv3.CreateRevision, "c/a", 2},
			{clientv3.ModRevision, "c/a", 4},
			{clientv3.LeaseValue, "c/a", 0},
			{clientv3.Version, "c/missing", 0},
			{clientv3.CreateRevision, "c/missing", 0},
			{clientv3.ModRevision, "c/missing", 0},
			{clientv3.LeaseValue, "c/missing", 0},
		} {
			for _, operand := range []int64{ic.actual - 1, ic.actual, ic.actual + 1} {
				add(func(op string) clientv3.Cmp { return clientv3.Compare(ic.target(ic.key), op, operand) },
					ic.actual == operand, ic.actual > operand, ic.actual < operand)
			}
		}
		// A value compare on a missing key is false whatever the operator.
		for _, op := range []string{"=", "!=", ">", "<"} {
			cases = append(cases, cmpCase{clientv3.Compare(clientv3.Value("c/missing"), op, "m"), false})
		}
		for i, c := range cases {
			name := fmt.Sprintf("case %d %v", i, c.cmp.GetCompare())
			r, err := m.cli.Txn(ctx).If(c.cmp).Then(clientv3.OpGet("c/b")).Else(clientv3.OpGet("c/a")).Commit()
			mustOK(t, name, err)
			checkHeader(t, name, r.Header)
			if r.Succeeded != c.want {
				t.Errorf("%s: succeeded %v, want %v", name, r.Succeeded, c.want)
			}
			wantKey := map[bool]string{true: "c/b", false: "c/a"}[c.want]
			if len(r.Responses) != 1 || !slices.Equal(kvKeys(r.Responses[0].GetResponseRange().Kvs), []string{wantKey}) {
				t.Errorf("%s: responses %v, want a range of %s", name, r.Responses, wantKey)
			}
			if r.Header.Revision != 4 {
				t.Errorf("%s: read-only txn moved revision to %d", name, r.Header.Revision)
			}
		}
		// Several compares are ANDed.
		r, err := m.cli.Txn(ctx).If(
			clientv3.Compare(clientv3.Value("c/a"), "=", "m"),
			clientv3.Compare(clientv3.Version("c/b"), "=", 2),
		).Commit()
		mustOK(t, "and", err)
		if r.Succeeded || len(r.Responses) != 0 {
			t.Errorf("and of true,false: %+v", r)
		}
		// No compares: success.
		r, err = m.cli.Txn(ctx).Then(clientv3.OpPut("c/c", "1")).Commit()
		mustOK(t, "empty if", err)
		if !r.Succeeded || r.Header.Revision != 5 || r.Responses[0].GetResponsePut().Header.Revision != 5 {
			t.Errorf("txn without compares: %+v", r)
		}
	})
}

func TestTxnRangeCompares(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		m.put(t, "rc/a", "1") // 2
		m.put(t, "rc/b", "2") // 3
		m.put(t, "rc/c", "3") // 4
		m.put(t, "rd", "9")   // 5
		ctx := testCtx(t)
		cases := []struct {
			cmp  clientv3.Cmp
			want bool
		}{
			{clientv3.Compare(clientv3.Value("rc/"), ">", "0").WithPrefix(), true},
			{clientv3.Compare(clientv3.Value("rc/"), ">", "1").WithPrefix(), false},
			{clientv3.Compare(clientv3.Value("rc/"), "<", "4").WithPrefix(), true},
			{clientv3.Compare(clientv3.Value("rc/"), "!=", "2").WithPrefix(), false},
			{clientv3.Compare(clientv3.Value("rc/"), "=", "1").WithRange("rc/b"), true},
			{clientv3.Compare(clientv3.ModRevision("rc/"), "<", 5).WithPrefix(), true},
			{clientv3.Compare(clientv3.ModRevision("rc/"), "<", 4).WithPrefix(), false},
			{clientv3.Compare(clientv3.CreateRevision("rc/b"), ">", 2).WithRange("rd"), true},
			{clientv3.Compare(clientv3.CreateRevision("rc/b"), ">", 2).WithRange("re"), true},
			{clientv3.Compare(clientv3.Version("rc/"), "=", 1).WithPrefix(), true},
			{clientv3.Compare(clientv3.LeaseValue("rc/"), "=", 0).WithPrefix(), true},
			// An empty range compares a zero key-value, except for VALUE.
			{clientv3.Compare(clientv3.Version("rc/z"), "=", 0).WithPrefix(), true},
			{clientv3.Compare(clientv3.Version("rc/z"), "=", 1).WithPrefix(), false},
			{clientv3.Compare(clientv3.ModRevision("rc/z"), "<", 1).WithPrefix(), true},
			{clientv3.Compare(clientv3.Value("rc/z"), "!=", "x").WithPrefix(), false},
			{clientv3.Compare(clientv3.Value("r"), ">", "0").WithRange("\x00"), true},
			{clientv3.Compare(clientv3.Value("r"), ">", "1").WithRange("\x00"), false},
			{clientv3.Compare(clientv3.Value("r"), "<", "9").WithRange("\x00"), false},
			{clientv3.Compare(clientv3.ModRevision("rc/a"), ">", 1).WithRange("\x00"), true},
			{clientv3.Compare(clientv3.ModRevision("rc/a"), ">", 2).WithRange("\x00"), false},
		}
		for i, c := range cases {
			name := fmt.Sprintf("case %d %v", i, c.cmp.GetCompare())
			r, err := m.cli.Txn(ctx).If(c.cmp).Commit()
			mustOK(t, name, err)
			checkHeader(t, name, r.Header)
			if r.Succeeded != c.want {
				t.Errorf("%s: succeeded %v, want %v", name, r.Succeeded, c.want)
			}
		}
	})
}

func TestTxnNestedAndWrites(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		m.put(t, "n/a", "1") // 2
		m.put(t, "n/b", "2") // 3
		inner := clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value("n/b"), "=", "2")},
			[]clientv3.Op{clientv3.OpPut("n/c", "3", clientv3.WithPrevKV()), clientv3.OpGet("n/", clientv3.WithPrefix())},
			[]clientv3.Op{clientv3.OpDelete("n/b")},
		)
		r, err := m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value("n/a"), "=", "1")).
			Then(clientv3.OpPut("n/a", "10", clientv3.WithPrevKV()), inner, clientv3.OpDelete("n/b", clientv3.WithPrevKV()), clientv3.OpGet("n/", clientv3.WithPrefix())).
			Else(clientv3.OpGet("n/a")).
			Commit()
		mustOK(t, "nested txn", err)
		checkHeader(t, "nested txn", r.Header)
		if !r.Succeeded || len(r.Responses) != 4 || r.Header.Revision != 4 {
			t.Fatalf("nested txn: %+v", r)
		}
		// All writes of one txn share one main revision.
		put := r.Responses[0].GetResponsePut()
		wantKV(t, "outer put prev", put.PrevKv, "n/a", "1", 2, 2, 1)
		if put.Header.Revision != 4 {
			t.Errorf("outer put header rev %d", put.Header.Revision)
		}
		it := r.Responses[1].GetResponseTxn()
		if it == nil || !it.Succeeded || len(it.Responses) != 2 {
			t.Fatalf("inner txn: %+v", it)
		}
		if it.Responses[0].GetResponsePut().PrevKv != nil {
			t.Errorf("inner put of a new key has prev_kv %v", it.Responses[0].GetResponsePut().PrevKv)
		}
		innerGet := it.Responses[1].GetResponseRange()
		if len(innerGet.Kvs) != 3 {
			t.Fatalf("inner get: %v", innerGet.Kvs)
		}
		wantKV(t, "inner get sees outer put", innerGet.Kvs[0], "n/a", "10", 2, 4, 2)
		wantKV(t, "inner get sees inner put", innerGet.Kvs[2], "n/c", "3", 4, 4, 1)
		del := r.Responses[2].GetResponseDeleteRange()
		if del.Deleted != 1 || len(del.PrevKvs) != 1 {
			t.Errorf("outer delete: %+v", del)
		}
		last := r.Responses[3].GetResponseRange()
		if !slices.Equal(kvKeys(last.Kvs), []string{"n/a", "n/c"}) || last.Header.Revision != 4 {
			t.Errorf("final get in txn: %q rev %d", kvKeys(last.Kvs), last.Header.Revision)
		}
		g := m.get(t, "n/", clientv3.WithPrefix())
		if g.Header.Revision != 4 || !slices.Equal(kvKeys(g.Kvs), []string{"n/a", "n/c"}) {
			t.Errorf("after nested txn: rev %d keys %q", g.Header.Revision, kvKeys(g.Kvs))
		}
		// Failure branch, nested in failure branch.
		r, err = m.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Version("n/a"), ">", 5)).
			Else(clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Version("n/zz"), "=", 0)}, []clientv3.Op{clientv3.OpPut("n/d", "4")}, nil)}, nil)).
			Commit()
		mustOK(t, "nested failure", err)
		if r.Succeeded || r.Header.Revision != 5 {
			t.Errorf("nested failure txn: %+v", r)
		}
		if g := m.get(t, "n/d"); len(g.Kvs) != 1 || g.Kvs[0].ModRevision != 5 {
			t.Errorf("n/d after nested failure txn: %v", g.Kvs)
		}
		// A txn in which a put and a delete of different keys share a revision
		// with increasing sub-revisions: visible as one revision step.
		r, err = m.cli.Txn(ctx).Then(clientv3.OpPut("n/e", "5"), clientv3.OpDelete("n/d"), clientv3.OpPut("n/f", "6")).Commit()
		mustOK(t, "multi-write", err)
		if r.Header.Revision != 6 {
			t.Errorf("multi-write txn rev %d, want 6", r.Header.Revision)
		}
		// A txn that deletes nothing and puts nothing does not move the revision.
		r, err = m.cli.Txn(ctx).Then(clientv3.OpDelete("n/none")).Commit()
		mustOK(t, "noop delete txn", err)
		if r.Header.Revision != 6 || r.Responses[0].GetResponseDeleteRange().Deleted != 0 {
			t.Errorf("no-op delete txn: %+v", r)
		}
		// A range inside a txn at an old revision.
		r, err = m.cli.Txn(ctx).Then(clientv3.OpGet("n/a", clientv3.WithRev(2))).Commit()
		mustOK(t, "txn range at rev", err)
		wantKV(t, "txn range at rev 2", r.Responses[0].GetResponseRange().Kvs[0], "n/a", "1", 2, 2, 1)
	})
}

func TestTxnErrors(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		m.put(t, "x", "1") // 2
		dup := []struct {
			name string
			ops  []clientv3.Op
		}{
			{"put twice", []clientv3.Op{clientv3.OpPut("x", "1"), clientv3.OpPut("x", "2")}},
			{"put and delete", []clientv3.Op{clientv3.OpPut("x", "1"), clientv3.OpDelete("x")}},
			{"delete range covering put", []clientv3.Op{clientv3.OpDelete("w", clientv3.WithRange("y")), clientv3.OpPut("x", "1")}},
			{"delete prefix covering put", []clientv3.Op{clientv3.OpDelete("x", clientv3.WithPrefix()), clientv3.OpPut("xy", "1")}},
			{"nested put over outer put", []clientv3.Op{clientv3.OpPut("x", "1"), clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("x", "2")}, nil)}},
			{"nested put under outer delete", []clientv3.Op{clientv3.OpDelete("x"), clientv3.OpTxn(nil, nil, []clientv3.Op{clientv3.OpPut("x", "2")})}},
			{"two nested txns put same key", []clientv3.Op{
				clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("x", "2")}, nil),
				clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("x", "3")}, nil)}},
		}
		for _, c := range dup {
			_, err := m.cli.Txn(ctx).Then(c.ops...).Commit()
			wantErr(t, c.name, err, rpctypes.ErrDuplicateKey)
			_, err = m.cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("x"), "=", 99)).Else(c.ops...).Commit()
			wantErr(t, c.name+" (else)", err, rpctypes.ErrDuplicateKey)
		}
		// Allowed: two deletes of overlapping ranges, a put in then and
		// the same put in else of one nested txn, and a get beside a put.
		for _, ops := range [][]clientv3.Op{
			{clientv3.OpDelete("a", clientv3.WithRange("c")), clientv3.OpDelete("b", clientv3.WithRange("d"))},
			{clientv3.OpTxn(nil, []clientv3.Op{clientv3.OpPut("x", "2")}, []clientv3.Op{clientv3.OpPut("x", "3")})},
			{clientv3.OpGet("x"), clientv3.OpPut("x", "4"), clientv3.OpGet("x")},
		} {
			_, err := m.cli.Txn(ctx).Then(ops...).Commit()
			mustOK(t, fmt.Sprintf("allowed txn %v", ops), err)
		}
		many := func(n int) []clientv3.Op {
			ops := make([]clientv3.Op, n)
			for i := range ops {
				ops[i] = clientv3.OpPut(fmt.Sprintf("many/%03d", i), "v")
			}
			return ops
		}
		rev := m.get(t, "x").Header.Revision
		_, err := m.cli.Txn(ctx).Then(many(129)...).Commit()
		wantErr(t, "129 ops", err, rpctypes.ErrTooManyOps)
		cmps := make([]clientv3.Cmp, 129)
		for i := range cmps {
			cmps[i] = clientv3.Compare(clientv3.Version("x"), ">", 0)
		}
		_, err = m.cli.Txn(ctx).If(cmps...).Commit()
		wantErr(t, "129 compares", err, rpctypes.ErrTooManyOps)
		_, err = m.cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("x"), "=", 99)).Else(many(129)...).Commit()
		wantErr(t, "129 else ops", err, rpctypes.ErrTooManyOps)
		if g := m.get(t, "many/", clientv3.WithPrefix(), clientv3.WithCountOnly()); g.Count != 0 || g.Header.Revision != rev {
			t.Errorf("rejected txns changed the store: count %d rev %d (was %d)", g.Count, g.Header.Revision, rev)
		}
		r, err := m.cli.Txn(ctx).Then(many(128)...).Commit()
		mustOK(t, "128 ops", err)
		if len(r.Responses) != 128 || r.Header.Revision != rev+1 {
			t.Errorf("128 ops: %d responses rev %d", len(r.Responses), r.Header.Revision)
		}
		_, err = m.cli.Txn(ctx).If(clientv3.Compare(clientv3.Value(""), "=", "x")).Commit()
		wantErr(t, "compare on empty key", err, rpctypes.ErrEmptyKey)
		_, err = m.cli.Txn(ctx).Then(clientv3.OpPut("", "x")).Commit()
		wantErr(t, "put of empty key in txn", err, rpctypes.ErrEmptyKey)
		_, err = m.cli.Txn(ctx).Then(clientv3.OpGet("x", clientv3.WithRev(rev+100))).Commit()
		wantErr(t, "future rev in txn", err, rpctypes.ErrFutureRev)
		_, err = m.cli.Txn(ctx).Then(clientv3.OpPut("x", "1", clientv3.WithLease(77))).Commit()
		wantErr(t, "unknown lease in txn", err, rpctypes.ErrLeaseNotFound)
		_, err = m.cli.Txn(ctx).Then(clientv3.OpPut("nope", "", clientv3.WithIgnoreValue())).Commit()
		wantErr(t, "ignore_value of missing key in txn", err, rpctypes.ErrKeyNotFound)
		if g := m.get(t, "x"); g.Header.Revision != rev+1 {
			t.Errorf("failed txns moved the revision: %d, want %d", g.Header.Revision, rev+1)
		}
	})
}

func TestCompaction(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		for i := range 10 {
			m.put(t, "h", fmt.Sprint(i)) // revs 2..11
		}
		c, err := m.cli.Compact(ctx, 5)
		mustOK(t, "compact 5", err)
		checkHeader(t, "compact 5", c.Header)
		if c.Header.Revision != 11 {
			t.Errorf("compact response revision %d, want 11", c.Header.Revision)
		}
		_, err = m.cli.Get(ctx, "h", clientv3.WithRev(4))
		wantErr(t, "get at compacted rev 4", err, rpctypes.ErrCompacted)
		_, err = m.cli.Get(ctx, "h", clientv3.WithRev(4), clientv3.WithSerializable())
		wantErr(t, "serializable get at compacted rev 4", err, rpctypes.ErrCompacted)
		_, err = m.cli.Get(ctx, "h", clientv3.WithRev(1), clientv3.WithCountOnly())
		wantErr(t, "count at compacted rev 1", err, rpctypes.ErrCompacted)
		wantKV(t, "at compact rev", m.get(t, "h", clientv3.WithRev(5)).Kvs[0], "h", "3", 2, 5, 4)
		wantKV(t, "latest", m.get(t, "h").Kvs[0], "h", "9", 2, 11, 10)
		_, err = m.cli.Txn(ctx).Then(clientv3.OpGet("h", clientv3.WithRev(3))).Commit()
		wantErr(t, "txn get at compacted rev", err, rpctypes.ErrCompacted)
		_, err = m.cli.Compact(ctx, 5)
		wantErr(t, "compact 5 again", err, rpctypes.ErrCompacted)
		_, err = m.cli.Compact(ctx, 3)
		wantErr(t, "compact below", err, rpctypes.ErrCompacted)
		_, err = m.cli.Compact(ctx, 12)
		wantErr(t, "compact future", err, rpctypes.ErrFutureRev)
		c, err = m.cli.Compact(ctx, 8, clientv3.WithCompactPhysical())
		mustOK(t, "physical compact 8", err)
		checkHeader(t, "physical compact", c.Header)
		_, err = m.cli.Get(ctx, "h", clientv3.WithRev(7))
		wantErr(t, "get at physically compacted rev 7", err, rpctypes.ErrCompacted)
		wantKV(t, "at physical compact rev", m.get(t, "h", clientv3.WithRev(8)).Kvs[0], "h", "6", 2, 8, 7)
		// Compacting at the current revision keeps the latest values.
		m.put(t, "g", "x")              // 12
		_, err = m.cli.Delete(ctx, "g") // 13
		mustOK(t, "delete g", err)
		_, err = m.cli.Compact(ctx, 13, clientv3.WithCompactPhysical())
		mustOK(t, "compact head", err)
		wantKV(t, "after compacting head", m.get(t, "h").Kvs[0], "h", "9", 2, 11, 10)
		if g := m.get(t, "g"); len(g.Kvs) != 0 {
			t.Errorf("deleted key back after compaction: %v", g.Kvs)
		}
		if g := m.get(t, "\x00", clientv3.WithFromKey(), clientv3.WithRev(13)); !slices.Equal(kvKeys(g.Kvs), []string{"h"}) || g.Header.Revision != 13 {
			t.Errorf("from-key at 13: %q rev %d", kvKeys(g.Kvs), g.Header.Revision)
		}
		// Compaction survives a restart.
		m.proc.Restart()
		_, err = m.cli.Get(ctx, "h", clientv3.WithRev(12))
		wantErr(t, "get at compacted rev after restart", err, rpctypes.ErrCompacted)
		wantKV(t, "latest after restart", m.get(t, "h").Kvs[0], "h", "9", 2, 11, 10)
		if g := m.get(t, "h"); g.Header.Revision != 13 {
			t.Errorf("revision after restart %d, want 13", g.Header.Revision)
		}
	})
}

func TestEmptyKeyAndTooLarge(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		_, err := m.cli.Put(ctx, "", "v")
		wantErr(t, "put empty key", err, rpctypes.ErrEmptyKey)
		_, err = m.cli.Get(ctx, "")
		wantErr(t, "get empty key", err, rpctypes.ErrEmptyKey)
		_, err = m.kv.Range(ctx, &pb.RangeRequest{RangeEnd: []byte("z")})
		wantErr(t, "range of empty key with range_end", err, rpctypes.ErrEmptyKey)
		_, err = m.kv.DeleteRange(ctx, &pb.DeleteRangeRequest{RangeEnd: []byte{0}})
		wantErr(t, "delete of empty key with range_end", err, rpctypes.ErrEmptyKey)
		_, err = m.cli.Delete(ctx, "")
		wantErr(t, "delete empty key", err, rpctypes.ErrEmptyKey)

		big := strings.Repeat("x", 1536*1024+1024)
		_, err = m.cli.Put(ctx, "big", big)
		wantErr(t, "put 1.5 MiB + 1 KiB", err, rpctypes.ErrRequestTooLarge)
		_, err = m.cli.Txn(ctx).Then(clientv3.OpPut("big", big)).Commit()
		wantErr(t, "txn put 1.5 MiB + 1 KiB", err, rpctypes.ErrRequestTooLarge)
		ok := strings.Repeat("y", 1024*1024)
		m.put(t, "big", ok)
		if g := m.get(t, "big"); len(g.Kvs) != 1 || string(g.Kvs[0].Value) != ok || g.Header.Revision != 2 {
			t.Errorf("1 MiB value did not round-trip (rev %d)", g.Header.Revision)
		}
	})
}

func TestRangeStream(t *testing.T) {
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		const n = 75
		ops := make([]clientv3.Op, 0, 25)
		for i := range n {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("st/%03d", i), strings.Repeat("v", i)))
			if len(ops) == 25 {
				_, err := m.cli.Txn(ctx).Then(ops...).Commit()
				mustOK(t, "load", err)
				ops = ops[:0]
			}
		}
		m.put(t, "st/010", "changed") // rev 5
		cases := []struct {
			name string
			key  string
			opts []clientv3.OpOption
		}{
			{"prefix", "st/", []clientv3.OpOption{clientv3.WithPrefix()}},
			{"limit", "st/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(33)}},
			{"limit below chunk", "st/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithLimit(3)}},
			{"rev", "st/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithRev(3)}},
			{"keys only", "st/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithKeysOnly()}},
			{"count only", "st/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}},
			{"serializable", "st/", []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSerializable()}},
			{"single", "st/007", nil},
			{"empty", "zz", nil},
			{"from key", "st/050", []clientv3.OpOption{clientv3.WithFromKey()}},
		}
		for _, c := range cases {
			want := m.get(t, c.key, c.opts...)
			ch, err := m.cli.GetStream(ctx, c.key, c.opts...)
			mustOK(t, c.name+" stream", err)
			var chunks []*pb.RangeResponse
			for r := range ch {
				mustOK(t, c.name+" stream recv", r.Err())
				chunks = append(chunks, r.RangeResponse)
			}
			if len(chunks) == 0 {
				t.Errorf("%s: no chunks", c.name)
				continue
			}
			merged := &pb.RangeResponse{}
			for i, ch := range chunks {
				last := i == len(chunks)-1
				if !last && (ch.Header != nil || ch.More || ch.Count != 0) {
					t.Errorf("%s: chunk %d of %d carries header/more/count: %v", c.name, i, len(chunks), ch)
				}
				proto.Merge(merged, ch)
			}
			checkHeader(t, c.name+" final chunk", chunks[len(chunks)-1].Header)
			if !proto.Equal(merged, (*pb.RangeResponse)(want)) {
				t.Errorf("%s: merged stream differs from Range:\nstream %v\nrange  %v", c.name, merged, want)
			}
		}
		chunkSizes := func(prefix string, opts ...clientv3.OpOption) []int {
			ch, err := m.cli.GetStream(ctx, prefix, append(opts, clientv3.WithPrefix())...)
			mustOK(t, "stream "+prefix, err)
			var sizes []int
			for r := range ch {
				mustOK(t, "stream recv", r.Err())
				sizes = append(sizes, len(r.Kvs))
			}
			return sizes
		}
		// etcd's chunking: the first chunk holds 10 kvs, and each next
		// limit doubles while a chunk is under half of max-request-bytes
		// (1.5 MiB) and halves while it is over twice that.
		if sizes := chunkSizes("st/"); !slices.Equal(sizes, []int{10, 20, 40, 5}) {
			t.Errorf("chunk sizes %v, want etcd's [10 20 40 5]", sizes)
		}
		if sizes := chunkSizes("st/", clientv3.WithLimit(35)); !slices.Equal(sizes, []int{10, 20, 5}) {
			t.Errorf("chunk sizes with limit 35: %v, want etcd's [10 20 5]", sizes)
		}
		// A sort target with order NONE passes etcd's stream check, and
		// etcd then sorts ascending by that target (chunk by chunk).
		m.put(t, "ss/c", "1")
		m.put(t, "ss/a", "3")
		m.put(t, "ss/b", "2")
		for target, want := range map[pb.RangeRequest_SortTarget][]string{
			pb.RangeRequest_MOD:    {"ss/c", "ss/a", "ss/b"},
			pb.RangeRequest_CREATE: {"ss/c", "ss/a", "ss/b"},
			pb.RangeRequest_VALUE:  {"ss/c", "ss/b", "ss/a"},
			pb.RangeRequest_KEY:    {"ss/a", "ss/b", "ss/c"},
		} {
			st, err := m.kv.RangeStream(ctx, &pb.RangeRequest{Key: []byte("ss/"), RangeEnd: []byte("ss0"), SortTarget: target})
			mustOK(t, "stream sorted by "+target.String(), err)
			var got []string
			for {
				r, err := st.Recv()
				if err != nil {
					if err != io.EOF {
						t.Errorf("stream sort target %v order NONE: %v", target, err)
					}
					break
				}
				got = append(got, kvKeys(r.RangeResponse.Kvs)...)
			}
			if !slices.Equal(got, want) {
				t.Errorf("stream sort target %v order NONE: got %q, want etcd's %q", target, got, want)
			}
		}
		big := strings.Repeat("b", 400*1024)
		for i := range 30 {
			m.put(t, fmt.Sprintf("big/%02d", i), big)
		}
		if sizes := chunkSizes("big/"); !slices.Equal(sizes, []int{10, 5, 5, 5, 5}) {
			t.Errorf("chunk sizes of 400 KiB values %v, want etcd's [10 5 5 5 5]", sizes)
		}
		for _, c := range []struct {
			name string
			opts []clientv3.OpOption
		}{
			{"sorted", []clientv3.OpOption{clientv3.WithSort(clientv3.SortByValue, clientv3.SortAscend)}},
			{"filtered", []clientv3.OpOption{clientv3.WithMinModRev(2)}},
		} {
			ch, err := m.cli.GetStream(ctx, "st/", append(c.opts, clientv3.WithPrefix())...)
			if err == nil {
				for r := range ch {
					if err = r.Err(); err != nil {
						break
					}
				}
			}
			if code, _ := errCodeMsg(err); code != codes.Unimplemented {
				t.Errorf("%s stream: got %v, want code Unimplemented", c.name, err)
			}
		}
		ch, err := m.cli.GetStream(ctx, "")
		if err == nil {
			for r := range ch {
				if err = r.Err(); err != nil {
					break
				}
			}
		}
		wantErr(t, "stream empty key", err, rpctypes.ErrEmptyKey)
	})
}

// etcdTxnPanicEnv enables TestEtcdTxnDeleteFromKeyThenPutIgnoreValuePanics.
const etcdTxnPanicEnv = "KVD_E2E_ETCD_TXN_PANIC"

// deleteFromKeyPutIgnoreValue is a txn that passes etcd's overlap check
// (a from-key delete range_end "\x00" is not seen as covering "b") but whose
// put with ignore_value finds its key deleted earlier in the same txn.
func deleteFromKeyPutIgnoreValue() *pb.TxnRequest {
	return &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte{0}}}},
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("b"), IgnoreValue: true}}},
	}}
}

// TestTxnDeleteFromKeyThenPutIgnoreValue: etcd v3.7.3 panics in its apply
// loop on this txn; kvd must answer (an error, or a consistent result) and
// stay up, with the same state after a restart.
func TestTxnDeleteFromKeyThenPutIgnoreValue(t *testing.T) {
	if harness.Kind() == harness.KindEtcd {
		t.Skip("etcd v3.7.3 panics on this txn; see TestEtcdTxnDeleteFromKeyThenPutIgnoreValuePanics")
	}
	forEachEngine(t, func(t *testing.T, m *member) {
		ctx := testCtx(t)
		m.put(t, "a", "1") // 2
		m.put(t, "b", "2") // 3
		m.put(t, "c", "3") // 4
		r, txnErr := m.kv.Txn(ctx, deleteFromKeyPutIgnoreValue())
		if exited, werr := m.proc.Exited(); exited {
			t.Fatalf("kvd exited after the txn: %v (txn error %v)", werr, txnErr)
		}
		after := m.get(t, "\x00", clientv3.WithFromKey())
		if txnErr != nil {
			t.Logf("txn answered with error: %v", txnErr)
			if after.Header.Revision != 4 || !slices.Equal(kvKeys(after.Kvs), []string{"a", "b", "c"}) {
				t.Errorf("failed txn changed the store: rev %d keys %q", after.Header.Revision, kvKeys(after.Kvs))
			}
		} else {
			t.Logf("txn answered: %v; store now %v", r, after.Kvs)
			checkHeader(t, "txn", r.Header)
			if !r.Succeeded || len(r.Responses) != 2 || r.Header.Revision != 5 || after.Header.Revision != 5 {
				t.Errorf("txn result %v, store rev %d: want one new revision", r, after.Header.Revision)
			}
		}
		// The member keeps serving writes, and replays to the same state.
		m.put(t, "d", "4")
		before := m.get(t, "\x00", clientv3.WithFromKey())
		m.proc.Restart()
		again := m.get(t, "\x00", clientv3.WithFromKey())
		before.Header, again.Header = nil, nil
		if !proto.Equal((*pb.RangeResponse)(before), (*pb.RangeResponse)(again)) {
			t.Errorf("state differs after restart:\nbefore %v\nafter  %v", before, again)
		}
	})
}

// TestEtcdTxnDeleteFromKeyThenPutIgnoreValuePanics documents etcd v3.7.3's
// behaviour on the txn above: its apply loop panics and the member exits.
func TestEtcdTxnDeleteFromKeyThenPutIgnoreValuePanics(t *testing.T) {
	if !envSet(etcdTxnPanicEnv) {
		t.Skipf("set %s=1 to run", etcdTxnPanicEnv)
	}
	p := harness.StartEtcd(t, harness.Options{})
	c := p.Client(t)
	ctx := testCtx(t)
	for _, k := range []string{"a", "b", "c"} {
		_, err := c.Put(ctx, k, "v")
		mustOK(t, "put", err)
	}
	tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := pb.NewKVClient(c.ActiveConnection()).Txn(tctx, deleteFromKeyPutIgnoreValue())
	t.Logf("etcd answered: %v", err)
	if !p.WaitExit(30 * time.Second) {
		t.Fatalf("etcd is still running; the reported panic did not happen")
	}
	if tail := p.LogTail(200); !strings.Contains(tail, "panic: ") {
		t.Errorf("etcd exited without the expected panic message:\n%s", tail)
	}
}
