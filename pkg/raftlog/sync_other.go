//go:build !linux

package raftlog

import (
	"errors"
	"os"
)

func fdatasync(f *os.File) error { return f.Sync() }

func preallocate(*os.File, int64) error { return nil }

// canZeroFill is false: without fallocate there is no unwritten space to
// avoid, and no rename that refuses to replace (spare.go).
const canZeroFill = false

func renameNoReplace(string, string) error { return errors.ErrUnsupported }
