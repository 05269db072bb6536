package bolt

import (
	"syscall"
	"testing"
)

// On Linux the file is mapped with read-ahead, as etcd maps it: Open's
// freelist rebuild walks every page, and without it a cold 8 GiB file
// took minutes to open.
func TestMapsWithReadAhead(t *testing.T) {
	o, err := Options{}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if got := o.boltOptions().MmapFlags; got&syscall.MAP_POPULATE == 0 {
		t.Fatalf("mmap flags %#x without MAP_POPULATE", got)
	}
}
