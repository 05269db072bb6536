package index

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"unsafe"
)

// The encoded index is the key count, then every key, the greatest first
// (see DecodeFrom): its length and bytes, then either the compact form
// (form byte 0: modified, created, version) or its generations (form byte
// 1: their count, and per generation its version, created revision and
// revisions). Revisions are a varint main and an unsigned varint sub; a
// created revision is its main only.
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

// Encode writes the whole index to w, a few tens of KiB at a time (an
// index of millions of keys is hundreds of MB encoded). The caller must
// keep writers and the compactor away meanwhile.
func (ti *Index) Encode(w io.Writer) error {
	ti.mu.RLock()
	defer ti.mu.RUnlock()
	b := binary.AppendUvarint(make([]byte, 0, 64<<10), uint64(ti.tree.len()))
	var err error
	ti.tree.descend(func(id uint32) bool {
		b = appendKey(b, ref{ti.slab.at(id), ti})
		if len(b) >= 48<<10 {
			_, err = w.Write(b)
			b = b[:0]
		}
		return err == nil
	})
	if err == nil {
		_, err = w.Write(b)
	}
	return err
}

// AppendEncoded appends what Encode writes to b.
func (ti *Index) AppendEncoded(b []byte) []byte {
	buf := bytes.NewBuffer(b)
	_ = ti.Encode(buf) // a bytes.Buffer's Write does not fail
	return buf.Bytes()
}

func appendKey(b []byte, ki ref) []byte {
	b = binary.AppendUvarint(b, uint64(ki.keyLen))
	b = append(b, ki.key()...)
	h := ki.hist()
	if h == nil {
		b = append(b, formCompact)
		b = appendRev(b, ki.modified())
		b = binary.AppendVarint(b, ki.createdMain)
		return binary.AppendUvarint(b, uint64(ki.ver))
	}
	b = append(b, formHist)
	gens := h.generations
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
	return b
}

func appendRev(b []byte, r Revision) []byte {
	return binary.AppendUvarint(binary.AppendVarint(b, r.Main), uint64(r.Sub))
}

// errEncoded is the error of any damage to an encoded index.
var errEncoded = errors.New("index: damaged encoding")

// decoder reads an encoded index from r, of which at most left bytes
// remain (a bound on what a count may claim); the first damage sticks in
// err.
type decoder struct {
	r    *bufio.Reader
	left int64
	err  error
}

// uvarint reads an unsigned varint in its shortest form: an index has one
// encoding, which keeps damage from passing as a longer number.
func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	var v uint64
	for n := 0; n < binary.MaxVarintLen64; n++ {
		c, err := d.r.ReadByte()
		if err != nil {
			d.fail("number", err)
			return 0
		}
		d.left--
		if n == binary.MaxVarintLen64-1 && c > 1 {
			break // overflows 64 bits
		}
		v |= uint64(c&0x7f) << (7 * n)
		if c < 0x80 {
			if c == 0 && n > 0 {
				break // not the shortest form
			}
			return v
		}
	}
	d.fail("number", nil)
	return 0
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
// least per bytes an item of.
func (d *decoder) count(per int64) int {
	n := d.uvarint()
	if d.err == nil && n > uint64(max(d.left, 0)/per) {
		d.fail("count", nil)
		return 0
	}
	return int(n)
}

func (d *decoder) rev() Revision {
	main := d.varint()
	sub := d.uvarint()
	if d.err == nil && sub > MaxSub {
		d.fail("sub revision", nil)
	}
	return Revision{Main: main, Sub: int64(sub)}
}

// key reads n bytes into keys: the key, aliasing the arena, and its place.
func (d *decoder) key(n int, keys *keyArena) (string, keyPlace) {
	if d.err != nil {
		return "", keyPlace{}
	}
	at, b := keys.reserve(n)
	if _, err := io.ReadFull(d.r, b); err != nil {
		d.fail("key", err)
		return "", keyPlace{}
	}
	d.left -= int64(n)
	return unsafe.String(unsafe.SliceData(b), n), at
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	c, err := d.r.ReadByte()
	if err != nil {
		d.fail("form", err)
		return 0
	}
	d.left--
	return c
}

func (d *decoder) fail(what string, err error) {
	if d.err != nil {
		return
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		d.err = fmt.Errorf("%w: bad %s: %w", errEncoded, what, err)
		return
	}
	d.err = fmt.Errorf("%w: bad %s", errEncoded, what)
}

