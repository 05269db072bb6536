package badger

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/pb"
	"github.com/dgraph-io/ristretto/v2/z"

	"github.com/kvd-dev/kvd/pkg/backend"
)

var _ backend.BulkLoader = (*Backend)(nil)

// BulkLoad implements backend.BulkLoader with a Badger WriteBatch, which
// commits in transactions of Badger's size limit as it fills and writes
// them concurrently with the caller, instead of one Update per batch.
func (be *Backend) BulkLoad(fn func(put func(b backend.Bucket, key, value []byte) error) error) error {
	release, err := be.enterBulk()
	if err != nil {
		return err
	}
	defer release()
	wb := be.cur.db.NewWriteBatch()
	defer wb.Cancel()
	var written int64
	put := func(b backend.Bucket, key, value []byte) error {
		if len(key) == 0 {
			return fmt.Errorf("badger bulk load in bucket %s: empty key", b)
		}
		// Badger keeps both slices until the batch is written.
		buf, err := bucketPrefix(b, len(key)+len(value))
		if err != nil {
			return err
		}
		buf = append(buf, key...)
		k := buf[:len(buf):len(buf)]
		buf = append(buf, value...)
		if err := wb.Set(k, buf[len(k):]); err != nil {
			return writeErr("bulk load", b, err)
		}
		written += int64(len(buf))
		return nil
	}
	if err := fn(put); err != nil {
		return err
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("bulk load: flush badger write batch in %s: %w", be.cur.dir, err)
	}
	be.written.Add(written)
	return nil
}

var _ backend.SortedBulkLoader = (*Backend)(nil)

// sortedBufBytes is how much a sorted bulk load buffers before it hands a
// batch to the stream writer.
const sortedBufBytes = 16 << 20

// SortedBulkLoad implements backend.SortedBulkLoader with Badger's
// StreamWriter: each bucket is a stream written straight into tables of the
// bottom level, with no memtable, level 0 or compaction on the way (a
// WriteBatch load compresses every block more than once as it compacts).
// It drops whatever the database held.
func (be *Backend) SortedBulkLoad(fn func(put func(b backend.Bucket, key, value []byte) error) error) (err error) {
	release, err := be.enterBulk()
	if err != nil {
		return err
	}
	defer release()
	sw := be.cur.db.NewStreamWriter()
	if err := sw.Prepare(); err != nil {
		return fmt.Errorf("bulk load: prepare badger stream writer in %s: %w", be.cur.dir, err)
	}
	defer func() {
		if err != nil {
			sw.Cancel()
		}
	}()
	buf := z.NewBuffer(sortedBufBytes+sortedBufBytes/4, "kvd.sortedBulkLoad")
	defer buf.Release()
	write := func() error {
		if buf.LenNoPadding() == 0 {
			return nil
		}
		if err := sw.Write(buf); err != nil {
			return fmt.Errorf("bulk load: badger stream write in %s: %w", be.cur.dir, err)
		}
		buf.Reset()
		return nil
	}
	streams := map[backend.Bucket]*sortedStream{}
	var (
		written int64
		kv      pb.KV
		key     []byte
	)
	put := func(b backend.Bucket, k, v []byte) error {
		if len(k) == 0 {
			return fmt.Errorf("badger bulk load in bucket %s: empty key", b)
		}
		st, ok := streams[b]
		if !ok {
			st = &sortedStream{id: uint32(len(streams) + 1)}
			streams[b] = st
		}
		// Badger's stream writer panics on keys out of order.
		if st.last != nil && bytes.Compare(k, st.last) <= 0 {
			return fmt.Errorf("badger bulk load in bucket %s: key %q after %q: %w", b, k, st.last, backend.ErrUnsorted)
		}
		st.last = append(st.last[:0], k...)
		var err error
		if key, err = appendPrefix(key[:0], b); err != nil {
			return err
		}
		key = append(key, k...)
		// One version for everything: the database is new, and the stream
		// writer moves the oracle past it.
		kv = pb.KV{Key: key, Value: v, Version: 1, StreamId: st.id}
		badger.KVToBuffer(&kv, buf)
		written += int64(len(key) + len(v))
		if buf.LenNoPadding() >= sortedBufBytes {
			return write()
		}
		return nil
	}
	if err := fn(put); err != nil {
		return err
	}
	if err := write(); err != nil {
		return err
	}
	if err := sw.Flush(); err != nil {
		return fmt.Errorf("bulk load: flush badger stream writer in %s: %w", be.cur.dir, err)
	}
	be.written.Add(written)
	return nil
}

// sortedStream is one bucket's stream in a sorted bulk load.
type sortedStream struct {
	id   uint32
	last []byte
}

// enterBulk holds the backend open and its writers off for a bulk load, and
// refuses one while a defragment runs.
func (be *Backend) enterBulk() (release func(), err error) {
	if !be.gate.Enter() {
		return nil, backend.ErrClosed
	}
	be.writeMu.Lock()
	release = func() { be.writeMu.Unlock(); be.gate.Exit() }
	if be.journal.Load() != nil {
		release()
		return nil, errors.New("badger bulk load: a defragment is running")
	}
	return release, nil
}
