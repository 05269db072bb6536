//go:build !unix

package badger

import "io/fs"

func allocated(fi fs.FileInfo) int64 { return fi.Size() }