// Decode builds the index AppendEncoded wrote into b.
func Decode(b []byte) (*Index, error) {
	r := bufio.NewReader(bytes.NewReader(b))
	ti, err := DecodeFrom(r, int64(len(b)))
	if err == nil {
		if _, rerr := r.ReadByte(); rerr != io.EOF {
			err = fmt.Errorf("%w: trailing bytes", errEncoded)
		}
	}
	return ti, err
}

// decodeChunk is how many key indexes the reader hands the inserter at a
// time.
const decodeChunk = 1024

// DecodeFrom reads an index Encode wrote from r, which holds at most size
// bytes, checking every key index's invariants and the key order: damaged
// input gives an error, never an index that differs from the one encoded.
// It stops at the encoding's end.
//
// Reading runs on the caller's goroutine and inserting into the tree on
// another, as the rebuild does (mvcc.IndexBuilder); the key table is filled
// once all are read. The keys come greatest first: a node that splits then
// keeps growing on its left, and the nodes split off to its right are left
// in slices their size.
func DecodeFrom(r *bufio.Reader, size int64) (*Index, error) {
	d := &decoder{r: r, left: size}
	ti := New()
	n := d.count(4) // key length, form and two revisions at least
	ti.table.reserve(n)
	// Keys of at most arenaMaxKey fill a chunk but for less than that; a
	// longer key takes a chunk of its own. The inserter compares keys as
	// they come, so the directory must not move meanwhile.
	// The same holds for the slab's.
	ti.keys.reserveChunks(int(size/(arenaChunk-arenaMaxKey) + size/arenaMaxKey + 2))
	ti.slab.reserve(n)
	chunks := make(chan []uint32, 4)
	inserted := make(chan struct{})
	// The key table is filled at the end, all at once (keyTable.fill): 8
	// bytes a key meanwhile.
	var pending []uint64
	go func() {
		defer close(inserted)
		pending = make([]uint64, 0, n)
		for chunk := range chunks {
			for _, id := range chunk {
				ti.tree.prepend(id) // decodeKeys checks the order
				pending = append(pending, slotOf(ti.table.tagString(ti.keyOf(ti.slab.at(id))), id))
			}
		}
	}()
	err := decodeKeys(d, n, ti, chunks)
	close(chunks)
	<-inserted
	if err != nil {
		return nil, err
	}
	ti.table.fill(pending)
	return ti, nil
}

// decodeKeys reads n key indexes and sends them to chunks in order.
func decodeKeys(d *decoder, n int, ti *Index, chunks chan<- []uint32) error {
	chunk := make([]uint32, 0, decodeChunk)
	var prev string
	for i := 0; i < n && d.err == nil; i++ {
		key, at := d.key(d.count(1), &ti.keys)
		if d.err != nil {
			break
		}
		if i > 0 && key >= prev {
			d.fail("key order", nil)
			break
		}
		id, ki := ti.newKey(at)
		prev = key
		switch d.byte() {
		case formCompact:
			modified, created, ver := d.rev(), Revision{Main: d.varint()}, d.uvarint()
			if d.err == nil && ver > math.MaxUint32 {
				d.fail("version", nil)
			}
			if d.err == nil {
				ki.setModified(modified)
				ki.setCompact(created, int64(ver))
			}
		case formHist:
			h := &history{}
			gens := d.count(3) // version, created, revision count
			if gens == 0 {
				d.fail("generation count", nil)
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
				// appendKey writes an ended generation of its tombstone
				// alone as created at 0, version 1; anything else was not
				// written by it.
				if gi < gens-1 && len(g.revs) == 1 && (g.ver != 1 || g.created.Main != 0) && d.err == nil {
					d.fail("tombstone-only generation", nil)
				}
			}
			ki.setHist(h)
			for _, g := range h.generations {
				if len(g.revs) > 0 && d.err == nil {
					ki.setModified(g.revs[len(g.revs)-1])
				}
			}
		default:
			d.fail("form", nil)
		}
		if d.err != nil {
			break
		}
		if err := ki.check(); err != nil {
			return fmt.Errorf("%w: %v", errEncoded, err)
		}
		if ki.isEmpty() {
			d.fail("empty key", nil)
			break
		}
		if ki.isLive() {
			ti.live.Add(1)
		}
		chunk = append(chunk, id)
		if len(chunk) == decodeChunk {
			chunks <- chunk
			chunk = make([]uint32, 0, decodeChunk)
		}
	}
	if d.err != nil {
		return d.err
	}
	chunks <- chunk
	return nil
}
