package powercut

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

func mount(t *testing.T) (*FS, string) {
	t.Helper()
	backing := filepath.Join(t.TempDir(), "backing")
	if err := os.Mkdir(backing, 0o755); err != nil {
		t.Fatal(err)
	}
	return Mount(t, backing), backing
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func syncDir(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	must(t, err)
	defer d.Close()
	must(t, d.Sync())
}

// create makes name in dir with data, fsynced, and fsyncs dir.
func create(t *testing.T, dir, name string, data []byte) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_RDWR|os.O_CREATE, 0o644)
	must(t, err)
	_, err = f.Write(data)
	must(t, err)
	must(t, f.Sync())
	syncDir(t, dir)
	return f
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return b
}

func TestUnsyncedWriteLost(t *testing.T) {
	p, backing := mount(t)
	f := create(t, p.Dir, "f", []byte("synced"))
	_, err := f.WriteAt(bytes.Repeat([]byte("x"), 10000), 3)
	must(t, err)
	// The mount sees the write (another descriptor, so not the same
	// struct file), the backing file does not.
	if got := readFile(t, filepath.Join(p.Dir, "f")); len(got) != 10003 || string(got[:4]) != "synx" {
		t.Fatalf("mount reads %d bytes %q...", len(got), got[:min(8, len(got))])
	}
	if got := readFile(t, filepath.Join(backing, "f")); string(got) != "synced" {
		t.Fatalf("backing holds %q before any fsync", got)
	}
	f.Close()
	r := p.PowerCut(false)
	t.Log(r)
	if got := readFile(t, filepath.Join(backing, "f")); string(got) != "synced" {
		t.Fatalf("after the power cut: %q, want the synced content", got)
	}
	if r.DirtyFiles != 1 {
		t.Fatalf("report: %v", r)
	}
}

func TestSyncedWriteKept(t *testing.T) {
	p, backing := mount(t)
	f := create(t, p.Dir, "f", nil)
	want := bytes.Repeat([]byte("0123456789"), 5000)
	_, err := f.Write(want)
	must(t, err)
	must(t, unix.Fdatasync(int(f.Fd())))
	_, err = f.Write([]byte("lost"))
	must(t, err)
	f.Close()
	p.PowerCut(false)
	if got := readFile(t, filepath.Join(backing, "f")); !bytes.Equal(got, want) {
		t.Fatalf("after the power cut: %d bytes, want the %d fdatasynced", len(got), len(want))
	}
}

func TestTruncate(t *testing.T) {
	p, backing := mount(t)
	orig := bytes.Repeat([]byte("a"), 8192)
	f := create(t, p.Dir, "f", orig)
	must(t, f.Truncate(100))
	must(t, f.Truncate(8192))
	got := make([]byte, 8192)
	_, err := f.ReadAt(got, 0)
	must(t, err)
	if !bytes.Equal(got[:100], orig[:100]) || !bytes.Equal(got[100:], make([]byte, 8092)) {
		t.Fatalf("after truncate and extend: not 100 a's and zeros")
	}
	f.Close()
	p.PowerCut(false)
	if got := readFile(t, filepath.Join(backing, "f")); !bytes.Equal(got, orig) {
		t.Fatalf("unsynced truncate survived the power cut")
	}
}

func TestCreateNeedsDirSync(t *testing.T) {
	p, backing := mount(t)
	must(t, os.Mkdir(filepath.Join(p.Dir, "d"), 0o755))
	syncDir(t, p.Dir)
	d := filepath.Join(p.Dir, "d")
	create(t, d, "kept", []byte("k")).Close()
	f, err := os.Create(filepath.Join(d, "lost"))
	must(t, err)
	_, err = f.Write([]byte("data"))
	must(t, err)
	must(t, f.Sync()) // the data, not the entry
	f.Close()
	must(t, os.Remove(filepath.Join(d, "kept"))) // not durable either
	p.PowerCut(false)
	if _, err := os.Stat(filepath.Join(backing, "d", "lost")); !os.IsNotExist(err) {
		t.Fatalf("a file created without fsync of its directory survived: %v", err)
	}
	if got := readFile(t, filepath.Join(backing, "d", "kept")); string(got) != "k" {
		t.Fatalf("an unsynced unlink was not undone: %q", got)
	}
}

