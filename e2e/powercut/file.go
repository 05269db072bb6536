package powercut

import (
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// pageSize is the granularity of the in-memory overlay: a write dirties the
// pages it touches, and a sync writes whole dirty pages (clipped to the
// file's size) to the backing file.
const pageSize = 4096

// file is the state of one backing inode (keyed by its inode number, so it
// survives renames, unlinks, closes and the kernel forgetting the node):
// everything written since the last fsync of the file lives here, not in
// the backing file.
type file struct {
	mu       sync.Mutex
	fd       int // the backing file, O_RDWR; kept open while there is state
	ino      uint64
	size     int64 // the size the mount shows
	diskSize int64 // the backing file's size (as of open or the last sync)
	// zeroFrom: backing bytes at and past it read as zeros (a truncate
	// since the last sync cut them off). zeroFrom <= size always.
	zeroFrom int64
	pages    map[int64][]byte // page index -> pageSize bytes, the current content
	opens    int
	last     *lastWrite // the latest write not yet synced
}

type lastWrite struct {
	seq  uint64
	off  int64
	data []byte
}

func (f *file) dirtyLocked() bool {
	return len(f.pages) > 0 || f.size != f.diskSize || f.zeroFrom != f.diskSize
}

// readBase fills b with the bytes at off as the backing file holds them
// now, with a pending truncate applied.
func (f *file) readBase(b []byte, off int64) error {
	clear(b)
	limit := min(f.zeroFrom, f.diskSize)
	if off >= limit {
		return nil
	}
	n := min(int64(len(b)), limit-off)
	for done := int64(0); done < n; {
		m, err := unix.Pread(f.fd, b[done:n], off+done)
		if err != nil {
			return err
		}
		if m == 0 {
			break // the backing file is shorter than expected: zeros
		}
		done += int64(m)
	}
	return nil
}

func (f *file) read(b []byte, off int64) (int, syscall.Errno) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if off >= f.size {
		return 0, 0
	}
	n := min(int64(len(b)), f.size-off)
	b = b[:n]
	if err := f.readBase(b, off); err != nil {
		return 0, errno(err)
	}
	for pi := off / pageSize; pi*pageSize < off+n; pi++ {
		p, ok := f.pages[pi]
		if !ok {
			continue
		}
		ps := pi * pageSize
		lo, hi := max(off, ps), min(off+n, ps+pageSize)
		copy(b[lo-off:hi-off], p[lo-ps:hi-ps])
	}
	return int(n), 0
}

func (f *file) write(data []byte, off int64, seq uint64) syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	end := off + int64(len(data))
	for pi := off / pageSize; pi*pageSize < end; pi++ {
		ps := pi * pageSize
		lo, hi := max(off, ps), min(end, ps+pageSize)
		p, ok := f.pages[pi]
		if !ok {
			p = make([]byte, pageSize)
			if lo != ps || hi != ps+pageSize {
				if err := f.readBase(p, ps); err != nil {
					return errno(err)
				}
			}
			f.pages[pi] = p
		}
		copy(p[lo-ps:hi-ps], data[lo-off:hi-off])
	}
	f.size = max(f.size, end)
	f.last = &lastWrite{seq: seq, off: off, data: append([]byte(nil), data...)}
	return 0
}

func (f *file) truncate(size int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.truncateLocked(size)
}

func (f *file) truncateLocked(size int64) {
	if size < f.size {
		f.zeroFrom = min(f.zeroFrom, size)
		for pi, p := range f.pages {
			ps := pi * pageSize
			switch {
			case ps >= size:
				delete(f.pages, pi)
			case ps+pageSize > size:
				clear(p[size-ps:])
			}
		}
	}
	f.size = size
}

// sync writes the file's pending state through to the backing file.
func (f *file) sync() syscall.Errno {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.dirtyLocked() {
		f.last = nil
		return 0
	}
	if f.zeroFrom < f.diskSize {
		if err := unix.Ftruncate(f.fd, f.zeroFrom); err != nil {
			return errno(err)
		}
	}
	for pi, p := range f.pages {
		ps := pi * pageSize
		if ps >= f.size {
			continue
		}
		if _, err := unix.Pwrite(f.fd, p[:min(pageSize, f.size-ps)], ps); err != nil {
			return errno(err)
		}
	}
	if err := unix.Ftruncate(f.fd, f.size); err != nil {
		return errno(err)
	}
	// The backing directory is never really powered off, so it needs no
	// fsync of its own: writing through is what makes the data durable
	// in this model.
	clear(f.pages)
	f.diskSize, f.zeroFrom, f.last = f.size, f.size, nil
	return 0
}

func errno(err error) syscall.Errno {
	if e, ok := err.(syscall.Errno); ok {
		return e
	}
	return syscall.EIO
}
