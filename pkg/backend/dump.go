package backend

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
)

// A dump is an engine-neutral copy of a backend: what one member sends
// another as a raft snapshot, so members on different engines can catch each
// other up. Layout: the magic, then records (uvarint length + bytes, three
// times: bucket, key, value) in bucket order with Meta last, then a record
// with an empty bucket name followed by the sha256 of everything before it.
var dumpMagic = []byte("KVDDUMP1")

// dumpOrder puts Meta (the consistent index) last, so a Load cut short never
// leaves a consistent index without the data it covers.
func dumpOrder() []Bucket {
	var out []Bucket
	for _, b := range AllBuckets {
		if b != Meta {
			out = append(out, b)
		}
	}
	return append(out, Meta)
}

// Dump writes a consistent copy of be (one read view) to w and returns the
// bytes written.
func Dump(be Backend, w io.Writer) (int64, error) {
	tx, err := be.ReadTx()
	if err != nil {
		return 0, fmt.Errorf("dump: read tx: %w", err)
	}
	defer tx.Release()
	return DumpTx(tx, w)
}

// DumpTx writes what the read view tx sees to w, as Dump does. The caller
// releases tx.
func DumpTx(tx ReadTx, w io.Writer) (int64, error) {
	cw := &countWriter{w: bufio.NewWriterSize(w, 1<<20), h: sha256.New()}
	cw.write(dumpMagic)
	for _, b := range dumpOrder() {
		err := tx.Range(b, nil, nil, 0, func(k, v []byte) bool {
			cw.record([]byte(b))
			cw.record(k)
			cw.record(v)
			return cw.err == nil
		})
		if err != nil {
			return cw.n, fmt.Errorf("dump: range %s: %w", b, err)
		}
		if cw.err != nil {
			return cw.n, fmt.Errorf("dump: write: %w", cw.err)
		}
	}
	cw.record(nil)
	sum := cw.h.Sum(nil)
	cw.write(sum)
	if cw.err == nil {
		cw.err = cw.w.(*bufio.Writer).Flush()
	}
	if cw.err != nil {
		return cw.n, fmt.Errorf("dump: write: %w", cw.err)
	}
	return cw.n, nil
}

type countWriter struct {
	w   io.Writer
	h   hash.Hash
	n   int64
	err error
	buf [binary.MaxVarintLen64]byte
}

func (c *countWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.h.Write(p[:n])
	c.err = err
}

func (c *countWriter) record(p []byte) {
	n := binary.PutUvarint(c.buf[:], uint64(len(p)))
	c.write(c.buf[:n])
	c.write(p)
}

// ErrBadDump is wrapped by Load's errors about the stream itself.
var ErrBadDump = errors.New("backend: bad dump")

// Load writes the records of a dump into be, which should be empty: with
// the engine's BulkLoad if it has one, else in updates of about batchBytes.
// Meta goes last, written only after the stream's checksum is verified and
// r is read to its end (bytes after the dump are an error): a damaged or cut
// stream leaves at most data without a consistent index.
func Load(be Backend, r io.Reader, batchBytes int) error {
	return LoadEach(be, r, batchBytes, nil)
}

// LoadEach is Load that also hands each record to each, if set, just before
// the engine gets it: a caller can derive something from the records on the
// way (a snapshot install builds the key index) instead of scanning the
// loaded backend. each does not keep the slices; its error fails the load.
func LoadEach(be Backend, r io.Reader, batchBytes int, each func(b Bucket, k, v []byte) error) error {
	hr := &hashReader{r: bufio.NewReaderSize(r, 1<<20), h: sha256.New(), each: each}
	magic := make([]byte, len(dumpMagic))
	if _, err := io.ReadFull(hr, magic); err != nil || !bytes.Equal(magic, dumpMagic) {
		return fmt.Errorf("load dump: %w: no dump header", ErrBadDump)
	}
	// A dump holds each bucket in key order.
	if sl, ok := be.(SortedBulkLoader); ok {
		if err := sl.SortedBulkLoad(func(put func(b Bucket, k, v []byte) error) error { return hr.records(put) }); err != nil {
			return fmt.Errorf("load dump: %w", err)
		}
		return nil
	}
	if bl, ok := be.(BulkLoader); ok {
		if err := bl.BulkLoad(func(put func(b Bucket, k, v []byte) error) error { return hr.records(put) }); err != nil {
			return fmt.Errorf("load dump: %w", err)
		}
		return nil
	}
	type kv struct {
		b    Bucket
		k, v []byte
	}
	var (
		batch []kv
		size  int
	)
	commit := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := be.Update(func(tx WriteTx) error {
			for _, e := range batch {
				if err := tx.Put(e.b, e.k, e.v); err != nil {
					return err
				}
			}
			return nil
		})
		batch, size = batch[:0], 0
		return err
	}
	err := hr.records(func(b Bucket, k, v []byte) error {
		batch = append(batch, kv{b, bytes.Clone(k), bytes.Clone(v)})
		if size += len(b) + len(k) + len(v) + 16; size >= batchBytes {
			return commit()
		}
		return nil
	})
	if err == nil {
		err = commit()
	}
	if err != nil && !errors.Is(err, ErrBadDump) {
		err = fmt.Errorf("load dump: %w", err)
	}
	return err
}

