// Package filewatch keeps the parsed contents of a file current: the plugins
// read their htpasswd, group and JWKS files through it, so an edit or a
// rotation needs no restart.
package filewatch

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// File holds the parsed contents of a file and re-reads it when it
// changes. The check is a stat (mtime, size, identity) done on the call
// path at most once per interval, so a request never waits on more than a
// stat unless the file really changed. A file that fails to read or parse
// keeps the last good contents.
type File[T any] struct {
	path     string
	parse    func([]byte) (T, error)
	interval time.Duration
	log      hclog.Logger

	mu      sync.Mutex
	val     T
	fi      os.FileInfo // what the last attempt (good or not) saw
	checked time.Time
	gen     uint64 // counts good loads, so recheck can tell a new key set
	lastErr string // so a lasting failure is logged once, not every interval
}

// New watches path, parsed by parse, looked at no more than once per
// interval.
func New[T any](path string, interval time.Duration, log hclog.Logger, parse func([]byte) (T, error)) *File[T] {
	return &File[T]{path: path, parse: parse, interval: interval, log: log}
}

// Load reads the file for the first time; its error is a start-up error.
func (w *File[T]) Load() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	fi, err := os.Stat(w.path)
	if err != nil {
		return err
	}
	data, err := os.ReadFile(w.path)
	if err != nil {
		return err
	}
	v, err := w.parse(data)
	if err != nil {
		return fmt.Errorf("%s: %w", w.path, err)
	}
	w.val, w.fi, w.checked = v, fi, time.Now()
	return nil
}

// Get returns the current contents, re-reading the file first if it
// changed since the last look (and that look is older than the interval).
func (w *File[T]) Get() T {
	w.mu.Lock()
	defer w.mu.Unlock()
	if now := time.Now(); now.Sub(w.checked) >= w.interval {
		w.checked = now
		w.refresh()
	}
	return w.val
}

// Recheck looks at the file now, whatever the interval, and says whether
// its contents changed: after a signature that no key verifies, a rotated
// file is used at once rather than up to an interval later.
func (w *File[T]) Recheck() (T, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	gen := w.gen
	w.checked = time.Now()
	w.refresh()
	return w.val, w.gen != gen
}

func (w *File[T]) refresh() {
	fi, err := os.Stat(w.path)
	if err != nil {
		w.fail(err.Error())
		return
	}
	if w.fi != nil && os.SameFile(w.fi, fi) && fi.ModTime().Equal(w.fi.ModTime()) && fi.Size() == w.fi.Size() {
		return
	}
	// Remember what was seen even if it does not parse: a bad file is
	// reported once, and retried when it changes again.
	w.fi = fi
	data, err := os.ReadFile(w.path)
	if err != nil {
		w.fail(err.Error())
		return
	}
	v, err := w.parse(data)
	if err != nil {
		w.fail(err.Error())
		return
	}
	w.val, w.lastErr = v, ""
	w.gen++
	w.log.Info("reloaded file", "path", w.path)
}

func (w *File[T]) fail(msg string) {
	if msg == w.lastErr {
		return
	}
	w.lastErr = msg
	w.log.Error("cannot reload file, keeping the last good contents", "path", w.path, "error", msg)
}
