package bolt

import (
	"bytes"
	"encoding/binary"
	"hash/fnv"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// fixBoltMeta rewrites the checksums of both meta pages, so the fuzzer's
// mutations of meta fields (root, freelist, high-water page, txid) reach the
// page checks behind them instead of stopping at a checksum mismatch.
func fixBoltMeta(data []byte) {
	if len(data) < metaEnd+16 {
		return
	}
	pageSize := int(binary.LittleEndian.Uint32(data[metaPageSizeOff:]))
	for _, off := range []int{0, pageSize} {
		if off < 0 || off+metaChecksumOff+8 > len(data) || (off != 0 && off < metaChecksumOff+8) {
			continue
		}
		h := fnv.New64a()
		h.Write(data[off+metaMagicOff : off+metaChecksumOff])
		binary.LittleEndian.PutUint64(data[off+metaChecksumOff:], h.Sum64())
	}
}

// FuzzRestore restores fuzzed bytes as a bolt snapshot (what a member on
// bolt installs from a peer, and what `kvd restore` reads). A stream that is
// not a sound bolt file must give an error, never a panic or a crash of the
// process (bolt maps the file: a page past its end is a SIGBUS), and must
// leave the existing database as it was. What Restore accepts opens.
func FuzzRestore(f *testing.F) {
	dir := f.TempDir()
	be, err := Open(backend.Options{Dir: dir}, Options{NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	if err := be.Update(func(tx backend.WriteTx) error {
		for i := 0; i < 20; i++ {
			if err := tx.Put(backend.Key, []byte{byte(i)}, bytes.Repeat([]byte{byte(i)}, 50)); err != nil {
				return err
			}
		}
		return tx.Put(backend.Meta, []byte("consistent_index"), []byte{0, 0, 0, 0, 0, 0, 0, 9})
	}); err != nil {
		f.Fatal(err)
	}
	var snap bytes.Buffer
	if _, err := be.Snapshot(&snap); err != nil {
		f.Fatal(err)
	}
	be.Close()
	good := snap.Bytes()
	f.Add(good, false)
	f.Add(good, true)
	f.Add(good[:len(good)/2], false)
	f.Add(good[:4096*2], true)
	f.Add([]byte{}, false)

	live := f.TempDir()
	lbe, err := Open(backend.Options{Dir: live}, Options{NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	if err := lbe.Update(func(tx backend.WriteTx) error { return tx.Put(backend.Key, []byte("live"), []byte("1")) }); err != nil {
		f.Fatal(err)
	}
	lbe.Close()
	liveFile, err := os.ReadFile(filepath.Join(live, FileName))
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		if len(data) > 4<<20 {
			return
		}
		if fix {
			data = bytes.Clone(data)
			fixBoltMeta(data)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, FileName), liveFile, 0o600); err != nil {
			t.Fatal(err)
		}
		rerr := Restore(backend.Options{Dir: dir}, Options{NoSync: true}, bytes.NewReader(data))
		be, err := Open(backend.Options{Dir: dir}, Options{NoSync: true})
		if err != nil {
			t.Fatalf("database does not open after restore (restore error %v): %v", rerr, err)
		}
		defer be.Close()
		tx, err := be.ReadTx()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Release()
		if rerr != nil {
			// A refused restore leaves the live database as it was.
			if v, ok, _ := tx.Get(backend.Key, []byte("live")); !ok || string(v) != "1" {
				t.Fatalf("refused restore (%v) changed the live database", rerr)
			}
			return
		}
		// What Restore accepts reads.
		for _, b := range backend.AllBuckets {
			if err := tx.Range(b, nil, nil, 0, func(_, _ []byte) bool { return true }); err != nil {
				t.Fatalf("range %s of restored database: %v", b, err)
			}
		}
	})
}