// records calls put for every record of the dump after the header, and for
// the Meta records last, once the checksum is verified. The slices put gets
// are valid only during the call (every engine copies what it keeps).
func (hr *hashReader) records(put func(b Bucket, k, v []byte) error) error {
	type kv struct {
		b    Bucket
		k, v []byte
	}
	var (
		meta       []kv
		bucket     Bucket
		bb, kb, vb []byte // reused: one allocation per record costs GC at 1 GiB
		err        error
	)
	for {
		if bb, err = hr.record(bb); err != nil {
			return err
		}
		if len(bb) == 0 {
			break
		}
		if kb, err = hr.record(kb); err != nil {
			return err
		}
		if vb, err = hr.record(vb); err != nil {
			return err
		}
		if string(bb) != string(bucket) { // records come bucket by bucket
			bucket = Bucket(bb)
			if err := bucket.Validate(); err != nil {
				return fmt.Errorf("load dump: %w: %v", ErrBadDump, err)
			}
		}
		if len(kb) == 0 {
			// No engine stores an empty key, so no dump holds one.
			return fmt.Errorf("load dump: %w: empty key in bucket %q", ErrBadDump, bucket)
		}
		if bucket == Meta {
			// Held back until the checksum is verified, wherever the stream
			// puts it: a damaged stream with Meta before other records must
			// not commit a consistent index with the batch that follows.
			meta = append(meta, kv{Meta, bytes.Clone(kb), bytes.Clone(vb)})
			continue
		}
		if hr.each != nil {
			if err := hr.each(bucket, kb, vb); err != nil {
				return err
			}
		}
		if err := put(bucket, kb, vb); err != nil {
			return err
		}
	}
	want := hr.h.Sum(nil)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(hr.r, got); err != nil {
		return fmt.Errorf("load dump: %w: checksum missing: %v", ErrBadDump, err)
	}
	if !bytes.Equal(got, want) {
		return fmt.Errorf("load dump: %w: checksum mismatch", ErrBadDump)
	}
	// The dump is the whole stream: reading to its end also lets a stream
	// that checks itself at its end (the peer transport) do so before the
	// Meta records commit.
	switch _, err := hr.r.ReadByte(); {
	case err == nil:
		return fmt.Errorf("load dump: %w: data after the checksum", ErrBadDump)
	case !errors.Is(err, io.EOF):
		return fmt.Errorf("load dump: after the checksum: %w", err)
	}
	for _, e := range meta {
		if hr.each != nil {
			if err := hr.each(e.b, e.k, e.v); err != nil {
				return err
			}
		}
		if err := put(e.b, e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// hashReader hashes exactly the bytes consumed.
type hashReader struct {
	r    *bufio.Reader
	h    hash.Hash
	each func(b Bucket, k, v []byte) error // LoadEach's
}

func (h *hashReader) Read(p []byte) (int, error) {
	n, err := h.r.Read(p)
	h.h.Write(p[:n])
	return n, err
}

func (h *hashReader) ReadByte() (byte, error) {
	c, err := h.r.ReadByte()
	if err == nil {
		h.h.Write([]byte{c})
	}
	return c, err
}

// maxDumpRecord bounds one record, so a damaged length cannot make Load
// allocate without limit.
const maxDumpRecord = 1 << 30

// record reads one length-prefixed record into buf's storage.
func (h *hashReader) record(buf []byte) ([]byte, error) {
	n, err := binary.ReadUvarint(h)
	if err != nil {
		return nil, fmt.Errorf("load dump: %w: record length: %v", ErrBadDump, err)
	}
	if n > maxDumpRecord {
		return nil, fmt.Errorf("load dump: %w: record of %d bytes", ErrBadDump, n)
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(h, buf); err != nil {
		return nil, fmt.Errorf("load dump: %w: record: %v", ErrBadDump, err)
	}
	return buf, nil
}
