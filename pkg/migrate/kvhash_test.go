package migrate

import (
	"encoding/binary"
	"fmt"
	"math/rand"
	"path/filepath"
	"testing"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/engine"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// TestKVHasher compares the state kvHasher computes in one pass with what
// the mvcc store reports (storeState) on random histories: puts, deletes,
// a delete and a put of one key in one transaction, compactions (at a
// tombstone too), an unfinished compaction, etcdutl's empty placeholder
// records.
func TestKVHasher(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			eng := []string{"bolt", "badger"}[seed%2]
			c := newConfig(t, "")
			be, err := engine.Open(c, eng, filepath.Join(c.SnapDir(), eng), zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			check := func(what string) {
				t.Helper()
				want, err := storeState(be, zap.NewNop())
				if err != nil {
					t.Fatal(err)
				}
				_, got, err := scanBackend(be)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("%s: kvHasher %+v, mvcc %+v", what, got, want)
				}
			}
			check("empty")
			s, err := mvcc.Open(be, nil)
			if err != nil {
				t.Fatal(err)
			}
			nkeys := 2 + rng.Intn(30)
			key := func() []byte { return fmt.Appendf(nil, "k%02d", rng.Intn(nkeys)) }
			var ci uint64
			for range 50 + rng.Intn(300) {
				var done <-chan struct{}
				ci++
				err := s.Apply(func(b *mvcc.Batch) error {
					b.SetConsistentIndex(ci, 2)
					switch r := rng.Intn(20); {
					case r < 11:
						tw := b.Write()
						tw.Put(key(), fmt.Appendf(nil, "v%d", rng.Int()), 0)
						tw.End()
					case r < 15:
						tw := b.Write()
						k := key()
						tw.DeleteRange(k, append(k, 0xff))
						tw.End()
					case r < 17:
						tw := b.Write()
						k := key()
						tw.DeleteRange(k, nil)
						tw.Put(k, []byte("again"), 0)
						tw.End()
					default:
						var err error
						done, err = b.Compact(b.Rev() - int64(rng.Intn(10)))
						if err != nil {
							done = nil
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if done != nil {
					<-done
				}
			}
			rev := s.Rev()
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			check("history")

			// etcdutl's placeholder: an empty record of the empty key.
			putRaw := func(b backend.Bucket, k, v []byte) {
				t.Helper()
				if err := be.Update(func(w backend.WriteTx) error { return w.Put(b, k, v) }); err != nil {
					t.Fatal(err)
				}
			}
			revKey := func(main int64) []byte {
				k := binary.BigEndian.AppendUint64(nil, uint64(main))
				return binary.BigEndian.AppendUint64(append(k, '_'), 0)
			}
			if seed%3 == 0 {
				putRaw(backend.Key, revKey(rev+1), []byte{})
				rev++
				check("placeholder")
			}
			// A compaction scheduled and not done, below, at and past the
			// last revision.
			for _, at := range []int64{rev - int64(rng.Intn(20)), rev, rev + 5} {
				if at < 1 {
					continue
				}
				putRaw(backend.Meta, []byte(mvcc.MetaKeyScheduledCompact), revKey(at))
				check(fmt.Sprintf("compaction at %d (of %d) unfinished", at, rev))
			}
		})
	}
}
