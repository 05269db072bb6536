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
// kvd patch: once synced, b's pages leave the mapping (they stay in the page
// cache until the kernel wants the memory; a read faults back in what it
// touches). Badger calls Msync on a table it has just written through its
// map (table.CreateTable) and nowhere else: MmapFile.Sync, which its logs
// use, calls msync alone. Without the drop every table a flush or a
// compaction writes stays in the process's RSS until it is deleted.
func Msync(b []byte) error {
	if err := msync(b); err != nil {
		return err
	}
	return dropMapped(b)
}
