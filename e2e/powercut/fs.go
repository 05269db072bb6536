package powercut

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// FS is a mounted power-cut file system over a backing directory.
type FS struct {
	// Dir is the mount point.
	Dir string

	backing string
	trash   string // on the backing file system, outside the backing directory
	server  *fuse.Server
	seq     atomic.Uint64 // orders writes (for the torn write)
	journal atomic.Bool   // see SetJournaled

	mu     sync.Mutex
	files  map[uint64]*file // by backing inode number
	ops    []*dirOp         // directory operations not yet made durable
	trashN int
	cut    bool
}

// dirOp is a directory entry change applied to the backing directory but
// not yet durable: undo reverts it at a power cut; it becomes durable when
// the directory dir (an inode number) is fsynced, and done then runs.
type dirOp struct {
	dir  uint64
	desc string
	undo func() error
	done func()
}

// Report says what a power cut threw away.
type Report struct {
	DirtyFiles     int    // files with unsynced data or size changes
	DirtyBytes     int64  // bytes of unsynced dirty pages discarded
	UndoneDirOps   int    // directory entry changes undone
	Torn           string // the torn write, when one was kept in part
	UndoErrors     []string
	UndoneDirDescs []string
}

func (r Report) String() string {
	s := fmt.Sprintf("discarded %d dirty files (%d bytes of dirty pages), %d directory ops undone", r.DirtyFiles, r.DirtyBytes, r.UndoneDirOps)
	if r.Torn != "" {
		s += "; torn: " + r.Torn
	}
	if len(r.UndoErrors) > 0 {
		s += fmt.Sprintf("; undo errors: %q", r.UndoErrors)
	}
	return s
}

// SetJournaled(true) makes an fsync of a file also make every pending
// directory change durable, as a journaling file system (ext4, xfs) does by
// committing its journal; by default only an fsync of the directory does
// (POSIX). Remount keeps the setting.
func (p *FS) SetJournaled(on bool) { p.journal.Store(on) }

func (p *FS) isCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// open returns the state of the backing file at path, opening it if needed.
func (p *FS) open(path string) (*file, syscall.Errno) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, errno(err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, errno(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		unix.Close(fd)
		return nil, syscall.EIO
	}
	if f, ok := p.files[st.Ino]; ok {
		unix.Close(fd)
		f.mu.Lock()
		f.opens++
		f.mu.Unlock()
		return f, 0
	}
	f := &file{fd: fd, ino: st.Ino, size: st.Size, diskSize: st.Size, zeroFrom: st.Size, pages: map[int64][]byte{}, opens: 1}
	p.files[st.Ino] = f
	return f, 0
}

// release drops a handle; a file with no handles and nothing pending is
// forgotten (the backing file is exactly what the mount shows).
func (p *FS) release(f *file) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens--
	if f.opens == 0 && !f.dirtyLocked() && p.files[f.ino] == f {
		delete(p.files, f.ino)
		unix.Close(f.fd)
	}
}

// fixAttr makes attributes read from the backing file show the size the
// mount has.
func (p *FS) fixAttr(a *fuse.Attr) {
	p.mu.Lock()
	f := p.files[a.Ino]
	p.mu.Unlock()
	if f == nil {
		return
	}
	f.mu.Lock()
	a.Size = uint64(f.size)
	// Allocated blocks: the backing file's, plus the dirty pages (sparse
	// files stay sparse, as users of st_blocks for disk usage expect).
	a.Blocks = min(a.Blocks+uint64(len(f.pages))*pageSize/512, (a.Size+pageSize-1)/pageSize*pageSize/512)
	f.mu.Unlock()
}

// record notes a directory operation; p.mu is held.
func (p *FS) record(op *dirOp) { p.ops = append(p.ops, op) }

// syncDir makes the pending operations on directory ino durable.
func (p *FS) syncDir(ino uint64) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return syscall.EIO
	}
	kept := p.ops[:0]
	for _, op := range p.ops {
		if op.dir == ino {
			if op.done != nil {
				op.done()
			}
			continue
		}
		kept = append(kept, op)
	}
	clear(p.ops[len(kept):])
	p.ops = kept
	return 0
}

// Sync makes everything durable, as sync(2) followed by a quiet moment
// would: every file's pending data and every pending directory change.
func (p *FS) Sync() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return syscall.EIO
	}
	for _, f := range p.files {
		if e := f.sync(); e != 0 {
			return e
		}
	}
	p.commitDirsLocked()
	return nil
}

