//go:build unix

package fsutil

import "golang.org/x/sys/unix"

// FreeBytes is the space available to an unprivileged writer on the file
// system of dir; false when it cannot be told.
func FreeBytes(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
