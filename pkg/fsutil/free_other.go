//go:build !unix

package fsutil

// FreeBytes cannot tell the free space here.
func FreeBytes(string) (int64, bool) { return 0, false }
