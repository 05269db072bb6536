/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import "sync"

// kvd patch: an Allocator's buffers of bufferMmapMin bytes and more are
// anonymous memory maps whose pages go back to the kernel when the Allocator
// frees them (TrimTo, Release), as a jemalloc build frees them. Without
// jemalloc they were Go heap that only a collection frees: Badger's table
// builders allocate hundreds of MiB for each memtable flush, and a
// collection that ran then counted them live, so the heap goal and the
// process's memory grew by as much again until the next one.
//
// A freed buffer's pages are dropped with madvise(MADV_DONTNEED) and its
// mapping is kept for the next buffer of its size, never unmapped: munmap
// takes the process's address-space lock for writing while it frees the
// pages, and every page fault meanwhile (Badger reads its tables through
// memory maps) waits behind it. An earlier version that unmapped raised
// kvd's put p99 by 12-30% at 4 GiB of data.
const bufferMmapMin = 1 << 20

var buffers = struct {
	sync.Mutex
	// live holds the first byte of every mapped buffer in use, so that
	// freeBuffer takes back only those, and each once.
	live map[*byte]struct{}
	// idle holds freed mappings by length, their pages dropped.
	idle map[int][][]byte
}{live: map[*byte]struct{}{}, idle: map[int][][]byte{}}

// allocBuffer returns n zeroed bytes.
func allocBuffer(n int, tag string) []byte {
	if n < bufferMmapMin {
		return Calloc(n, tag)
	}
	buffers.Lock()
	defer buffers.Unlock()
	var b []byte
	if free := buffers.idle[n]; len(free) > 0 {
		b = free[len(free)-1]
		free[len(free)-1] = nil
		buffers.idle[n] = free[:len(free)-1]
	} else {
		var err error
		if b, err = mmapAnon(n); err != nil {
			return Calloc(n, tag)
		}
	}
	buffers.live[&b[0]] = struct{}{}
	return b
}

// freeBuffer releases a buffer allocBuffer returned; b must not be used
// after.
func freeBuffer(b []byte) {
	if cap(b) >= bufferMmapMin {
		b = b[:cap(b)]
		buffers.Lock()
		_, ok := buffers.live[&b[0]]
		delete(buffers.live, &b[0])
		buffers.Unlock()
		if ok {
			// Dropped pages read back as zeros: the next allocBuffer of
			// this size needs no clearing.
			if err := dropPages(b); err != nil {
				panic(err)
			}
			buffers.Lock()
			buffers.idle[len(b)] = append(buffers.idle[len(b)], b)
			buffers.Unlock()
			return
		}
	}
	Free(b)
}
