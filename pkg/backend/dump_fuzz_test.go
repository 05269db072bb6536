package backend_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/bolt"
)

// fixDumpChecksum rewrites the trailing sha256 of a dump so that it covers
// the bytes before it, letting the fuzzer's mutations reach the record
// decoding past the checksum check.
func fixDumpChecksum(d []byte) []byte {
	if len(d) < sha256.Size {
		return d
	}
	body := d[:len(d)-sha256.Size]
	sum := sha256.Sum256(body)
	return append(body, sum[:]...)
}

func openFuzzBolt(t testing.TB) backend.Backend {
	be, err := bolt.Open(backend.Options{Dir: t.TempDir()}, bolt.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}

func dumpBytes(t testing.TB, be backend.Backend) []byte {
	var b bytes.Buffer
	if _, err := backend.Dump(be, &b); err != nil {
		t.Fatalf("dump: %v", err)
	}
	return b.Bytes()
}

// FuzzLoad loads fuzzed dumps (as a peer sends them in a raft snapshot) into
// a real backend. Load must return an error or nil, never panic. On error
// Meta (the consistent index) must not have been written. On success the
// backend dumps to a stream that loads into another backend with the same
// contents and dumps to the same bytes (dump(load(x)) is a fixed point).
func FuzzLoad(f *testing.F) {
	src := openFuzzBolt(f)
	err := src.Update(func(tx backend.WriteTx) error {
		for _, kv := range [][3]string{
			{string(backend.Key), "\x00\x00\x00\x00\x00\x00\x00\x02_\x00\x00\x00\x00\x00\x00\x00\x00", "kv-proto"},
			{string(backend.Key), "\x00\x00\x00\x00\x00\x00\x00\x03_\x00\x00\x00\x00\x00\x00\x00\x00", "kv-proto-2"},
			{string(backend.Lease), "\x00\x00\x00\x00\x00\x00\x00\x07", "lease"},
			{string(backend.Auth), "enabled", "\x01"},
			{string(backend.Members), "m/0000000000000001", `{"id":1,"peerURLs":["http://a:2380"]}`},
			{string(backend.Meta), "consistent_index", "\x00\x00\x00\x00\x00\x00\x00\x09"},
		} {
			if err := tx.Put(backend.Bucket(kv[0]), []byte(kv[1]), []byte(kv[2])); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		f.Fatal(err)
	}
	seed := dumpBytes(f, src)
	f.Add(seed, false)
	f.Add(seed, true)
	f.Add(seed[:len(seed)-7], false)
	f.Add(dumpBytes(f, openFuzzBolt(f)), false)
	f.Add([]byte("KVDDUMP1\x04meta\x01k\x01v\x03key\x01a\x01b\x00"), true)
	f.Add([]byte("KVDDUMP1\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), false)
	f.Fuzz(func(t *testing.T, data []byte, fix bool) {
		if fix {
			data = fixDumpChecksum(bytes.Clone(data))
		}
		be := openFuzzBolt(t)
		// A small batch size makes Load commit along the way, as it does
		// with real snapshots.
		err := backend.Load(be, bytes.NewReader(data), 64)
		if err != nil {
			if !errors.Is(err, backend.ErrBadDump) {
				t.Fatalf("Load error does not wrap ErrBadDump: %v", err)
			}
			tx, terr := be.ReadTx()
			if terr != nil {
				t.Fatal(terr)
			}
			defer tx.Release()
			if rerr := tx.Range(backend.Meta, nil, nil, 0, func(k, _ []byte) bool {
				t.Fatalf("failed Load (%v) committed Meta key %q", err, k)
				return false
			}); rerr != nil {
				t.Fatal(rerr)
			}
			return
		}
		d1 := dumpBytes(t, be)
		be2 := openFuzzBolt(t)
		if err := backend.Load(be2, bytes.NewReader(d1), 1<<20); err != nil {
			t.Fatalf("dump of a loaded backend does not load: %v", err)
		}
		if d2 := dumpBytes(t, be2); !bytes.Equal(d1, d2) {
			t.Fatalf("dump(load(dump)) differs from dump: %d vs %d bytes", len(d2), len(d1))
		}
	})
}