func (p *FS) commitDirsLocked() {
	for _, op := range p.ops {
		if op.done != nil {
			op.done()
		}
	}
	p.ops = nil
}

// toTrash gives a name for an entry kept aside for a possible undo; p.mu
// is held.
func (p *FS) toTrash() string {
	p.trashN++
	return filepath.Join(p.trash, fmt.Sprint(p.trashN))
}

// PowerCut loses power: every write not fsynced and every directory change
// whose directory was not fsynced is discarded, except, with tear, a random
// prefix of the latest unsynced write, which reaches the backing file with
// the unsynced content of that file before its offset. The
// file system is then unmounted; from the cut on, every operation on it
// fails with EIO. The caller must have stopped (killed) the processes using
// the mount first.
func (p *FS) PowerCut(tear bool) Report {
	var r Report
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		return r
	}
	p.cut = true
	var lastFile *file
	for _, f := range p.files {
		f.mu.Lock()
		if f.dirtyLocked() {
			r.DirtyFiles++
			r.DirtyBytes += int64(len(f.pages)) * pageSize
		}
		if f.last != nil && (lastFile == nil || f.last.seq > lastFile.last.seq) {
			lastFile = f
		}
	}
	if tear && lastFile != nil {
		// Writeback got through the file's dirty bytes before the write
		// (a sector is never persisted without the earlier writes to it),
		// then through a prefix of the write.
		w := lastFile.last
		k := rand.IntN(len(w.data) + 1)
		for pi, pg := range lastFile.pages {
			ps := pi * pageSize
			if ps >= w.off || ps >= lastFile.size {
				continue
			}
			if _, err := unix.Pwrite(lastFile.fd, pg[:min(pageSize, w.off-ps, lastFile.size-ps)], ps); err != nil {
				r.UndoErrors = append(r.UndoErrors, "torn write: "+err.Error())
			}
		}
		if _, err := unix.Pwrite(lastFile.fd, w.data[:k], w.off); err != nil {
			r.UndoErrors = append(r.UndoErrors, "torn write: "+err.Error())
		}
		r.Torn = fmt.Sprintf("inode %d: %d of %d bytes at offset %d", lastFile.ino, k, len(w.data), w.off)
	}
	for _, f := range p.files {
		unix.Close(f.fd)
		f.pages = nil
		f.mu.Unlock()
	}
	p.files = map[uint64]*file{}
	for i := len(p.ops) - 1; i >= 0; i-- {
		op := p.ops[i]
		r.UndoneDirOps++
		r.UndoneDirDescs = append(r.UndoneDirDescs, op.desc)
		if err := op.undo(); err != nil {
			r.UndoErrors = append(r.UndoErrors, op.desc+": "+err.Error())
		}
	}
	p.ops = nil
	os.RemoveAll(p.trash)
	p.mu.Unlock()
	p.unmount()
	return r
}

func (p *FS) unmount() {
	if p.server == nil {
		return
	}
	if err := p.server.Unmount(); err != nil {
		// Busy (a process still has files open): detach it lazily.
		unix.Unmount(p.Dir, unix.MNT_DETACH)
	}
	p.server = nil
}

// node is a loopback node whose file data goes through the overlay and
// whose directory changes are journaled.
type node struct {
	fs.LoopbackNode
	p *FS
}

func (n *node) path() string {
	return filepath.Join(n.p.backing, n.Path(n.Root()))
}

func (n *node) ino() uint64 { return n.StableAttr().Ino }

var (
	_ fs.NodeLookuper       = (*node)(nil)
	_ fs.NodeGetattrer      = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeStatxer        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeTmpfiler       = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.FileReader         = (*handle)(nil)
	_ fs.FileWriter         = (*handle)(nil)
	_ fs.FileFsyncer        = (*handle)(nil)
	_ fs.FileFlusher        = (*handle)(nil)
	_ fs.FileReleaser       = (*handle)(nil)
	_ fs.FileAllocater      = (*handle)(nil)
	_ fs.FileFsyncdirer     = (*dirHandle)(nil)
	_ fs.FileReaddirenter   = (*dirHandle)(nil)
	_ fs.FileSeekdirer      = (*dirHandle)(nil)
	_ fs.FileReleasedirer   = (*dirHandle)(nil)
)

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, e := n.LoopbackNode.Lookup(ctx, name, out)
	if e == 0 {
		n.p.fixAttr(&out.Attr)
	}
	return ch, e
}

func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	var st syscall.Stat_t
	if err := syscall.Lstat(n.path(), &st); err != nil {
		return errno(err)
	}
	out.FromStat(&st)
	n.p.fixAttr(&out.Attr)
	return 0
}

