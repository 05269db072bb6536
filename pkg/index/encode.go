package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
)

// The encoded index is the key count, then every key in key order: its
// length and bytes, then either the compact form (form byte 0: modified,
// created, version) or its generations (form byte 1: their count, and per
// generation its version, created revision and revisions). Revisions are a
// varint main and an unsigned varint sub; a created revision is its main
// only.
//
// It holds what a rebuild from the same backend would make, so that
// loading it stands in for one exactly. Two things a running index holds
// a rebuild cannot know, neither of which a read can see, are left out: a
// generation's created sub revision (a KeyValue's create_revision is a main
// revision), and the created revision and version of a generation whose
// puts compaction removed, leaving its tombstone (a rebuild restores it
// created at zero, version 1, as etcd's does).
const (
	formCompact = 0
	formHist    = 1
)

// AppendEncoded appends the whole index to b. The caller must keep writers
// and the compactor away meanwhile.
func (ti *Index) AppendEncoded(b []byte) []byte {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	b = binary.AppendUvarint(b, uint64(ti.tree.Len()))
	ti.tree.Ascend(func(ki *keyIndex) bool {
		b = binary.AppendUvarint(b, uint64(ki.keyLen))
		b = append(b, ki.keyString()...)
		if ki.hist == nil {
			b = append(b, formCompact)
			b = appendRev(b, ki.modified())
			b = binary.AppendVarint(b, ki.createdMain)
			b = binary.AppendUvarint(b, uint64(ki.ver))
			return true
		}
		b = append(b, formHist)
		gens := ki.hist.generations
		b = binary.AppendUvarint(b, uint64(len(gens)))
		for gi, g := range gens {
			ver, created := g.ver, g.created.Main
			if gi < len(gens)-1 && len(g.revs) == 1 {
				ver, created = 1, 0 // only the tombstone is left
			}
			b = binary.AppendVarint(b, ver)
			b = binary.AppendVarint(b, created)
			b = binary.AppendUvarint(b, uint64(len(g.revs)))
			for _, r := range g.revs {
				b = appendRev(b, r)
			}
		}
		return true
	})
	return b
}

func appendRev(b []byte, r Revision) []byte {
	return binary.AppendUvarint(binary.AppendVarint(b, r.Main), uint64(r.Sub))
}

// errEncoded is the error of any damage to an encoded index.
var errEncoded = errors.New("index: damaged encoding")

// decoder reads an encoded index; the first damage sticks in err.
type decoder struct {
	b   []byte
	err error
}

// uvarint reads an unsigned varint in its shortest form: an index has one
// encoding, which keeps damage from passing as a longer number.
func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 || n != max(1, (bits.Len64(v)+6)/7) {
		d.fail("a number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// varint reads a zigzag varint (binary.AppendVarint's) in its shortest form.
func (d *decoder) varint() int64 {
	u := d.uvarint()
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

// count reads a length that the rest of the input must be able to hold at
// least min bytes per item of.
func (d *decoder) count(per int) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.b)/per) {
		d.fail("a count")
		return 0
	}
	return int(n)
}

func (d *decoder) rev() Revision {
	main := d.varint()
	sub := d.uvarint()
	if d.err == nil && sub > MaxSub {
		d.fail("a sub revision")
	}
	return Revision{Main: main, Sub: int64(sub)}
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil || n > len(d.b) {
		d.fail("a key")
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.fail("a form")
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: bad %s with %d bytes left", errEncoded, what, len(d.b))
	}
}

// Decode builds the index AppendEncoded wrote into b, checking every key
// index's invariants and the key order: damaged input gives an error,
// never an index that differs from the one encoded. The index copies what
// it keeps of b.
func Decode(b []byte) (*Index, error) {
	d := &decoder{b: b}
	ti := New()
	n := d.count(4) // key length, form and two revisions at least
	kis := make([]*keyIndex, 0, n)
	var prev string
	for i := 0; i < n && d.err == nil; i++ {
		key := d.bytes(d.count(1))
		if d.err != nil {
			break
		}
		if i > 0 && string(key) <= prev {
			d.fail("key order")
			break
		}
		ki := newKeyIndex(string(key))
		prev = ki.keyString()
		switch d.byte() {
		case formCompact:
			modified, created, ver := d.rev(), Revision{Main: d.varint()}, d.uvarint()
			if d.err == nil && ver > math.MaxUint32 {
				d.fail("a version")
			}
			if d.err == nil {
				ki.setModified(modified)
				ki.setCompact(created, int64(ver))
			}
		case formHist:
			h := &history{}
			gens := d.count(4)
			if gens == 0 {
				d.fail("a generation count")
			}
			if gens <= len(h.first) {
				h.generations = h.first[:gens]
			} else {
				h.generations = make([]generation, gens)
			}
			for gi := range h.generations {
				g := &h.generations[gi]
				g.ver = d.varint()
				g.created = Revision{Main: d.varint()}
				if nrevs := d.count(2); nrevs > 0 {
					g.revs = make([]Revision, nrevs)
					for ri := range g.revs {
						g.revs[ri] = d.rev()
					}
				}
			}
			ki.hist = h
			for _, g := range h.generations {
				if len(g.revs) > 0 && d.err == nil {
					ki.setModified(g.revs[len(g.revs)-1])
				}
			}
		default:
			d.fail("a form")
		}
		if d.err != nil {
			break
		}
		if err := ki.check(); err != nil {
			return nil, fmt.Errorf("%w: %v", errEncoded, err)
		}
		if ki.isEmpty() {
			d.fail("an empty key")
			break
		}
		if ki.isLive() {
			ti.live.Add(1)
		}
		kis = append(kis, ki)
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("trailing bytes")
	}
	if d.err != nil {
		return nil, d.err
	}
	// Last key first: a node that splits keeps growing on its left, so the
	// nodes split off to the right are left full, in slices of their size.
	// In ascending order every finished node would keep half of a slice
	// grown for twice its items.
	for i := len(kis) - 1; i >= 0; i-- {
		ti.tree.ReplaceOrInsert(kis[i])
	}
	return ti, nil
}
