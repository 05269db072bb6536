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

// CopyVerified copies the bolt file inside the snapshot file src to dst
// (created, synced; removed on error) and checks its sha256 trailer, as
// etcdutl snapshot restore does: a file without the trailer is refused
// unless skipHashCheck (a db copied from a data dir has none), and a
// trailer that does not match is always refused unless skipHashCheck.
// counted wraps the reader of src (for progress); nil leaves it as is.
func CopyVerified(src, dst string, skipHashCheck bool, counted func(io.Reader) io.Reader) (err error) {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	size := fi.Size()
	hashed := HasHash(size)
	if !hashed && !skipHashCheck {
		return ErrNoHash
	}
	dbSize := size
	if hashed {
		dbSize -= sha256.Size
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := out.Close(); err == nil && cerr != nil {
			err = cerr
		}
		if err != nil {
			os.Remove(dst)
		}
	}()
	var r io.Reader = io.LimitReader(in, dbSize)
	if counted != nil {
		r = counted(r)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), r)
	if err != nil {
		return fmt.Errorf("copy %s: %w", src, err)
	}
	if n != dbSize {
		return fmt.Errorf("copy %s: read %d of %d bytes", src, n, dbSize)
	}
	if hashed && !skipHashCheck {
		want := make([]byte, sha256.Size)
		if _, err := io.ReadFull(in, want); err != nil {
			return fmt.Errorf("read the sha256 of %s: %w", src, err)
		}
		if got := h.Sum(nil); !bytes.Equal(got, want) {
			return fmt.Errorf("snapshot %s: expected sha256 %x, got %x: the file is damaged (or pass --skip-hash-check)", src, want, got)
		}
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dst, err)
	}
	return nil
}

// VerifyHash checks the sha256 trailer of the snapshot file at path as
// CopyVerified does, reading it once, and returns the size of the bolt file
// before the trailer. Bolt reads a file with the trailer as it is, so a
// reader need not copy it.
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
