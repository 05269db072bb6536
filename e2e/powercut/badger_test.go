package powercut

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// badgerChildEnv tells a child process of TestBadgerFlushedTableSurvives
// what to do: "write DIR" or "check DIR". Badger runs in a child because it
// mmaps its files, and a page fault on a FUSE file blocks the faulting
// thread until the FUSE server answers: in the serving process, the Go
// runtime's stop-the-world would wait for that thread forever.
const badgerChildEnv = "KVD_POWERCUT_BADGER_CHILD"

const (
	badgerValueBytes = 512
	badgerKeys       = 8192 // 4 MiB: several flushes of 1 MiB memtables
	badgerBatch      = 128
)

// TestBadgerFlushedTableSurvives: Badger names each table it flushes in its
// manifest right after creating it, and syncs the table but not its
// directory (ristretto's z.OpenMmapFile tests the new file's size for zero
// after setting it). Under POSIX a power cut can then keep the manifest and
// lose the table's name, and Badger refuses to open: "file does not exist
// for table N", as a CI run of TestPowerCut/badger/posix found after the
// background flush of a replayed memtable. kvd builds Badger against
// third_party/ristretto, which syncs the directory of every file it
// creates; this module uses the same copy, so this test fails without the
// patch. A child process writes until Badger has flushed tables, and is
// killed before the power cut, as kvd would be.
func TestBadgerFlushedTableSurvives(t *testing.T) {
	if arg := os.Getenv(badgerChildEnv); arg != "" {
		badgerChild(arg)
		return
	}
	p, _ := mount(t)
	dir := filepath.Join(p.Dir, "badger")
	must(t, os.Mkdir(dir, 0o755))
	syncDir(t, p.Dir)

	writer := startBadgerChild(t, "write "+dir)
	select {
	case line := <-writer.lines:
		if !strings.HasPrefix(line, "ready ") {
			t.Fatalf("writer: %s", line)
		}
		t.Logf("writer: %s", line)
	case <-time.After(60 * time.Second):
		t.Fatal("writer not ready within 60s")
	}
	writer.kill()

	r := p.PowerCut(false)
	t.Logf("power cut: %v; undone: %q", r, r.UndoneDirDescs)
	p.Remount(t)
	checker := startBadgerChild(t, "check "+dir)
	select {
	case line := <-checker.lines:
		if line != "ok" {
			t.Fatalf("after the power cut: %s", line)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("check not done within 60s")
	}
}

type badgerProc struct {
	cmd   *exec.Cmd
	lines chan string // the first line that says ready, ok or error
}

func startBadgerChild(t *testing.T, arg string) *badgerProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestBadgerFlushedTableSurvives$")
	cmd.Env = append(os.Environ(), badgerChildEnv+"="+arg)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	must(t, err)
	must(t, cmd.Start())
	b := &badgerProc{cmd: cmd, lines: make(chan string, 1)}
	// Before the remount's cleanup unmounts (cleanups run last first).
	t.Cleanup(b.kill)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if line := sc.Text(); line == "ok" || strings.HasPrefix(line, "ready ") || strings.HasPrefix(line, "error ") {
				b.lines <- line
				return
			}
		}
		b.lines <- "error: the child exited"
	}()
	return b
}

func (b *badgerProc) kill() {
	_ = b.cmd.Process.Kill()
	_ = b.cmd.Wait()
}

func badgerKey(i int) []byte { return fmt.Appendf(nil, "key-%04d", i) }

// badgerChild runs the child's part. "write DIR" writes badgerKeys synced
// values with 1 MiB memtables, waits until Badger lists flushed tables
// (their manifest records are synced by then), prints "ready" and waits
// to be killed. "check DIR" opens the database and reads every value back,
// then prints "ok".
func badgerChild(arg string) {
	fail := func(err error) {
		fmt.Printf("error %v\n", err)
		os.Exit(1)
	}
	mode, dir, _ := strings.Cut(arg, " ")
	if mode == "check" {
		if err := badgerCheck(dir); err != nil {
			fail(err)
		}
		fmt.Println("ok")
		os.Exit(0)
	}
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).
		WithSyncWrites(true).WithMemTableSize(1 << 20).WithValueThreshold(1 << 10))
	if err != nil {
		fail(err)
	}
	// As kvd does after opening Badger.
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		_ = d.Close()
	}
	if err != nil {
		fail(err)
	}
	value := make([]byte, badgerValueBytes)
	for i := 0; i < badgerKeys; i += badgerBatch {
		err := db.Update(func(txn *badger.Txn) error {
			for j := i; j < i+badgerBatch; j++ {
				if err := txn.Set(badgerKey(j), value); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			fail(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(db.Tables()) < 2 {
		if time.Now().After(deadline) {
			fail(fmt.Errorf("%d tables after 30s, want 2", len(db.Tables())))
		}
		time.Sleep(10 * time.Millisecond)
	}
	fmt.Printf("ready %d tables\n", len(db.Tables()))
	time.Sleep(time.Hour)
}

// badgerCheck opens the database in dir and finds every value the writer
// wrote: they were synced (SyncWrites), so none may be lost.
func badgerCheck(dir string) (err error) {
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithValueThreshold(1 << 10))
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	return db.View(func(txn *badger.Txn) error {
		for i := range badgerKeys {
			item, err := txn.Get(badgerKey(i))
			if err != nil {
				return fmt.Errorf("key %d: %w", i, err)
			}
			if item.ValueSize() != badgerValueBytes {
				return fmt.Errorf("key %d: value of %d bytes, want %d", i, item.ValueSize(), badgerValueBytes)
			}
		}
		return nil
	})
}
