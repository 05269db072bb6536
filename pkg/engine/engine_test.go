package engine

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/config"
)

func TestCanonical(t *testing.T) {
	for in, want := range map[string]string{"bolt": "bolt", "bbolt": "bolt", "badger": "badger"} {
		if got, err := Canonical(in); err != nil || got != want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := Canonical("rocksdb"); err == nil {
		t.Error("Canonical accepted rocksdb")
	}
}

func TestOpenAndPresent(t *testing.T) {
	snap := t.TempDir()
	if got, err := Present(snap); err != nil || len(got) != 0 {
		t.Fatalf("Present of an empty dir: %v, %v", got, err)
	}
	for _, name := range []string{"badger", "bbolt"} {
		be, err := Open(config.Default(), name, filepath.Join(snap, map[string]string{"badger": "badger", "bbolt": "bolt"}[name]), zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		if err := be.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := Present(snap); err != nil || !slices.Equal(got, []string{"bolt", "badger"}) {
		t.Fatalf("Present: %v, %v; want [bolt badger]", got, err)
	}
	if _, err := Open(config.Default(), "leveldb", filepath.Join(snap, "x"), zap.NewNop()); err == nil {
		t.Error("Open of an unknown engine succeeded")
	}
	if _, err := os.Stat(filepath.Join(snap, "x")); !os.IsNotExist(err) {
		t.Error("Open of an unknown engine created its directory")
	}
}

func TestCheckLoadSpace(t *testing.T) {
	dir := t.TempDir()
	if err := CheckLoadSpace(config.Default(), "bolt", dir, 1<<62); err != nil {
		t.Errorf("bolt fails cleanly on a full disk, nothing to check: %v", err)
	}
	if err := CheckLoadSpace(config.Default(), "badger", dir, 1<<62); err == nil {
		t.Error("a Badger load larger than any disk was not refused")
	}
	if err := CheckLoadSpace(config.Default(), "badger", dir, 1<<10); err != nil {
		t.Errorf("a 1 KiB Badger load refused: %v", err)
	}
}

// backend.badger.mem-table-size is the memtable Badger runs with, Badger's
// kvd's 160 MiB when unset: kvd's update limit never raises it.
func TestBadgerMemTableSize(t *testing.T) {
	c := config.Default()
	if got := c.Backend.Badger.MemTableBytes(); got != 160<<20 {
		t.Errorf("default memtable %d, want 160 MiB", got)
	}
	c.Backend.Badger.MemTableSize = config.BadgerMinMemTableSize
	if got := c.Backend.Badger.MemTableBytes(); got != config.BadgerMinMemTableSize {
		t.Errorf("memtable %d, want the configured %d", got, int64(config.BadgerMinMemTableSize))
	}
	if (badgerMaxUpdateBytes*100+14)/15 > config.BadgerMinMemTableSize {
		t.Errorf("the least memtable config accepts, %d, cannot hold an update of %d", int64(config.BadgerMinMemTableSize), badgerMaxUpdateBytes)
	}
}
