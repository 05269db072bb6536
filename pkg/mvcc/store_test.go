package mvcc

import (
	"errors"
	"reflect"
	"testing"
)

func TestFreshStore(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		if ts.Rev() != 1 || ts.CompactRev() != -1 || ts.ConsistentIndex() != 0 {
			t.Fatalf("fresh store: rev %d compact %d ci %d, want 1 -1 0", ts.Rev(), ts.CompactRev(), ts.ConsistentIndex())
		}
		kvs, res, err := ts.rangeAt(all, all, RangeOptions{})
		if err != nil || len(kvs) != 0 || res.Rev != 1 || res.Count != 0 {
			t.Fatalf("range on a fresh store = %v %+v %v", kvs, res, err)
		}
		if rev := ts.put("a", "1"); rev != 2 {
			t.Fatalf("first put at %d, want 2", rev)
		}
	})
}

func TestPutVersions(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		ts.put("a", "1")          // 2
		ts.put("a", "2")          // 3
		ts.apply(func(b *Batch) { // 4: two puts of one key and one of another
			tw := b.Write()
			if rev := tw.Put([]byte("b"), []byte("x"), 7); rev != 4 {
				t.Errorf("put b at %d, want 4", rev)
			}
			if rev := tw.Put([]byte("a"), []byte("3"), 0); rev != 4 {
				t.Errorf("put a at %d, want 4", rev)
			}
			if rev := tw.Put([]byte("a"), []byte("4"), 0); rev != 4 {
				t.Errorf("second put a at %d, want 4", rev)
			}
			got, err := tw.Range([]byte("a"), nil, RangeOptions{})
			if err != nil || len(got.KVs) != 1 || string(got.KVs[0].Value) != "4" || got.Rev != 4 {
				t.Errorf("txn range of its own write = %v %v", got, err)
			}
			if len(tw.Events()) != 3 {
				t.Errorf("events = %d, want 3", len(tw.Events()))
			}
			tw.End()
			// A read-only txn in the same batch sees the batch's writes.
			tr := b.Write()
			if tr.Rev() != 4 {
				t.Errorf("second txn rev %d, want 4", tr.Rev())
			}
			got, err = tr.Range([]byte("b"), nil, RangeOptions{})
			if err != nil || len(got.KVs) != 1 {
				t.Errorf("second txn range = %v %v", got, err)
			}
			tr.End()
		})
		want := []kv{
			{"a", "4", 2, 4, 4, 0},
			{"b", "x", 4, 4, 1, 7},
		}
		if got := ts.mustRange(all, all, RangeOptions{}); !eqKVs(got, want) {
			t.Fatalf("range = %v, want %v", got, want)
		}
		if ts.Rev() != 4 {
			t.Fatalf("rev %d after a read-only txn, want 4", ts.Rev())
		}
	})
}

func TestDeleteAndRecreate(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		ts.put("a", "1") // 2
		ts.put("a", "2") // 3
		ts.put("b", "1") // 4
		if n, rev := ts.del("a", ""); n != 1 || rev != 5 {
			t.Fatalf("delete a = %d at %d, want 1 at 5", n, rev)
		}
		if n, rev := ts.del("a", ""); n != 0 || rev != 5 {
			t.Fatalf("delete of a deleted key = %d at %d, want 0 at 5 (no new revision)", n, rev)
		}
		if ts.Rev() != 5 {
			t.Fatalf("rev %d after an empty delete, want 5", ts.Rev())
		}
		ts.put("a", "3") // 6
		if got, want := ts.mustRange([]byte("a"), nil, RangeOptions{}), []kv{{"a", "3", 6, 6, 1, 0}}; !eqKVs(got, want) {
			t.Fatalf("recreated a = %v, want %v", got, want)
		}
		if got := ts.mustRange([]byte("a"), nil, RangeOptions{Rev: 5}); len(got) != 0 {
			t.Fatalf("a at its tombstone = %v, want nothing", got)
		}
		if got, want := ts.mustRange([]byte("a"), nil, RangeOptions{Rev: 4}), []kv{{"a", "2", 2, 3, 2, 0}}; !eqKVs(got, want) {
			t.Fatalf("a at 4 = %v, want %v", got, want)
		}
		// Delete and re-put in one txn.
		ts.apply(func(b *Batch) {
			tw := b.Write()
			if n, rev := tw.DeleteRange([]byte("a"), []byte("c")); n != 2 || rev != 7 {
				t.Errorf("delete [a, c) = %d at %d, want 2 at 7", n, rev)
			}
			tw.Put([]byte("a"), []byte("4"), 0)
			evs := tw.Events()
			if len(evs) != 3 || evs[0].Type.String() != "DELETE" || evs[0].Kv.ModRevision != 7 {
				t.Errorf("events = %v", evs)
			}
			tw.End()
		})
		if got, want := ts.mustRange(all, all, RangeOptions{}), []kv{{"a", "4", 7, 7, 1, 0}}; !eqKVs(got, want) {
			t.Fatalf("after delete+put = %v, want %v", got, want)
		}
		ts.compact(7)
		if got, want := ts.mustRange(all, all, RangeOptions{Rev: 7}), []kv{{"a", "4", 7, 7, 1, 0}}; !eqKVs(got, want) {
			t.Fatalf("after compacting at the delete+put = %v, want %v", got, want)
		}
	})
}

