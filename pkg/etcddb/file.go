package etcddb

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
)

// HasHash reports whether a snapshot file of size bytes carries etcd's
// sha256 trailer: bolt files are whole pages, so a size 32 bytes past a
// multiple of 512 is a file with the trailer (etcdutl's rule).
func HasHash(size int64) bool { return size%512 == sha256.Size }

// VerifyHash checks the sha256 trailer of the snapshot file at path as
// etcdutl snapshot restore does, reading the file once, and returns the
// size of the bolt file before the trailer: a file without the trailer is
// refused unless skipHashCheck (a db copied from a data dir has none), and
// a trailer that does not match is refused unless skipHashCheck. Bolt reads
// a file with the trailer as it is, so a reader need not copy it. counted
// wraps the reader of the file (for progress); nil leaves it as is.
func VerifyHash(path string, skipHashCheck bool, counted func(io.Reader) io.Reader) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := fi.Size()
	if !HasHash(size) {
		if !skipHashCheck {
			return 0, ErrNoHash
		}
		return size, nil
	}
	dbSize := size - sha256.Size
	if skipHashCheck {
		return dbSize, nil
	}
	var r io.Reader = io.LimitReader(f, dbSize)
	if counted != nil {
		r = counted(r)
	}
	h := sha256.New()
	if n, err := io.CopyBuffer(h, r, make([]byte, 1<<20)); err != nil || n != dbSize {
		return 0, fmt.Errorf("read %s: %d of %d bytes (%v)", path, n, dbSize, err)
	}
	want := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, want); err != nil {
		return 0, fmt.Errorf("read the sha256 of %s: %w", path, err)
	}
	if got := h.Sum(nil); !bytes.Equal(got, want) {
		return 0, fmt.Errorf("snapshot %s: expected sha256 %x, got %x: the file is damaged (or pass --skip-hash-check)", path, want, got)
	}
	return dbSize, nil
}