// Statx is left to the kernel's fallback to Getattr, which has the size.
func (n *node) Statx(context.Context, fs.FileHandle, uint32, uint32, *fuse.StatxOut) syscall.Errno {
	return syscall.ENOSYS
}

func (n *node) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.p.isCut() {
		return syscall.EIO
	}
	if sz, ok := in.GetSize(); ok {
		var f *file
		if h, ok := fh.(*handle); ok {
			f = h.f
		} else {
			var e syscall.Errno
			if f, e = n.p.open(n.path()); e != 0 {
				return e
			}
			defer n.p.release(f)
		}
		f.truncate(int64(sz))
		in.Valid &^= fuse.FATTR_SIZE
	}
	if e := n.LoopbackNode.Setattr(ctx, nil, in, out); e != 0 {
		return e
	}
	n.p.fixAttr(&out.Attr)
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f, e := n.p.open(n.path())
	if e != 0 {
		return nil, 0, e
	}
	if flags&syscall.O_TRUNC != 0 {
		f.truncate(0)
	}
	return &handle{p: n.p, f: f}, 0, 0
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	path := filepath.Join(n.path(), name)
	n.p.mu.Lock()
	if n.p.cut {
		n.p.mu.Unlock()
		return nil, nil, 0, syscall.EIO
	}
	var st syscall.Stat_t
	existed := syscall.Lstat(path, &st) == nil
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|int(flags&syscall.O_EXCL), mode)
	if err != nil {
		n.p.mu.Unlock()
		return nil, nil, 0, errno(err)
	}
	unix.Close(fd)
	if !existed {
		n.p.record(&dirOp{dir: n.ino(), desc: "create " + path, undo: func() error { return os.Remove(path) }})
	}
	n.p.mu.Unlock()
	ch, e := n.Lookup(ctx, name, out)
	if e != 0 {
		return nil, nil, 0, e
	}
	f, e := n.p.open(path)
	if e != 0 {
		return nil, nil, 0, e
	}
	if flags&syscall.O_TRUNC != 0 {
		f.truncate(0)
		out.Attr.Size, out.Attr.Blocks = 0, 0
	}
	return ch, &handle{p: n.p, f: f}, 0, 0
}

func (n *node) Tmpfile(context.Context, uint32, uint32, *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.ENOTSUP
}

// created records a new entry name in n made by do.
func (n *node) created(name, what string, do func() (*fs.Inode, syscall.Errno)) (*fs.Inode, syscall.Errno) {
	path := filepath.Join(n.path(), name)
	n.p.mu.Lock()
	defer n.p.mu.Unlock()
	if n.p.cut {
		return nil, syscall.EIO
	}
	ch, e := do()
	if e == 0 {
		n.p.record(&dirOp{dir: n.ino(), desc: what + " " + path, undo: func() error { return os.RemoveAll(path) }})
	}
	return ch, e
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.created(name, "mkdir", func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Mkdir(ctx, name, mode, out) })
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.created(name, "mknod", func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Mknod(ctx, name, mode, rdev, out) })
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return n.created(name, "symlink", func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Symlink(ctx, target, name, out) })
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, e := n.created(name, "link", func() (*fs.Inode, syscall.Errno) { return n.LoopbackNode.Link(ctx, target, name, out) })
	if e == 0 {
		n.p.fixAttr(&out.Attr)
	}
	return ch, e
}

