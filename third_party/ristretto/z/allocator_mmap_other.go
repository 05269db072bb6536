//go:build !unix

/*
 * SPDX-FileCopyrightText: © Hypermode Inc. <hello@hypermode.com>
 * SPDX-License-Identifier: Apache-2.0
 */

package z

import "errors"

var errNoAnonMmap = errors.New("no anonymous mmap on this platform")

// mmapAnon fails here, so allocBuffer falls back to Calloc (kvd patch).
func mmapAnon(int) ([]byte, error) { return nil, errNoAnonMmap }

func dropPages([]byte) error { return errNoAnonMmap }
