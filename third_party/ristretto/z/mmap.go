/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import (
	"os"
)

// Mmap uses the mmap system call to memory-map a file. If writable is true,
// memory protection of the pages is set so that they may be written to as well.
func Mmap(fd *os.File, writable bool, size int64) ([]byte, error) {
	return mmap(fd, writable, size)
}

// Munmap unmaps a previously mapped slice.
func Munmap(b []byte) error {
	return munmap(b)
}

// Madvise uses the madvise system call to give advise about the use of memory
// when using a slice that is memory-mapped to a file. Set the readahead flag to
// false if page references are expected in random order.
func Madvise(b []byte, readahead bool) error {
	return madvise(b, readahead)
}

// Msync would call sync on the mmapped data.
//
// kvd patch: once the data is written back, b's pages are dropped from this
// process's page tables (they stay in the page cache, and a later read of b
// maps them again). Badger calls Msync only for a table it has just written
// through its map (table.CreateTable), so without this every table a flush
// or a compaction wrote stayed resident in the process, counted in its RSS
// though it was never read.
func Msync(b []byte) error {
	if err := msync(b); err != nil {
		return err
	}
	// Best effort: the data is safe either way (see dropPages' platforms).
	_ = dropPages(b)
	return nil
}