// removed moves the entry name of n aside (so that it can come back at a
// power cut) instead of removing it.
func (n *node) removed(name, what string, dir bool) syscall.Errno {
	path := filepath.Join(n.path(), name)
	n.p.mu.Lock()
	defer n.p.mu.Unlock()
	if n.p.cut {
		return syscall.EIO
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return errno(err)
	}
	if isDir := st.Mode&syscall.S_IFMT == syscall.S_IFDIR; isDir != dir {
		if dir {
			return syscall.ENOTDIR
		}
		return syscall.EISDIR
	}
	if dir {
		if ents, err := os.ReadDir(path); err != nil {
			return errno(err)
		} else if len(ents) > 0 {
			return syscall.ENOTEMPTY
		}
	}
	aside := n.p.toTrash()
	if err := syscall.Rename(path, aside); err != nil {
		return errno(err)
	}
	n.p.record(&dirOp{
		dir:  n.ino(),
		desc: what + " " + path,
		undo: func() error { return syscall.Rename(aside, path) },
		done: func() { os.RemoveAll(aside) },
	})
	return 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.removed(name, "unlink", false)
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.removed(name, "rmdir", true)
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok {
		return syscall.EXDEV
	}
	p1 := filepath.Join(n.path(), name)
	p2 := filepath.Join(np.path(), newName)
	n.p.mu.Lock()
	defer n.p.mu.Unlock()
	if n.p.cut {
		return syscall.EIO
	}
	desc := "rename " + p1 + " -> " + p2
	if flags&unix.RENAME_EXCHANGE != 0 {
		if err := unix.Renameat2(unix.AT_FDCWD, p1, unix.AT_FDCWD, p2, unix.RENAME_EXCHANGE); err != nil {
			return errno(err)
		}
		n.p.record(&dirOp{dir: np.ino(), desc: "exchange " + p1 + " <-> " + p2, undo: func() error {
			return unix.Renameat2(unix.AT_FDCWD, p1, unix.AT_FDCWD, p2, unix.RENAME_EXCHANGE)
		}})
		return 0
	}
	// The entry the rename replaces is kept aside: a hard link for a file
	// (so that the rename stays atomic), the (empty) directory itself.
	aside := ""
	var st syscall.Stat_t
	if syscall.Lstat(p2, &st) == nil && flags&unix.RENAME_NOREPLACE == 0 {
		var sst syscall.Stat_t
		if syscall.Lstat(p1, &sst) == nil && sst.Ino == st.Ino {
			return 0 // the same file: rename does nothing
		}
		aside = n.p.toTrash()
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			if ents, err := os.ReadDir(p2); err == nil && len(ents) > 0 {
				return syscall.ENOTEMPTY
			}
			if err := syscall.Rename(p2, aside); err != nil {
				return errno(err)
			}
		} else if err := syscall.Link(p2, aside); err != nil {
			return errno(err)
		}
	}
	if err := unix.Renameat2(unix.AT_FDCWD, p1, unix.AT_FDCWD, p2, uint(flags)); err != nil {
		if aside != "" {
			if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
				syscall.Rename(aside, p2)
			} else {
				syscall.Unlink(aside)
			}
		}
		return errno(err)
	}
	n.p.record(&dirOp{
		dir:  np.ino(),
		desc: desc,
		undo: func() error {
			if err := syscall.Rename(p2, p1); err != nil {
				return err
			}
			if aside != "" {
				return syscall.Rename(aside, p2)
			}
			return nil
		},
		done: func() {
			if aside != "" {
				os.RemoveAll(aside)
			}
		},
	})
	return 0
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	ds, e := fs.NewLoopbackDirStream(n.path())
	if e != 0 {
		return nil, 0, e
	}
	return &dirHandle{ds: ds, n: n}, 0, 0
}

// dirHandle is a loopback directory stream whose fsync makes the pending
// operations on the directory durable.
type dirHandle struct {
	ds fs.DirStream
	n  *node
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.(fs.FileReaddirenter).Readdirent(ctx)
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.(fs.FileSeekdirer).Seekdir(ctx, off)
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	d.ds.(fs.FileReleasedirer).Releasedir(ctx, flags)
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.p.syncDir(d.n.ino())
}

// handle is an open regular file.
type handle struct {
	p        *FS
	f        *file
	released atomic.Bool
}

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if h.p.isCut() {
		return nil, syscall.EIO
	}
	n, e := h.f.read(dest, off)
	if e != 0 {
		return nil, e
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if h.p.isCut() {
		return 0, syscall.EIO
	}
	if e := h.f.write(data, off, h.p.seq.Add(1)); e != 0 {
		return 0, e
	}
	return uint32(len(data)), 0
}

func (h *handle) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if h.p.isCut() {
		return syscall.EIO
	}
	if e := h.f.sync(); e != 0 || !h.p.journal.Load() {
		return e
	}
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	if !h.p.cut {
		h.p.commitDirsLocked()
	}
	return 0
}

func (h *handle) Flush(ctx context.Context) syscall.Errno { return 0 }

func (h *handle) Release(ctx context.Context) syscall.Errno {
	if h.released.CompareAndSwap(false, true) {
		h.p.release(h.f)
	}
	return 0
}

func (h *handle) Allocate(ctx context.Context, off, size uint64, mode uint32) syscall.Errno {
	if h.p.isCut() {
		return syscall.EIO
	}
	switch mode {
	case 0:
		h.f.mu.Lock()
		if end := int64(off + size); end > h.f.size {
			h.f.truncateLocked(end)
		}
		h.f.mu.Unlock()
		return 0
	case unix.FALLOC_FL_KEEP_SIZE:
		return 0
	}
	return syscall.ENOTSUP
}
