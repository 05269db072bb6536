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
// reads it, the target's by a full pass after reopening it; equal digests
// mean every bucket holds the same keys and values.
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

// scan is what one pass over a backend's read view learns: the digest of
// every bucket and the store's state (kvHasher).
type scan struct {
	d  *digest
	kv *kvHasher
}

// newScan starts a pass over tx (kvHasher may read the Key bucket first).
func newScan(tx backend.ReadTx) (*scan, error) {
	kv, err := newKVHasher(tx)
	if err != nil {
		return nil, err
	}
	return &scan{d: newDigest(), kv: kv}, nil
}

// add takes the next record of bucket b, in key order within the bucket.
func (s *scan) add(b backend.Bucket, k, v []byte) {
	s.d.add(b, k, v)
	if b == backend.Key {
		s.kv.add(k, v)
	}
}

// forEach calls fn for every record of tx, bucket by bucket in the order
// of backend.AllBuckets and in key order within each, and stops at fn's
// first error.
func forEach(tx backend.ReadTx, fn func(b backend.Bucket, k, v []byte) error) error {
	for _, b := range backend.AllBuckets {
		var ferr error
		err := tx.Range(b, nil, nil, 0, func(k, v []byte) bool {
			ferr = fn(b, k, v)
			return ferr == nil
		})
		if err == nil {
			err = ferr
		}
		if err != nil {
			return fmt.Errorf("bucket %s: %w", b, err)
		}
	}
	return nil
}

// scanBackend reads every bucket of be in one pass.
func scanBackend(be backend.Backend) (map[backend.Bucket]BucketSum, state, error) {
	tx, err := be.ReadTx()
	if err != nil {
		return nil, state{}, err
	}
	defer tx.Release()
	s, err := newScan(tx)
	if err != nil {
		return nil, state{}, err
	}
	a := s.async()
	err = forEach(tx, func(b backend.Bucket, k, v []byte) error { a.add(b, k, v); return nil })
	a.wait()
	if err != nil {
		return nil, state{}, err
	}
	st, err := s.kv.result()
	return s.d.result(), st, err
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

// chunkBytes is how much a reader hands a concurrent scan at once.
const chunkBytes = 1 << 20

// asyncScan runs a scan's sums (sha256, CRC-32C, decoding the revisions)
// on a goroutine of its own, beside the pass that reads (and copies) the
// records: on 2 cores the sums then cost the pass almost nothing. The
// reader copies each record into a chunk and hands over full chunks.
type asyncScan struct {
	s          *scan
	cur        *chunk
	full, free chan *chunk
	done       chan struct{}
}

type chunk struct {
	buf  []byte
	recs []chunkRec
}

type chunkRec struct {
	b          backend.Bucket
	klen, vlen int
}

func (s *scan) async() *asyncScan {
	a := &asyncScan{s: s, full: make(chan *chunk, 4), free: make(chan *chunk, 6), done: make(chan struct{})}
	for range cap(a.free) {
		a.free <- &chunk{buf: make([]byte, 0, chunkBytes)}
	}
	full, free, done := a.full, a.free, a.done // wait clears a.full
	go func() {
		defer close(done)
		for c := range full {
			buf := c.buf
			for _, r := range c.recs {
				s.add(r.b, buf[:r.klen:r.klen], buf[r.klen:r.klen+r.vlen:r.klen+r.vlen])
				buf = buf[r.klen+r.vlen:]
			}
			c.buf, c.recs = c.buf[:0], c.recs[:0]
			free <- c
		}
	}()
	return a
}

// add takes the next record, as scan.add.
func (a *asyncScan) add(b backend.Bucket, k, v []byte) {
	if a.cur == nil {
		a.cur = <-a.free
	}
	c := a.cur
	c.buf = append(append(c.buf, k...), v...)
	c.recs = append(c.recs, chunkRec{b, len(k), len(v)})
	if len(c.buf) >= chunkBytes {
		a.full <- c
		a.cur = nil
	}
}

// wait hands over the last records and waits for the sums of all.
func (a *asyncScan) wait() {
	if a.full == nil {
		return
	}
	if a.cur != nil {
		a.full <- a.cur
		a.cur = nil
	}
	close(a.full)
	a.full = nil
	<-a.done
}
