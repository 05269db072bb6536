package backendtest_test

import (
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/badger"
	"github.com/kvd-dev/kvd/pkg/backend/bolt"
)

// model is the reference: bucket -> key -> value.
type model map[backend.Bucket]map[string]string

func (m model) clone() model {
	c := model{}
	for b, kvs := range m {
		c[b] = map[string]string{}
		for k, v := range kvs {
			c[b][k] = v
		}
	}
	return c
}

func (m model) rangeOf(b backend.Bucket, start, end []byte, limit int) []string {
	var keys []string
	for k := range m[b] {
		if k >= string(start) && (end == nil || k < string(end)) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if limit > 0 && len(keys) > limit {
		keys = keys[:limit]
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%q=%q", k, m[b][k]))
	}
	return out
}

type engine struct {
	name string
	dir  string
	open func(dir string) (backend.Backend, error)
	be   backend.Backend
}

func rangeOf(t *testing.T, rtx backend.ReadTx, b backend.Bucket, start, end []byte, limit int) []string {
	t.Helper()
	out := []string{}
	err := rtx.Range(b, start, end, limit, func(k, v []byte) bool {
		out = append(out, fmt.Sprintf("%q=%q", k, v))
		return true
	})
	if err != nil {
		t.Fatalf("Range: %v", err)
	}
	return out
}

// TestEnginesAgree applies the same random operations to bolt, Badger and a
// map, and checks that every read answers the same on all three.
func TestEnginesAgree(t *testing.T) {
	engines := []*engine{
		{name: "bolt", dir: t.TempDir(), open: func(dir string) (backend.Backend, error) {
			return bolt.Open(backend.Options{Dir: dir}, bolt.Options{NoSync: true})
		}},
		{name: "badger", dir: t.TempDir(), open: func(dir string) (backend.Backend, error) {
			return badger.Open(backend.Options{Dir: dir}, badger.Options{MaxUpdateBytes: 4 << 20})
		}},
	}
	for _, e := range engines {
		be, err := e.open(e.dir)
		if err != nil {
			t.Fatalf("open %s: %v", e.name, err)
		}
		e.be = be
	}
	t.Cleanup(func() {
		for _, e := range engines {
			_ = e.be.Close()
		}
	})

	rng := rand.New(rand.NewSource(7))
	buckets := []backend.Bucket{"key", "keyx", "ke", "k", "meta"}
	randKey := func() []byte {
		k := make([]byte, 1+rng.Intn(3))
		for i := range k {
			k[i] = []byte{0x00, 0x01, 'a', 'b', 0xff}[rng.Intn(5)]
		}
		return k
	}
	randBound := func() []byte {
		if rng.Intn(4) == 0 {
			return nil
		}
		return randKey()
	}
	type op struct {
		put  bool
		b    backend.Bucket
		k, v []byte
	}
	errAbort := errors.New("abort")
	m := model{}
	// A view held across updates, per engine, with the model as of its start.
	var held []backend.ReadTx
	var heldModel model

	for step := 0; step < 400; step++ {
		switch r := rng.Intn(100); {
		case r < 60: // an update of a few writes, sometimes rolled back
			var ops []op
			for i := rng.Intn(10); i >= 0; i-- {
				ops = append(ops, op{put: rng.Intn(3) > 0, b: buckets[rng.Intn(len(buckets))], k: randKey(), v: []byte(fmt.Sprint(step, i))})
			}
			abort := rng.Intn(8) == 0
			for _, e := range engines {
				err := e.be.Update(func(tx backend.WriteTx) error {
					for _, o := range ops {
						var err error
						if o.put {
							err = tx.Put(o.b, o.k, o.v)
						} else {
							err = tx.Delete(o.b, o.k)
						}
						if err != nil {
							return err
						}
					}
					if abort {
						return errAbort
					}
					return nil
				})
				if abort != errors.Is(err, errAbort) || (!abort && err != nil) {
					t.Fatalf("step %d: %s Update = %v (abort %v)", step, e.name, err, abort)
				}
			}
			if !abort {
				for _, o := range ops {
					if m[o.b] == nil {
						m[o.b] = map[string]string{}
					}
					if o.put {
						m[o.b][string(o.k)] = string(o.v)
					} else {
						delete(m[o.b], string(o.k))
					}
				}
			}
		case r < 90: // reads on fresh views, and on the held ones
			b := buckets[rng.Intn(len(buckets))]
			start, end, limit := randBound(), randBound(), rng.Intn(5)
			want := fmt.Sprint(m.rangeOf(b, start, end, limit))
			for i, e := range engines {
				rtx, err := e.be.ReadTx()
				if err != nil {
					t.Fatalf("%s ReadTx: %v", e.name, err)
				}
				got := fmt.Sprint(rangeOf(t, rtx, b, start, end, limit))
				k := randKey()
				v, ok, err := rtx.Get(b, k)
				rtx.Release()
				if got != want {
					t.Fatalf("step %d: %s Range %s [%q, %q) limit %d\n got %s\nwant %s", step, e.name, b, start, end, limit, got, want)
				}
				mv, mok := m[b][string(k)]
				if err != nil || ok != mok || string(v) != mv {
					t.Fatalf("step %d: %s Get %s/%q = %q, %v, %v; want %q, %v", step, e.name, b, k, v, ok, err, mv, mok)
				}
				if held != nil {
					hwant := fmt.Sprint(heldModel.rangeOf(b, start, end, limit))
					if hgot := fmt.Sprint(rangeOf(t, held[i], b, start, end, limit)); hgot != hwant {
						t.Fatalf("step %d: %s held view Range %s\n got %s\nwant %s", step, e.name, b, hgot, hwant)
					}
				}
			}
		case r < 95: // take or drop the held views
			if held != nil {
				for _, rtx := range held {
					rtx.Release()
				}
				held = nil
				continue
			}
			for _, e := range engines {
				rtx, err := e.be.ReadTx()
				if err != nil {
					t.Fatalf("%s ReadTx: %v", e.name, err)
				}
				held = append(held, rtx)
			}
			heldModel = m.clone()
		case r < 98:
			for _, e := range engines {
				if err := e.be.Defrag(); err != nil {
					t.Fatalf("step %d: %s Defrag: %v", step, e.name, err)
				}
			}
		default: // reopen (after dropping the held views: Close waits for them)
			for _, rtx := range held {
				rtx.Release()
			}
			held = nil
			for _, e := range engines {
				if err := e.be.Close(); err != nil {
					t.Fatalf("%s Close: %v", e.name, err)
				}
				be, err := e.open(e.dir)
				if err != nil {
					t.Fatalf("%s reopen: %v", e.name, err)
				}
				e.be = be
			}
		}
	}
	for _, rtx := range held {
		rtx.Release()
	}
}
