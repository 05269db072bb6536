// Package fsutil holds the file-system steps kvd's durable files share.
package fsutil

import (
	"fmt"
	"os"
)

// SyncDir makes directory entries in dir (files created, renamed or removed)
// durable: without it a rename can be lost in a crash even after the file's
// own fsync.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s for fsync: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	return nil
}
