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
	// Commits skip their fsync: nothing is durable before Sync anyway. So
	// that Sync does not write the whole file at the end, each commit
	// starts writing its pages back on a goroutine while the next fills,
	// one at a time.
	noSync := be.db.NoSync
	be.db.NoSync = true
	var flushing chan error
	waitFlush := func() error {
		if flushing == nil {
			return nil
		}
		err := <-flushing
		flushing = nil
		if err != nil {
			return fmt.Errorf("bulk load: write back: %w", err)
		}
		return nil
	}
	defer func() {
		if ferr := waitFlush(); err == nil {
			err = ferr
		}
		be.db.NoSync = noSync
	}()
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
		if err := waitFlush(); err != nil {
			return err
		}
		flushing = make(chan error, 1)
		go func(done chan<- error) { done <- be.db.Sync() }(flushing)
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
