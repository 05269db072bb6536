package backend_test

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
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
			})
		}
	}
}
