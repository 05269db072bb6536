// Package powercut is a FUSE loopback file system for tests that loses
// power: it passes everything through to a backing directory except what
// a disk would lose in a power cut, which it keeps in memory until it is
// made durable.
//
//   - File data and size: a write (write(2), or a dirty page of a shared
//     mmap written back by the kernel, e.g. on msync) goes to an in-memory
//     overlay of 4 KiB pages over the backing file; truncates and
//     fallocate size changes too. Reads see the overlay. fsync or
//     fdatasync of the file (msync reaches it as an fsync) writes the
//     file's dirty pages and size through to the backing file.
//   - Directory entries: create, mkdir, mknod, symlink, link, unlink,
//     rmdir and rename are applied to the backing directory at once but
//     journaled; fsync of the directory holding the new entry (for a
//     rename: the destination directory) makes them durable. Removed or
//     replaced entries are kept aside (hard link or rename) until then.
//   - PowerCut discards the overlay of every file and undoes the journaled
//     directory changes (newest first), so that the backing directory
//     holds what a disk obeying POSIX fsync semantics at the strictest
//     would hold; with tear, a random byte prefix of the latest unsynced
//     write (one FUSE WRITE request, at most 128 KiB), with the file's
//     unsynced bytes before its offset, reaches the backing file first.
//     Then it unmounts.
//
// Not simulated: reordering among synced writes (none is needed: a
// synced write is durable), partial loss inside an fsync, metadata other
// than size and entries (modes, times, xattrs are passed through), the
// journaling file systems' habit of persisting a new file's entry with
// the file's own fsync (this model needs the directory fsync, as POSIX
// does), O_TMPFILE (refused). The kernel's FUSE defaults are kept (no
// writeback cache, no direct_io), so every write(2) reaches the file
// system when it is made, and mmap'ed pages when written back.
package powercut

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Mount mounts a power-cut file system over backing (an existing
// directory) on a fresh directory and returns it; FS.Dir is the mount
// point. It skips the test when FUSE is not available (no /dev/fuse, no
// permission to mount). The file system is unmounted in t.Cleanup if no
// PowerCut did it before; unsynced data is then dropped, directory changes
// are kept.
func Mount(t testing.TB, backing string) *FS {
	t.Helper()
	return mountAt(t, backing, t.TempDir())
}

// Remount mounts a new power-cut file system over the same backing
// directory on the same mount point, after a PowerCut.
func (p *FS) Remount(t testing.TB) *FS {
	t.Helper()
	q := mountAt(t, p.backing, p.Dir)
	q.SetJournaled(p.journal.Load())
	return q
}

func mountAt(t testing.TB, backing, dir string) *FS {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("powercut: no FUSE: %v", err)
	}
	backing, err := filepath.Abs(backing)
	if err != nil {
		t.Fatal(err)
	}
	// Entries kept aside live next to the backing directory, on its file
	// system (renames and links into it must work), out of the mount's view.
	trash, err := os.MkdirTemp(filepath.Dir(backing), "."+filepath.Base(backing)+".powercut-")
	if err != nil {
		t.Fatal(err)
	}
	p := &FS{Dir: dir, backing: backing, trash: trash, files: map[uint64]*file{}}
	root := &fs.LoopbackRoot{
		Path: backing,
		NewNode: func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
			return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, p: p}
		},
	}
	var st syscall.Stat_t
	if err := syscall.Stat(backing, &st); err != nil {
		t.Fatal(err)
	}
	root.Dev = uint64(st.Dev)
	root.RootNode = root.NewNode(root, nil, "", &st)
	sec := time.Second
	server, err := fs.Mount(p.Dir, root.RootNode, &fs.Options{
		EntryTimeout: &sec,
		AttrTimeout:  &sec,
		MountOptions: fuse.MountOptions{
			// As root, mount(2) directly: no fusermount needed.
			DirectMount: true,
			FsName:      backing,
			Name:        "powercut",
		},
	})
	if err != nil {
		os.RemoveAll(trash)
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) || os.Getuid() != 0 {
			t.Skipf("powercut: cannot mount FUSE: %v", err)
		}
		t.Fatalf("powercut: mount: %v", err)
	}
	p.server = server
	t.Cleanup(func() {
		// A process still using the mount keeps it (detached) until it
		// exits.
		p.unmount()
		os.RemoveAll(trash)
	})
	return p
}