func TestRenameAfterDirSync(t *testing.T) {
	for _, dirSync := range []bool{false, true} {
		t.Run(map[bool]string{false: "no-dir-fsync", true: "dir-fsync"}[dirSync], func(t *testing.T) {
			p, backing := mount(t)
			create(t, p.Dir, "final", []byte("old")).Close()
			create(t, p.Dir, "tmp", []byte("new")).Close()
			must(t, os.Rename(filepath.Join(p.Dir, "tmp"), filepath.Join(p.Dir, "final")))
			if dirSync {
				syncDir(t, p.Dir)
			}
			p.PowerCut(false)
			got := readFile(t, filepath.Join(backing, "final"))
			_, tmpErr := os.Stat(filepath.Join(backing, "tmp"))
			if dirSync && (string(got) != "new" || !os.IsNotExist(tmpErr)) {
				t.Fatalf("synced rename: final %q, tmp %v", got, tmpErr)
			}
			if !dirSync && (string(got) != "old" || tmpErr != nil) {
				t.Fatalf("unsynced rename: final %q, tmp %v; want old and tmp back", got, tmpErr)
			}
		})
	}
}

func TestTornWrite(t *testing.T) {
	const n = 64 << 10
	torn := 0
	for range 8 {
		p, backing := mount(t)
		f := create(t, p.Dir, "f", make([]byte, n))
		_, err := f.WriteAt(bytes.Repeat([]byte{0xAA}, 100), 0)
		must(t, err)
		// One FUSE write of at most 128 KiB.
		_, err = f.WriteAt(bytes.Repeat([]byte{0xBB}, n), 0)
		must(t, err)
		f.Close()
		r := p.PowerCut(true)
		got := readFile(t, filepath.Join(backing, "f"))
		if len(got) != n {
			t.Fatalf("size %d after a torn overwrite, want %d", len(got), n)
		}
		k := 0
		for k < n && got[k] == 0xBB {
			k++
		}
		if !bytes.Equal(got[k:], make([]byte, n-k)) {
			t.Fatalf("not a prefix of the last write over the synced zeros (%s): %x", r.Torn, got[k:min(n, k+16)])
		}
		if r.Torn == "" {
			t.Fatalf("no torn write reported")
		}
		if k > 0 && k < n {
			torn++
		}
	}
	if torn == 0 {
		t.Fatalf("no write was torn in 8 power cuts")
	}
}

// mmap of a file on the mount must not be touched by this process: a page
// fault served by our own FUSE server blocks its thread outside the Go
// scheduler's view, and a stop-the-world GC then waits for it forever. The
// mmap side of the tests runs in a child process (this binary, re-run).
const childEnv = "POWERCUT_MMAP_CHILD"

func TestMain(m *testing.M) {
	if op := os.Getenv(childEnv); op != "" {
		if err := mmapChild(op, os.Getenv("POWERCUT_MMAP_PATH")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func mmapChild(op, path string) error {
	switch op {
	case "write":
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), 0, mmapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		copy(m[0:], "synced by msync")
		if err := unix.Msync(m, unix.MS_SYNC); err != nil {
			return err
		}
		copy(m[mmapSize/2:], "written back, never synced")
		// Written back without a sync: munmap and close (FUSE flush
		// writes the dirty pages back).
		return unix.Munmap(m)
	case "read":
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		m, err := unix.Mmap(int(f.Fd()), 0, 16384, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return err
		}
		fmt.Printf("%s", m[8192:8198])
		return unix.Munmap(m)
	}
	return fmt.Errorf("unknown child op %q", op)
}

func runChild(t *testing.T, op, path string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+op, "POWERCUT_MMAP_PATH="+path)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("mmap child %s: %v", op, err)
	}
	return string(out)
}

const mmapSize = 1 << 20

// Shared writable mmap (as Badger uses): dirty pages reach the file system
// as writes when written back, and msync makes them durable.
func TestMmap(t *testing.T) {
	p, backing := mount(t)
	const n = mmapSize
	f := create(t, p.Dir, "m", nil)
	must(t, f.Truncate(n))
	must(t, f.Sync())
	f.Close()
	runChild(t, "write", filepath.Join(p.Dir, "m"))
	got := readFile(t, filepath.Join(p.Dir, "m"))
	if !bytes.HasPrefix(got[n/2:], []byte("written back")) {
		t.Fatalf("mount does not read the written-back page")
	}
	r := p.PowerCut(false)
	t.Log(r)
	got = readFile(t, filepath.Join(backing, "m"))
	if len(got) != n || !bytes.HasPrefix(got, []byte("synced by msync")) {
		t.Fatalf("msync'ed data lost: size %d, %q", len(got), got[:16])
	}
	if !bytes.Equal(got[n/2:n/2+32], make([]byte, 32)) {
		t.Fatalf("unsynced mmap write survived: %q", got[n/2:n/2+32])
	}
}

// A read-only mmap (as bolt reads) sees pwrite'd data that is not synced.
func TestMmapReadSeesOverlay(t *testing.T) {
	p, _ := mount(t)
	f := create(t, p.Dir, "b", make([]byte, 16384))
	_, err := f.WriteAt([]byte("pwrite"), 8192)
	must(t, err)
	if got := runChild(t, "read", filepath.Join(p.Dir, "b")); got != "pwrite" {
		t.Fatalf("read-only mmap reads %q", got)
	}
	f.Close()
}
