package snapship

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/iotest"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
)

// fill writes n revisions into the Key bucket of be, as the store lays
// them out (revision -> KeyValue), valued tag, and the consistent index into
// Meta.
func fill(t *testing.T, be backend.Backend, n int, tag string) {
	t.Helper()
	err := be.Update(func(tx backend.WriteTx) error {
		for i := range n {
			rev := int64(i + 2)
			k := append(binary.BigEndian.AppendUint64(nil, uint64(rev)), '_')
			k = binary.BigEndian.AppendUint64(k, 0)
			v, err := proto.Marshal(&mvccpb.KeyValue{Key: fmt.Appendf(nil, "k%05d", i), Value: []byte(tag),
				CreateRevision: rev, ModRevision: rev, Version: 1})
			if err != nil {
				return err
			}
			if err := tx.Put(backend.Key, k, v); err != nil {
				return err
			}
		}
		return tx.Put(backend.Meta, []byte("consistent_index"), []byte(tag))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// records reads back what fill wrote: the Key bucket's count and the value
// every record carries ("" when they differ or none).
func records(t *testing.T, be backend.Backend) (int, string) {
	t.Helper()
	tx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Release()
	n, tag := 0, ""
	var kv mvccpb.KeyValue
	err = tx.Range(backend.Key, nil, nil, 0, func(_, v []byte) bool {
		if err := proto.Unmarshal(v, &kv); err != nil {
			t.Errorf("record %d: %v", n, err)
			return false
		}
		if n == 0 {
			tag = string(kv.Value)
		} else if tag != string(kv.Value) {
			tag = ""
		}
		n++
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	return n, tag
}

// wantRecords opens the backend in dir and checks it holds n records of
// tag.
func wantRecords(t *testing.T, engine, dir string, n int, tag string) {
	t.Helper()
	be, err := enginetest.Open(engine, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if gotN, gotTag := records(t, be); gotN != n || gotTag != tag {
		t.Fatalf("%s holds %d records of %q, want %d of %q", filepath.Base(dir), gotN, gotTag, n, tag)
	}
}

func dumpOf(t *testing.T, engine string, n int, tag string) []byte {
	t.Helper()
	src := enginetest.OpenT(t, engine)
	fill(t, src, n, tag)
	var buf bytes.Buffer
	if _, err := backend.Dump(src, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func snapMsg(index uint64) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: proto.Uint64(1), To: proto.Uint64(2),
		Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(index), Term: proto.Uint64(2)}}}
}

func newStager(t *testing.T, engine string) (*Stager, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "snap-incoming")
	s, err := NewStager(dir, func(d string) (backend.Backend, error) { return enginetest.Open(engine, d) }, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	return s, dir
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestStagerReceive: a dump streamed in becomes a complete backend beside
// the live one; a broken dump or stream leaves nothing; Take drops
// snapshots raft passed over.
func TestStagerReceive(t *testing.T) {
	for _, engine := range enginetest.Names {
		t.Run(engine, func(t *testing.T) {
			dump := dumpOf(t, engine, 2000, "new")
			s, dir := newStager(t, engine)

			bad := bytes.Clone(dump)
			bad[len(bad)/2] ^= 1
			for name, r := range map[string]io.Reader{
				"damaged dump": bytes.NewReader(bad),
				"cut dump":     bytes.NewReader(dump[:len(dump)/2]),
				"stream fails at its end (the transport's checksum)": io.MultiReader(bytes.NewReader(dump),
					iotest.ErrReader(errors.New("sha256 mismatch"))),
				"stream breaks": io.MultiReader(bytes.NewReader(dump[:1000]), iotest.ErrReader(errors.New("connection reset"))),
			} {
				if err := s.Receive(snapMsg(9), r); err == nil {
					t.Fatalf("%s: accepted", name)
				}
				if got := entries(t, dir); len(got) != 0 {
					t.Fatalf("%s: left %v", name, got)
				}
			}
			if _, ok := s.Take(9); ok {
				t.Fatal("a failed snapshot was staged")
			}

			if err := s.Receive(snapMsg(5), bytes.NewReader(dump)); err != nil {
				t.Fatal(err)
			}
			// Read in small pieces, as frames arrive.
			if err := s.Receive(snapMsg(7), iotest.HalfReader(bytes.NewReader(dump))); err != nil {
				t.Fatal(err)
			}
			if got := entries(t, dir); len(got) != 2 {
				t.Fatalf("staged %v, want two backends", got)
			}
			staged, ok := s.Take(7)
			if !ok {
				t.Fatal("snapshot 7 not staged")
			}
			if got := entries(t, dir); len(got) != 1 || filepath.Join(dir, got[0]) != staged.Dir {
				t.Fatalf("after Take(7): %v, want only %s", got, staged.Dir)
			}
			wantRecords(t, engine, staged.Dir, 2000, "new")
			// The key index came with it, built from the records on the way.
			if n := staged.Index.Keys(); n != 2000 {
				t.Fatalf("staged index holds %d keys, want 2000", n)
			}
		})
	}
}

// installer returns an Installer for the live backend directory dir whose
// removals fail part way (as a crash leaves them) for paths interrupt
// selects.
func installer(engine, dir string, interrupt func(string) bool) *Installer {
	return &Installer{
		Dir:    dir,
		Open:   func(d string) (backend.Backend, error) { return enginetest.Open(engine, d) },
		Logger: zap.NewNop(),
		removeAll: func(p string) error {
			if _, err := os.Stat(p); err != nil || !interrupt(p) {
				return os.RemoveAll(p)
			}
			_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					_ = os.Remove(q)
				}
				return nil
			})
			return errors.New("injected: interrupted while removing")
		},
	}
}

// stage makes a live backend in dir holding "old" records and a staged one
// holding "new" ones, and returns the open live one and the staged dir.
func stage(t *testing.T, engine, dir string) (backend.Backend, string) {
	t.Helper()
	live, err := enginetest.Open(engine, dir)
	if err != nil {
		t.Fatal(err)
	}
	fill(t, live, 10, "old")
	s, _ := newStager(t, engine)
	if err := s.Receive(snapMsg(3), bytes.NewReader(dumpOf(t, engine, 20, "new"))); err != nil {
		t.Fatal(err)
	}
	staged, _ := s.Take(3)
	return live, staged.Dir
}

func TestReplace(t *testing.T) {
	for _, engine := range enginetest.Names {
		t.Run(engine, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), engine)
			live, staged := stage(t, engine, dir)
			nb, err := installer(engine, dir, func(string) bool { return false }).replace(live, staged)
			if err != nil {
				t.Fatal(err)
			}
			if n, tag := records(t, nb); n != 20 || tag != "new" {
				t.Fatalf("after replace: %d records of %q", n, tag)
			}
			nb.Close()
			for _, p := range []string{staged, dir + replacedSuffix, dir + discardedSuffix} {
				if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s is still there: %v", p, err)
				}
			}
		})
	}
}

