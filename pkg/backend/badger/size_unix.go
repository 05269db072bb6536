//go:build unix

package badger

import (
	"io/fs"
	"syscall"
)

// allocated is the disk space fi takes, which for a sparse file is less than
// its length.
func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}
