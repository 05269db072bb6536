package bolt

import (
	"errors"
	"fmt"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// bulkTxBytes bounds one transaction of BulkLoad: bolt holds a
// transaction's dirty pages in memory until it commits.
const bulkTxBytes = 64 << 20

var _ backend.BulkLoader = (*Backend)(nil)

// BulkLoad implements backend.BulkLoader: transactions of bulkTxBytes whose
// pages are filled completely (the records of a bucket come in key order),
// so the file comes out as compact as a defragmented one.
func (be *Backend) BulkLoad(fn func(put func(b backend.Bucket, key, value []byte) error) error) (err error) {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	be.writeMu.Lock()
	defer be.writeMu.Unlock()
	if be.journal.Load() != nil {
		return errors.New("bolt bulk load: a defragment is running")
	}
	tx, err := be.db.Begin(true)
	if err != nil {
		return fmt.Errorf("bulk load: begin: %w", err)
	}
	defer func() {
		if tx != nil {
			_ = tx.Rollback()
		}
	}()
	n := 0
	put := func(b backend.Bucket, key, value []byte) error {
		if err := b.Validate(); err != nil {
			return err
		}
		bk, err := tx.CreateBucketIfNotExists([]byte(b))
		if err != nil {
			return fmt.Errorf("bulk load: bucket %s: %w", b, err)
		}
		bk.FillPercent = 1
		// Bolt keeps the slices it is given until the commit.
		buf := make([]byte, 0, len(key)+len(value))
		buf = append(append(buf, key...), value...)
		if err := bk.Put(buf[:len(key):len(key)], buf[len(key):]); err != nil {
			return fmt.Errorf("bulk load: put in %s: %w", b, err)
		}
		if n += len(buf); n < bulkTxBytes {
			return nil
		}
		n = 0
		err = tx.Commit()
		tx = nil
		if err != nil {
			return fmt.Errorf("bulk load: commit: %w", err)
		}
		if tx, err = be.db.Begin(true); err != nil {
			return fmt.Errorf("bulk load: begin: %w", err)
		}
		return nil
	}
	if err := fn(put); err != nil {
		return err
	}
	err = tx.Commit()
	tx = nil
	if err != nil {
		return fmt.Errorf("bulk load: commit: %w", err)
	}
	return nil
}
