package backendtest

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// RestoreFunc replaces the data in dir (its backend closed) with a stream
// written by Snapshot of the same engine.
type RestoreFunc func(dir string, r io.Reader) error

// RunRestore checks that Snapshot and the engine's restore round-trip: the
// restored directory holds exactly the snapshot's data, later writes win
// over restored ones, and a malformed stream is rejected without losing the
// data already in the directory.
func RunRestore(t *testing.T, open OpenFunc, restore RestoreFunc) {
	s := suite{open: open}
	t.Run("RoundTrip", func(t *testing.T) {
		src := s.openNew(t)
		big := strings.Repeat("x", 64<<10)
		put(t, src, backend.Key, kv{"a", "1"}, kv{"b", "2"}, kv{"big", big})
		put(t, src, "custom", kv{"c", "3"})
		put(t, src, backend.Meta, kv{"a", "meta"})
		del(t, src, backend.Key, "b")
		var snap bytes.Buffer
		if _, err := src.Snapshot(&snap); err != nil {
			t.Fatalf("Snapshot: %v", err)
		}
		// Writes after the snapshot are not in it.
		put(t, src, backend.Key, kv{"late", "x"})

		dir := t.TempDir()
		old := s.open(t, dir)
		put(t, old, backend.Key, kv{"old", "x"}, kv{"a", "old"})
		if err := old.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := restore(dir, &snap); err != nil {
			t.Fatalf("restore: %v", err)
		}
		dst := s.openAt(t, dir)
		rtx := view(t, dst)
		wantRange(t, rangeAll(t, rtx, backend.Key, nil, nil, 0), []kv{{"a", "1"}, {"big", big}})
		wantRange(t, rangeAll(t, rtx, "custom", nil, nil, 0), []kv{{"c", "3"}})
		wantRange(t, rangeAll(t, rtx, backend.Meta, nil, nil, 0), []kv{{"a", "meta"}})
		rtx.Release()
		put(t, dst, backend.Key, kv{"a", "new"})
		del(t, dst, backend.Key, "big")
		rtx = view(t, dst)
		wantRange(t, rangeAll(t, rtx, backend.Key, nil, nil, 0), []kv{{"a", "new"}})
	})
	t.Run("RejectsGarbage", func(t *testing.T) {
		src := s.openNew(t)
		var pairs []kv
		for i := 0; i < 200; i++ {
			pairs = append(pairs, kv{fmt.Sprintf("k%04d", i), strings.Repeat("v", 500)})
		}
		put(t, src, backend.Key, pairs...)
		var snap bytes.Buffer
		if _, err := src.Snapshot(&snap); err != nil {
			t.Fatalf("Snapshot: %v", err)
		}

		dir := t.TempDir()
		be := s.open(t, dir)
		put(t, be, backend.Key, kv{"a", "1"})
		if err := be.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for _, garbage := range [][]byte{
			bytes.Repeat([]byte{0xff}, 8192),
			bytes.Repeat([]byte("x"), 8192),
			snap.Bytes()[:snap.Len()/2], // a stream cut short
			nil,
		} {
			if err := restore(dir, bytes.NewReader(garbage)); err == nil {
				t.Errorf("restore of %.4q... succeeded", garbage)
			}
		}
		be = s.openAt(t, dir)
		wantValue(t, be, backend.Key, "a", "1", true)
	})
}
