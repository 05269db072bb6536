package backend_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/badger"
	"github.com/kvd-dev/kvd/pkg/backend/bolt"
	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
)

func contents(t *testing.T, be backend.Backend) map[string]string {
	t.Helper()
	tx, err := be.ReadTx()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Release()
	out := map[string]string{}
	for _, b := range backend.AllBuckets {
		if err := tx.Range(b, nil, nil, 0, func(k, v []byte) bool {
			out[string(b)+"/"+string(k)] = string(v)
			return true
		}); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// A dump of one engine loads into the other (members on different engines
// catch each other up), and a damaged dump is refused before Meta commits.
func TestDumpLoadAcrossEngines(t *testing.T) {
	for _, from := range enginetest.Names {
		for _, to := range enginetest.Names {
			t.Run(from+"-to-"+to, func(t *testing.T) {
				src := enginetest.OpenT(t, from)
				err := src.Update(func(tx backend.WriteTx) error {
					for i := 0; i < 3000; i++ {
						if err := tx.Put(backend.Key, []byte(fmt.Sprintf("k%05d", i)), bytes.Repeat([]byte{byte(i)}, 100)); err != nil {
							return err
						}
					}
					if err := tx.Put(backend.Members, []byte("m/1"), []byte("{}")); err != nil {
						return err
					}
					return tx.Put(backend.Meta, []byte("consistent_index"), []byte{0, 0, 0, 0, 0, 0, 0, 9})
				})
				if err != nil {
					t.Fatal(err)
				}
				var dump bytes.Buffer
				n, err := backend.Dump(src, &dump)
				if err != nil || n != int64(dump.Len()) {
					t.Fatalf("dump: %d bytes, %v (buffer %d)", n, err, dump.Len())
				}
				dst := enginetest.OpenT(t, to)
				if err := backend.Load(dst, bytes.NewReader(dump.Bytes()), 64<<10); err != nil {
					t.Fatalf("load: %v", err)
				}
				want, got := contents(t, src), contents(t, dst)
				if len(got) != len(want) || len(got) != 3002 {
					t.Fatalf("loaded %d entries, want %d", len(got), len(want))
				}
				for k, v := range want {
					if got[k] != v {
						t.Fatalf("entry %s differs", k)
					}
				}

				bad := bytes.Clone(dump.Bytes())
				bad[len(bad)/2] ^= 1
				dst2 := enginetest.OpenT(t, to)
				err = backend.Load(dst2, bytes.NewReader(bad), 64<<10)
				if !errors.Is(err, backend.ErrBadDump) {
					t.Fatalf("damaged dump: %v", err)
				}
				if _, ok := contents(t, dst2)["meta/consistent_index"]; ok {
					t.Fatal("damaged dump committed Meta")
				}
				dst3 := enginetest.OpenT(t, to)
				if err := backend.Load(dst3, bytes.NewReader(dump.Bytes()[:dump.Len()-10]), 64<<10); !errors.Is(err, backend.ErrBadDump) {
					t.Fatalf("cut dump: %v", err)
				}
				// Bytes after the dump, or a stream that fails at its end
				// (as the peer transport's does on a checksum mismatch):
				// refused, and Meta is not committed.
				for name, r := range map[string]io.Reader{
					"trailing bytes": io.MultiReader(bytes.NewReader(dump.Bytes()), strings.NewReader("x")),
					"failing end":    io.MultiReader(bytes.NewReader(dump.Bytes()), iotest.ErrReader(errors.New("stream checksum mismatch"))),
				} {
					dst4 := enginetest.OpenT(t, to)
					if err := backend.Load(dst4, r, 64<<10); err == nil {
						t.Fatalf("%s: loaded", name)
					}
					if _, ok := contents(t, dst4)["meta/consistent_index"]; ok {
						t.Fatalf("%s: Meta committed", name)
					}
				}
			})
		}
	}
}

// dumpOfSize returns a dump of n 1 KiB records keyed as the Key bucket's
// revisions are, the shape a follower catching up loads.
func dumpOfSize(b *testing.B, n int) []byte {
	b.Helper()
	src := enginetest.OpenT(b, "bolt")
	val := bytes.Repeat([]byte{'v'}, 1024)
	for i := 0; i < n; i += 10000 {
		err := src.Update(func(tx backend.WriteTx) error {
			for j := i; j < min(i+10000, n); j++ {
				k := binary.BigEndian.AppendUint64(nil, uint64(j+1))
				k = append(k, '_', 0, 0, 0, 0, 0, 0, 0, 0)
				if err := tx.Put(backend.Key, k, val); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := backend.Dump(src, &buf); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes()
}

// BenchmarkLoad loads 100,000 records of 1 KiB (a 100 MiB dump) into a
// fresh backend and syncs it: the follower's side of a snapshot catch-up.
// The engines are opened as a member opens them, with fsync.
func BenchmarkLoad(b *testing.B) {
	dump := dumpOfSize(b, 100000)
	open := map[string]func(dir string) (backend.Backend, error){
		"bolt": func(dir string) (backend.Backend, error) {
			return bolt.Open(backend.Options{Dir: dir, Sync: true}, bolt.Options{})
		},
		"badger": func(dir string) (backend.Backend, error) {
			return badger.Open(backend.Options{Dir: dir, Sync: true}, badger.Options{MaxUpdateBytes: 24 << 20})
		},
	}
	for _, e := range enginetest.Names {
		b.Run(e, func(b *testing.B) {
			b.SetBytes(int64(len(dump)))
			b.ReportAllocs()
			for range b.N {
				b.StopTimer()
				be, err := open[e](b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				err = backend.Load(be, bytes.NewReader(dump), 4<<20)
				if err == nil {
					err = be.Sync()
				}
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				be.Close()
				b.StartTimer()
			}
		})
	}
}

// BenchmarkDump dumps 100,000 records of 1 KiB: the leader's side.
func BenchmarkDump(b *testing.B) {
	dump := dumpOfSize(b, 100000)
	for _, e := range enginetest.Names {
		b.Run(e, func(b *testing.B) {
			be := enginetest.OpenT(b, e)
			if err := backend.Load(be, bytes.NewReader(dump), 4<<20); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(dump)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := backend.Dump(be, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// unsortedTx is a ReadTx whose Key bucket yields its keys out of order, as
// no engine does: a dump made from it is well-formed but unsorted.
type unsortedTx struct{}

func (unsortedTx) Get(backend.Bucket, []byte) ([]byte, bool, error) { return nil, false, nil }
func (unsortedTx) Release()                                         {}
func (unsortedTx) Range(b backend.Bucket, _, _ []byte, _ int, fn func(k, v []byte) bool) error {
	if b == backend.Key {
		for _, k := range []string{"b", "a", "c"} {
			if !fn([]byte(k), []byte("v")) {
				break
			}
		}
	}
	return nil
}

// An engine that loads a dump in its sorted fast path refuses records out
// of order; one without it loads them.
func TestLoadUnsortedDump(t *testing.T) {
	var dump bytes.Buffer
	if _, err := backend.DumpTx(unsortedTx{}, &dump); err != nil {
		t.Fatal(err)
	}
	for _, e := range enginetest.Names {
		t.Run(e, func(t *testing.T) {
			be := enginetest.OpenT(t, e)
			err := backend.Load(be, bytes.NewReader(dump.Bytes()), 1<<20)
			if _, sorted := be.(backend.SortedBulkLoader); sorted {
				if !errors.Is(err, backend.ErrUnsorted) {
					t.Fatalf("an unsorted dump through the sorted path: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if got := contents(t, be); len(got) != 3 {
				t.Fatalf("loaded %v", got)
			}
		})
	}
}
