package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
)

// Bolt's on-disk page layout (go.etcd.io/bbolt, little-endian): a 16-byte
// page header (id, flags, count, overflow), then count 16-byte elements;
// an element's key (and a leaf's value) lies pos bytes after the element.
const (
	pageHeaderSize  = 16
	elementSize     = 16
	branchPageFlag  = 0x01
	leafPageFlag    = 0x02
	bucketLeafFlag  = 0x01
	metaTxidOff     = 64
	metaChecksumOff = 72
	metaRootOff     = 32
	metaFreelistOff = 48
	maxPageWalk     = 1 << 26 // pages; a loop guard, far above any real file
)

// checkPages walks the page tree of the meta page bolt would open with,
// reading the file itself, and checks that every element's key and value
// lie inside its page, that child pages are below the high-water mark and
// are branch or leaf pages, and that keys ascend within a page. bolt trusts
// these offsets: a damaged one makes it read outside its memory map on a
// goroutine of its own (the freelist rebuild of a read-write open, Check),
// where the fault kills the process instead of returning an error.
func checkPages(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	m, err := readMeta(f)
	if err != nil {
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if m.high > uint64(fi.Size()/m.pageSize) {
		return fmt.Errorf("meta page names %d pages, the file holds %d", m.high, fi.Size()/m.pageSize)
	}
	w := &pageWalker{f: f, pageSize: m.pageSize, high: m.high, seen: map[uint64]bool{}}
	return w.visit(m.root, 0)
}

// meta is what bolt opens a file with: the valid meta page of the higher
// transaction id.
type meta struct {
	pageSize int64
	root     uint64 // the root bucket's page
	freelist uint64 // the freelist's page, or noFreelist
	high     uint64 // the high-water mark: pages in use
}

// noFreelist is the freelist page of a meta written without a freelist
// (bolt's PgidNoFreelist): the next read-write open rebuilds it.
const noFreelist = ^uint64(0)

func readMeta(f *os.File) (meta, error) {
	hdr := make([]byte, metaEnd+16)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return meta{}, fmt.Errorf("read meta page 0: %w", err)
	}
	pageSize := int64(binary.LittleEndian.Uint32(hdr[metaPageSizeOff:]))
	var cur meta
	var best uint64
	found := false
	for i := int64(0); i < 2; i++ {
		m := make([]byte, metaChecksumOff+8)
		if _, err := f.ReadAt(m, i*pageSize); err != nil {
			return meta{}, fmt.Errorf("read meta page %d: %w", i, err)
		}
		h := fnv.New64a()
		h.Write(m[pageHeaderSize:metaChecksumOff])
		if binary.LittleEndian.Uint32(m[metaMagicOff:]) != boltMagic || h.Sum64() != binary.LittleEndian.Uint64(m[metaChecksumOff:]) {
			continue
		}
		if txid := binary.LittleEndian.Uint64(m[metaTxidOff:]); !found || txid > best {
			found, best = true, txid
			cur = meta{
				pageSize: pageSize,
				root:     binary.LittleEndian.Uint64(m[metaRootOff:]),
				freelist: binary.LittleEndian.Uint64(m[metaFreelistOff:]),
				high:     binary.LittleEndian.Uint64(m[metaPgidOff:]),
			}
		}
	}
	if !found {
		return meta{}, errors.New("no valid meta page")
	}
	return cur, nil
}

type pageWalker struct {
	f        *os.File
	pageSize int64
	high     uint64 // first page id past the file's pages
	seen     map[uint64]bool
}

func (w *pageWalker) visit(id uint64, depth int) error {
	if depth > 64 || len(w.seen) > maxPageWalk {
		return errors.New("page tree too deep or too large")
	}
	if id < 2 || id >= w.high {
		return fmt.Errorf("page %d outside 2..%d", id, w.high)
	}
	if w.seen[id] {
		return fmt.Errorf("page %d reached twice", id)
	}
	w.seen[id] = true
	hdr := make([]byte, pageHeaderSize)
	if _, err := w.f.ReadAt(hdr, int64(id)*w.pageSize); err != nil {
		return fmt.Errorf("read page %d: %w", id, err)
	}
	overflow := uint64(binary.LittleEndian.Uint32(hdr[12:]))
	if id+overflow >= w.high {
		return fmt.Errorf("page %d with %d overflow pages runs past page %d", id, overflow, w.high)
	}
	p := make([]byte, int64(overflow+1)*w.pageSize)
	if _, err := w.f.ReadAt(p, int64(id)*w.pageSize); err != nil {
		return fmt.Errorf("read page %d: %w", id, err)
	}
	return w.page(id, p, depth)
}

// page checks one page (p is all of it, overflow included, or an inline
// bucket's page) and visits its children.
func (w *pageWalker) page(id uint64, p []byte, depth int) error {
	if len(p) < pageHeaderSize {
		return fmt.Errorf("page %d: %d bytes", id, len(p))
	}
	flags := binary.LittleEndian.Uint16(p[8:])
	count := int(binary.LittleEndian.Uint16(p[10:]))
	if flags != branchPageFlag && flags != leafPageFlag {
		return fmt.Errorf("page %d: flags %#x, want a branch or leaf page", id, flags)
	}
	if pageHeaderSize+count*elementSize > len(p) {
		return fmt.Errorf("page %d: %d elements do not fit", id, count)
	}
	var prev []byte
	for i := range count {
		off := pageHeaderSize + i*elementSize
		e := p[off : off+elementSize]
		var pos, ksize, vsize uint64
		if flags == branchPageFlag {
			pos, ksize = uint64(binary.LittleEndian.Uint32(e[0:])), uint64(binary.LittleEndian.Uint32(e[4:]))
		} else {
			pos, ksize, vsize = uint64(binary.LittleEndian.Uint32(e[4:])), uint64(binary.LittleEndian.Uint32(e[8:])), uint64(binary.LittleEndian.Uint32(e[12:]))
		}
		start := uint64(off) + pos
		if end := start + ksize + vsize; end > uint64(len(p)) {
			return fmt.Errorf("page %d element %d: key and value at %d..%d, past the page's %d bytes", id, i, start, end, len(p))
		}
		key := p[start : start+ksize]
		if i > 0 && bytes.Compare(prev, key) >= 0 {
			return fmt.Errorf("page %d element %d: keys out of order", id, i)
		}
		prev = key
		if flags == branchPageFlag {
			if err := w.visit(binary.LittleEndian.Uint64(e[8:]), depth+1); err != nil {
				return err
			}
			continue
		}
		if binary.LittleEndian.Uint32(e[0:])&bucketLeafFlag == 0 {
			continue
		}
		value := p[start+ksize : start+ksize+vsize]
		if len(value) < 16 {
			return fmt.Errorf("page %d element %d: bucket header of %d bytes", id, i, len(value))
		}
		if root := binary.LittleEndian.Uint64(value); root != 0 {
			if err := w.visit(root, depth+1); err != nil {
				return err
			}
		} else if err := w.page(id, value[16:], depth+1); err != nil {
			return fmt.Errorf("inline bucket in page %d: %w", id, err)
		}
	}
	return nil
}
