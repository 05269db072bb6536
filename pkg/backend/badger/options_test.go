package badger

import "testing"

// The memtable is MemTableSize unless MaxUpdateBytes needs a bigger one.
func TestMemTableSize(t *testing.T) {
	for _, c := range []struct {
		o    Options
		want int64
	}{
		{Options{MaxUpdateBytes: 8 << 20, MemTableSize: 64 << 20}, 64 << 20},
		{Options{MaxUpdateBytes: 8 << 20}, (8<<20*100 + 14) / 15},
		{Options{MaxUpdateBytes: 24 << 20, MemTableSize: 64 << 20}, (24<<20*100 + 14) / 15},
	} {
		if got := c.o.memTableSize(); got != c.want {
			t.Errorf("%+v: memtable %d, want %d", c.o, got, c.want)
		}
		if got := c.o.badgerOptions(t.TempDir(), true).MemTableSize; got != c.want {
			t.Errorf("%+v: Badger gets memtable %d, want %d", c.o, got, c.want)
		}
	}
}
