package leasemgr

import (
	"fmt"
	"slices"
	"testing"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/bolt"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// Recover reads leases and, page by page, the keys attached to them.
func TestRecover(t *testing.T) {
	defer func(n int) { recoverPage = n }(recoverPage)
	recoverPage = 3
	be, err := bolt.Open(backend.Options{Dir: t.TempDir()}, bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	st, err := mvcc.Open(be, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	want := map[int64][]string{1: nil, 2: nil}
	if err := st.Apply(func(b *mvcc.Batch) error {
		b.PutLease(1, Record{ID: 1, TTL: 60}.Marshal())
		b.PutLease(2, Record{ID: 2, TTL: 90, RemainingTTL: 30}.Marshal())
		for i := range 10 {
			k := fmt.Sprintf("k%02d", i)
			id := int64(i % 3) // 0: no lease
			tw := b.Write()
			tw.Put([]byte(k), []byte("v"), id)
			tw.End()
			if id != 0 {
				want[id] = append(want[id], k)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	m, _ := newTestManager(Config{})
	if err := m.Recover(st); err != nil {
		t.Fatal(err)
	}
	m.Promote(0)
	for id, keys := range want {
		s, err := m.TimeToLive(id, true)
		if err != nil || !slices.Equal(s.Keys, keys) {
			t.Fatalf("lease %d recovered with %+v, %v; want keys %v", id, s, err, keys)
		}
	}
	if s, _ := m.TimeToLive(2, false); s.TTL != 30 || s.GrantedTTL != 90 {
		t.Fatalf("lease 2 recovered as %+v, want TTL 30 (its checkpoint) of 90", s)
	}
}
