/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import "sync"

// kvd patch: an Allocator's buffers of bufferMmapMin bytes and more are
// anonymous memory maps, unmapped when the Allocator frees them (TrimTo,
// Release), as a jemalloc build frees them. Without jemalloc they were Go
// heap that only a collection frees: Badger's table builders allocate
// hundreds of MiB for each memtable flush, and a collection that ran then
// counted them live, so the heap goal and the process's memory grew by as
// much again until the next one.
const bufferMmapMin = 1 << 20

// mapped holds the first byte of every buffer mapped here, so freeBuffer
// unmaps only those, and each once.
var mapped sync.Map // *byte -> struct{}

// allocBuffer returns n zeroed bytes.
func allocBuffer(n int, tag string) []byte {
	if n >= bufferMmapMin {
		if b, err := mmapAnon(n); err == nil {
			mapped.Store(&b[0], struct{}{})
			return b
		}
	}
	return Calloc(n, tag)
}

// freeBuffer releases a buffer allocBuffer returned; b must not be used
// after.
func freeBuffer(b []byte) {
	if cap(b) > 0 {
		if _, ok := mapped.LoadAndDelete(&b[:1][0]); ok {
			if err := munmapAnon(b[:cap(b)]); err != nil {
				panic(err)
			}
			return
		}
	}
	Free(b)
}
