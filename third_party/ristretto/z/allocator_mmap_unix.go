//go:build unix

/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import "golang.org/x/sys/unix"

// mmapAnon maps n zeroed bytes of private anonymous memory (kvd patch).
func mmapAnon(n int) ([]byte, error) {
	return unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
}

// dropPages gives b's pages back to the kernel; b stays mapped. Anonymous
// private memory then reads as zeros, a shared file mapping as the file's
// contents again (kvd patch).
func dropPages(b []byte) error { return unix.Madvise(b, unix.MADV_DONTNEED) }