// A crash (here: a removal that fails half way, as a crash would leave it)
// while the replaced backend is deleted must not bring that half-deleted
// backend back at the next start: RecoverDir keeps the installed one.
func TestReplaceInterruptedRemovalKeepsNewBackend(t *testing.T) {
	for _, engine := range enginetest.Names {
		t.Run(engine, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), engine)
			live, staged := stage(t, engine, dir)
			inst := installer(engine, dir, func(p string) bool { return strings.HasSuffix(p, discardedSuffix) })
			nb, err := inst.replace(live, staged)
			if err != nil {
				t.Fatal(err)
			}
			nb.Close()
			if _, err := os.Stat(dir + discardedSuffix); err != nil {
				t.Fatalf("the interrupted removal left nothing: %v", err)
			}
			if err := RecoverDir(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(dir + discardedSuffix); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the replaced backend is still there after recovery: %v", err)
			}
			wantRecords(t, engine, dir, 20, "new")
		})
	}
}

// A new backend that cannot be opened in place leaves the old one live.
func TestReplaceFailureKeepsOldBackend(t *testing.T) {
	for _, engine := range enginetest.Names {
		t.Run(engine, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), engine)
			live, staged := stage(t, engine, dir)
			inst := installer(engine, dir, func(string) bool { return false })
			inst.Open = func(string) (backend.Backend, error) { return nil, errors.New("injected: open failed") }
			if _, err := inst.replace(live, staged); err == nil {
				t.Fatal("replace succeeded without a backend")
			}
			if _, err := os.Stat(dir + replacedSuffix); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the old backend is still aside: %v", err)
			}
			wantRecords(t, engine, dir, 10, "old")
		})
	}
}
