package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kvd-dev/kvd/pkg/fsutil"
)

// LockFile is the lock's file name inside the data dir.
const LockFile = "kvd.lock"

// ErrInUse is returned (wrapped) by Lock when another process holds the
// data dir.
var ErrInUse = errors.New("data dir is in use")

// Lock is an exclusive hold on a data dir: a running member holds it, and
// so do the offline tools (migrate), so that they never work on files a
// member has open. It is an flock, released by the kernel when the process
// ends, however it ends.
type Lock struct {
	f *os.File
}

// Acquire locks dir (creating it if needed) without waiting: if another
// process holds it, it returns ErrInUse naming that process's pid.
func Acquire(dir string) (*Lock, error) {
	if err := fsutil.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock data dir: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := strings.TrimSpace(string(b))
			if holder == "" {
				holder = "unknown"
			}
			return nil, fmt.Errorf("%w: %s is locked by another kvd process (pid %s); stop it first", ErrInUse, dir, holder)
		}
		return nil, fmt.Errorf("lock data dir %s: %w", dir, err)
	}
	// The pid is only for the error message above: the flock is the lock.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return &Lock{f: f}, nil
}

// Release gives the lock up. Calling it twice is harmless.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the file drops the flock
	l.f = nil
	return err
}