func TestRangeOptions(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		ts.put("a", "1")  // 2
		ts.put("b", "1")  // 3
		ts.put("c", "1")  // 4
		ts.put("b", "2")  // 5
		ts.del("c", "")   // 6
		ts.put("d", "1")  // 7
		ts.put("ab", "1") // 8
		tests := []struct {
			name     string
			key, end []byte
			ro       RangeOptions
			want     []string
			count    int
			err      error
		}{
			{"one key", []byte("b"), nil, RangeOptions{}, []string{"b=2"}, 1, nil},
			{"missing key", []byte("zz"), nil, RangeOptions{}, nil, 0, nil},
			{"range", []byte("a"), []byte("c"), RangeOptions{}, []string{"a=1", "ab=1", "b=2"}, 3, nil},
			{"from key", []byte("b"), all, RangeOptions{}, []string{"b=2", "d=1"}, 2, nil},
			{"all", all, all, RangeOptions{}, []string{"a=1", "ab=1", "b=2", "d=1"}, 4, nil},
			{"limit", all, all, RangeOptions{Limit: 2}, []string{"a=1", "ab=1"}, 4, nil},
			{"count only", all, all, RangeOptions{Count: true}, nil, 4, nil},
			{"count only at 4", all, all, RangeOptions{Count: true, Rev: 4}, nil, 3, nil},
			{"at 4", all, all, RangeOptions{Rev: 4}, []string{"a=1", "b=1", "c=1"}, 3, nil},
			{"at 4 with limit", all, all, RangeOptions{Rev: 4, Limit: 1}, []string{"a=1"}, 3, nil},
			{"at 1", all, all, RangeOptions{Rev: 1}, nil, 0, nil},
			{"future", all, all, RangeOptions{Rev: 9}, nil, 0, ErrFutureRev},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, res, err := ts.rangeAt(tt.key, tt.end, tt.ro)
				if !errors.Is(err, tt.err) {
					t.Fatalf("err = %v, want %v", err, tt.err)
				}
				if err != nil {
					if res.Rev != 8 {
						t.Errorf("future rev result rev %d, want the current 8", res.Rev)
					}
					return
				}
				var got []string
				for _, k := range toKVs(res) {
					got = append(got, k.Key+"="+k.Value)
				}
				if !reflect.DeepEqual(got, tt.want) || res.Count != tt.count || res.Rev != 8 {
					t.Errorf("= %v count %d rev %d, want %v count %d rev 8", got, res.Count, res.Rev, tt.want, tt.count)
				}
			})
		}
	})
}

func TestCompactErrors(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		ts.put("a", "1") // 2
		ts.put("a", "2") // 3
		ts.apply(func(b *Batch) {
			if _, err := b.Compact(4); !errors.Is(err, ErrFutureRev) {
				t.Errorf("compact at a future revision: %v", err)
			}
		})
		ts.compact(3)
		var barrier <-chan struct{}
		ts.apply(func(b *Batch) {
			var err error
			for _, rev := range []int64{2, 3} {
				if barrier, err = b.Compact(rev); !errors.Is(err, ErrCompacted) || barrier == nil {
					t.Errorf("compact at %d <= compact rev: %v (barrier %v)", rev, err, barrier)
				}
			}
		})
		waitClosed(t, barrier, "compaction barrier")
		if ts.CompactRev() != 3 {
			t.Fatalf("compact rev %d, want 3", ts.CompactRev())
		}
		for _, rev := range []int64{1, 2} {
			if _, _, err := ts.rangeAt(all, all, RangeOptions{Rev: rev}); !errors.Is(err, ErrCompacted) {
				t.Errorf("range at %d below compaction: %v", rev, err)
			}
		}
		// At exactly the compaction revision reads still work, as in etcd.
		if got, want := ts.mustRange(all, all, RangeOptions{Rev: 3}), []kv{{"a", "2", 2, 3, 2, 0}}; !eqKVs(got, want) {
			t.Fatalf("range at the compaction revision = %v, want %v", got, want)
		}
		// A compaction earlier in a batch applies to later txns of the batch.
		ts.put("a", "3") // 4
		ts.apply(func(b *Batch) {
			if _, err := b.Compact(4); err != nil {
				t.Fatal(err)
			}
			tw := b.Write()
			if _, err := tw.Range(all, all, RangeOptions{Rev: 3}); !errors.Is(err, ErrCompacted) {
				t.Errorf("txn range below a compaction of its batch: %v", err)
			}
			tw.End()
		})
	})
}

func TestApplyFailureIsFatal(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e engine) {
		ts := newTestStore(t, e)
		ts.put("a", "1")
		boom := errors.New("boom")
		err := ts.Apply(func(b *Batch) error {
			tw := b.Write()
			tw.Put([]byte("a"), []byte("lost"), 0)
			tw.End()
			b.SetConsistentIndex(9, 1)
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("apply = %v, want boom", err)
		}
		if err := ts.Apply(func(*Batch) error { return nil }); !errors.Is(err, ErrStoreFailed) {
			t.Fatalf("apply after a failure = %v, want ErrStoreFailed", err)
		}
		if ts.Rev() != 2 || ts.ConsistentIndex() != 0 {
			t.Fatalf("rev %d ci %d after a failed batch, want 2 0", ts.Rev(), ts.ConsistentIndex())
		}
		if got, want := ts.mustRange([]byte("a"), nil, RangeOptions{}), []kv{{"a", "1", 2, 2, 1, 0}}; !eqKVs(got, want) {
			t.Fatalf("readers after a failed batch see %v, want %v", got, want)
		}
		// Restarting recovers the committed state.
		ts.reopen()
		ts.put("a", "2")
		if got, want := ts.mustRange([]byte("a"), nil, RangeOptions{}), []kv{{"a", "2", 2, 3, 2, 0}}; !eqKVs(got, want) {
			t.Fatalf("after restart = %v, want %v", got, want)
		}
	})
}
