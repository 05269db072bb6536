//go:build !failpoints

package failpoint

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Hit does nothing in a normal build.
func Hit(string) {}

// WALSegmentBytes is 0 (the WAL's default segment size) in a normal build.
func WALSegmentBytes() int64 { return 0 }
