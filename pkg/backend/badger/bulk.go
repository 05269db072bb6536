package badger

import (
	"errors"
	"fmt"

	"github.com/kvd-dev/kvd/pkg/backend"
)

var _ backend.BulkLoader = (*Backend)(nil)

// BulkLoad implements backend.BulkLoader with a Badger WriteBatch, which
// commits in transactions of Badger's size limit as it fills and writes
// them concurrently with the caller, instead of one Update per batch.
func (be *Backend) BulkLoad(fn func(put func(b backend.Bucket, key, value []byte) error) error) error {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	be.writeMu.Lock()
	defer be.writeMu.Unlock()
	if be.journal.Load() != nil {
		return errors.New("badger bulk load: a defragment is running")
	}
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
