package migrate

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// BucketSum is what one bucket holds: its records, their key and value
// bytes, and a sha256 over them in key order.
type BucketSum struct {
	Records int64
	Bytes   int64
	Sum     [sha256.Size]byte
}

// digest sums every bucket a view sees. The source's is taken as the copy
// reads it (digestTx), the target's by a full pass after reopening it; equal
// digests mean every bucket holds the same keys and values.
type digest struct {
	sums map[backend.Bucket]*bucketHash
}

type bucketHash struct {
	records, bytes int64
	h              hash.Hash
	buf            [binary.MaxVarintLen64]byte
}

func newDigest() *digest { return &digest{sums: map[backend.Bucket]*bucketHash{}} }

func (d *digest) add(b backend.Bucket, k, v []byte) {
	s := d.sums[b]
	if s == nil {
		s = &bucketHash{h: sha256.New()}
		d.sums[b] = s
	}
	s.records++
	s.bytes += int64(len(k) + len(v))
	for _, p := range [][]byte{k, v} {
		n := binary.PutUvarint(s.buf[:], uint64(len(p)))
		s.h.Write(s.buf[:n])
		s.h.Write(p)
	}
}

// result returns the sums of every bucket in backend.AllBuckets (empty ones
// included, so that two digests compare bucket by bucket).
func (d *digest) result() map[backend.Bucket]BucketSum {
	out := map[backend.Bucket]BucketSum{}
	for _, b := range backend.AllBuckets {
		var bs BucketSum
		if s := d.sums[b]; s != nil {
			bs.Records, bs.Bytes = s.records, s.bytes
			copy(bs.Sum[:], s.h.Sum(nil))
		} else {
			copy(bs.Sum[:], sha256.New().Sum(nil))
		}
		out[b] = bs
	}
	return out
}

// digestTx is a read view that digests every record a Range hands out.
type digestTx struct {
	backend.ReadTx
	d *digest
}

func (t digestTx) Range(b backend.Bucket, start, end []byte, limit int, fn func(k, v []byte) bool) error {
	return t.ReadTx.Range(b, start, end, limit, func(k, v []byte) bool {
		t.d.add(b, k, v)
		return fn(k, v)
	})
}

// digestBackend reads every bucket of be.
func digestBackend(be backend.Backend) (map[backend.Bucket]BucketSum, error) {
	tx, err := be.ReadTx()
	if err != nil {
		return nil, err
	}
	defer tx.Release()
	d := newDigest()
	for _, b := range backend.AllBuckets {
		if err := tx.Range(b, nil, nil, 0, func(k, v []byte) bool { d.add(b, k, v); return true }); err != nil {
			return nil, fmt.Errorf("read bucket %s: %w", b, err)
		}
	}
	return d.result(), nil
}

// compareDigests describes the first buckets that differ, or returns "".
func compareDigests(src, dst map[backend.Bucket]BucketSum) string {
	var diffs []string
	for _, b := range backend.AllBuckets {
		s, d := src[b], dst[b]
		if s.Records != d.Records || s.Bytes != d.Bytes || !bytes.Equal(s.Sum[:], d.Sum[:]) {
			diffs = append(diffs, fmt.Sprintf("bucket %s: source %d records %d bytes, target %d records %d bytes (checksums %s)",
				b, s.Records, s.Bytes, d.Records, d.Bytes, eqWord(s.Sum == d.Sum)))
		}
	}
	return strings.Join(diffs, "; ")
}

func eqWord(eq bool) string {
	if eq {
		return "equal"
	}
	return "differ"
}

// syncTree fsyncs every file and directory under root, and root itself:
// whatever the engine left to the page cache is on disk before the rename
// that makes the tree the member's backend.
func syncTree(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		err = f.Sync()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("fsync %s: %w", path, err)
		}
		return nil
	})
}
