package badger

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// fuzzSnapshot is a real snapshot of a small database, framed by Snapshot.
func fuzzSnapshot(f *testing.F) []byte {
	be, err := Open(backend.Options{Dir: f.TempDir()}, Options{MaxUpdateBytes: 4 << 20})
	if err != nil {
		f.Fatal(err)
	}
	defer be.Close()
	if err := be.Update(func(tx backend.WriteTx) error {
		for i := 0; i < 5; i++ {
			if err := tx.Put(backend.Key, []byte{byte(i)}, bytes.Repeat([]byte{byte(i)}, 20)); err != nil {
				return err
			}
		}
		return tx.Put(backend.Meta, []byte("consistent_index"), []byte{0, 0, 0, 0, 0, 0, 0, 9})
	}); err != nil {
		f.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := be.Snapshot(&b); err != nil {
		f.Fatal(err)
	}
	return b.Bytes()
}

// FuzzSnapshotFraming: the framing reader hands out a body and verifies the
// trailer, or fails, for any input; what it accepts is exactly what the
// writer produces for that body (decode(encode(x)) == x and the framing is
// canonical).
func FuzzSnapshotFraming(f *testing.F) {
	snap := fuzzSnapshot(f)
	f.Add(snap)
	f.Add(snap[:len(snap)-1])
	f.Add([]byte(snapHeader + snapTrailer + "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte(snapHeader))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		body, err := unframe(bytes.NewReader(data))
		if err != nil {
			return
		}
		if again := frame(t, body); !bytes.Equal(again, data) {
			t.Fatalf("accepted %d framed bytes, body re-frames to %d other bytes", len(data), len(again))
		}
	})
}

// FuzzRestore restores a fuzzed snapshot into a Badger backend: an error or
// a database that opens, never a panic; a refused one leaves the live data
// as it was. With frame set the fuzzed bytes are the backup stream inside a
// valid frame, so mutations reach Badger's loader.
func FuzzRestore(f *testing.F) {
	snap := fuzzSnapshot(f)
	body, err := unframe(bytes.NewReader(snap))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(snap, false)
	f.Add(body, true)
	f.Add(body[:len(body)/2], true)
	f.Add([]byte{}, true)
	opts := Options{MaxUpdateBytes: 4 << 20}
	f.Fuzz(func(t *testing.T, data []byte, framed bool) {
		if len(data) > 1<<20 {
			return
		}
		if framed {
			data = frame(t, data)
		}
		dir := t.TempDir()
		be, err := Open(backend.Options{Dir: dir}, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := be.Update(func(tx backend.WriteTx) error { return tx.Put(backend.Key, []byte("live"), []byte("1")) }); err != nil {
			t.Fatal(err)
		}
		if err := be.Close(); err != nil {
			t.Fatal(err)
		}
		rerr := Restore(backend.Options{Dir: dir}, opts, bytes.NewReader(data))
		be, err = Open(backend.Options{Dir: dir}, opts)
		if err != nil {
			t.Fatalf("database does not open after restore (restore error %v): %v", rerr, err)
		}
		defer be.Close()
		tx, err := be.ReadTx()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Release()
		v, ok, err := tx.Get(backend.Key, []byte("live"))
		if rerr != nil && (err != nil || !ok || string(v) != "1") {
			t.Fatalf("refused restore (%v) changed the live database: %q %v %v", rerr, v, ok, err)
		}
		for _, b := range backend.AllBuckets {
			if err := tx.Range(b, nil, nil, 0, func(_, _ []byte) bool { return true }); err != nil {
				t.Fatalf("range %s after restore (error %v): %v", b, rerr, err)
			}
		}
	})
}

// FuzzReadCurrent: whatever CURRENT holds, readCurrent returns one safe
// path element below the backend directory or an error, and what
// writeCurrent writes reads back the same.
func FuzzReadCurrent(f *testing.F) {
	f.Add([]byte("data\n"))
	f.Add([]byte("data-0123456789abcdef\n"))
	f.Add([]byte("../etc\n"))
	f.Add([]byte(" .. \n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, content []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, currentFile), content, 0o600); err != nil {
			t.Fatal(err)
		}
		name, err := readCurrent(dir)
		if err != nil {
			return
		}
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || filepath.Base(name) != name {
			t.Fatalf("CURRENT %q names %q, not one path element", content, name)
		}
		if strings.ContainsRune(name, 0) {
			return // the OS refuses it when Open uses it
		}
		if err := writeCurrent(dir, name); err != nil {
			t.Fatalf("writeCurrent(%q): %v", name, err)
		}
		if again, err := readCurrent(dir); err != nil || again != name {
			t.Fatalf("writeCurrent(%q) reads back %q, %v", name, again, err)
		}
	})
}
