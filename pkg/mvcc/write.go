package mvcc

import (
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.opentelemetry.io/otel/trace"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

// Batch holds the effects of several raft entries, applied together. It is
// only valid inside the Apply callback, on its goroutine.
type Batch struct {
	s *Store
	// buf is the active buffer; the batch appends its Key writes to buf.ents
	// beyond n0, the published prefix, and stages its Meta writes in meta.
	buf    *wbuf
	n0     int
	bytes0 int
	meta   []metaWrite
	aux    []auxPending
	// frozen is the frozen buffer when the batch began; tx is the backend
	// view opened on the first read that misses the buffers. Together they
	// hold every revision up to the store revision (see buffer.go).
	frozen  []bufEntry
	tx      backend.ReadTx
	scratch []byte
	// applying is true while the Apply callback runs.
	applying bool
	// rev is the store revision including the transactions ended in this
	// batch; it is published when the batch is applied.
	rev int64
	// compactRev is the store's compactRev raised by compactions in this
	// batch; writes in the batch read against it.
	compactRev int64
	// compactions holds the jobs (and barriers) to hand to the compactor
	// once the batch is applied, in order.
	compactions []*compactJob
	ci, term    uint64
	setCI       bool
	open        *TxnWrite
	// links are the proposals traced in this batch (Link); they join the
	// active buffer's when the batch is applied.
	links []trace.Link
	// err is the first error of a write; it fails the batch.
	err error
}

// Link records that the batch applies the writes of the proposal traced
// as sc: the backend commit that makes them durable links to it (with a
// tracer in Options). Only sampled span contexts are kept, so callers may
// pass any; without tracing nobody calls it and a batch carries nothing.
func (b *Batch) Link(sc trace.SpanContext) {
	if sc.IsSampled() {
		b.links = append(b.links, trace.Link{SpanContext: sc})
	}
}

type metaWrite struct {
	key   string
	value []byte
}

// Apply runs fn to apply a batch of raft entries. If fn returns nil, the
// batch's writes are published: once Apply returns, readers and later
// batches see its revisions, consistent index and compactions. The backend
// commit comes later, in the background (see Flush); until then the
// writes live in memory, and after a crash the WAL replays them.
//
// An error (from fn or a write) discards the batch's buffered writes but
// leaves the index holding them, so it is fatal for the member: the store
// fails every later Apply with ErrStoreFailed and the member must stop and
// restart, replaying the WAL from the consistent index. So does a failed
// commit of buffered writes. Apply may wait for the commit of earlier
// batches when the buffered writes pass the batch limits.
func (s *Store) Apply(fn func(b *Batch) error) error {
	full, err := s.apply(fn)
	if err != nil {
		return err
	}
	if full {
		// The error of a failed commit fails the next Apply: this batch is
		// applied and readers see it.
		_ = s.flusher.request(false)
	}
	return nil
}

func (s *Store) apply(fn func(b *Batch) error) (full bool, err error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if s.failed != nil {
		return false, fmt.Errorf("%w: %w", ErrStoreFailed, s.failed)
	}
	if p := s.flushFailed.Load(); p != nil {
		return false, fmt.Errorf("%w: %w", ErrStoreFailed, *p)
	}
	w := s.active
	b := &Batch{s: s, buf: w, n0: len(w.ents), bytes0: w.bytes, frozen: s.bufs.Load().frozen,
		rev: s.rev.Load(), compactRev: s.compactRev, applying: true}
	err = fn(b)
	if err == nil && b.open != nil {
		err = errors.New("write txn not ended")
	}
	if err == nil {
		err = b.err
	}
	b.applying = false
	if b.tx != nil {
		b.tx.Release()
		b.tx = nil
	}
	if err != nil {
		clear(w.ents[b.n0:])
		w.ents = w.ents[:b.n0]
		w.bytes = b.bytes0
		s.failed = err
		return false, fmt.Errorf("mvcc apply batch at revision %d: %w", b.rev, err)
	}
	for _, m := range b.meta {
		if _, ok := w.meta[m.key]; !ok {
			w.bytes += writeBytes(backend.Meta, len(m.key), len(m.value))
		}
		w.meta[m.key] = m.value
	}
	for _, a := range b.aux {
		if _, ok := w.aux[a.k]; !ok {
			w.bytes += writeBytes(a.k.bucket, len(a.k.key), len(a.w.value))
		}
		w.aux[a.k] = a.w
	}
	w.links = append(w.links, b.links...)
	s.publishActive()
	s.rev.Store(b.rev)
	if b.setCI {
		s.consistentIndex.Store(b.ci)
		s.consistentTerm.Store(b.term)
	}
	if b.compactRev != s.compactRev {
		// Waits for open read views: none of them may run while the index
		// below the new compaction revision is being removed.
		s.mu.Lock()
		s.compactRev = b.compactRev
		s.mu.Unlock()
	}
	if len(b.compactions) > 0 {
		s.compactor.enqueue(b.compactions)
	}
	return len(w.ents) >= s.batchLimit || w.bytes >= s.batchBytes, nil
}

// Rev returns the store revision including the write transactions already
// ended in this batch.
func (b *Batch) Rev() int64 { return b.rev }

// SetConsistentIndex records, in this batch, the raft index and term of the
// last entry it applies.
func (b *Batch) SetConsistentIndex(index, term uint64) {
	b.putMeta(metaConsistentIndex, uint64Bytes(index))
	b.putMeta(metaConsistentTerm, uint64Bytes(term))
	b.ci, b.term, b.setCI = index, term, true
}

func (b *Batch) putMeta(key, value []byte) {
	b.meta = append(b.meta, metaWrite{key: string(key), value: value})
}

// putRev buffers the Key bucket write of rev; revisions arrive in order.
func (b *Batch) putRev(rev index.Revision, tomb bool, value []byte) {
	w := b.buf
	w.ents = append(w.ents, bufEntry{rev: rev, tomb: tomb, value: value})
	w.bytes += writeBytes(backend.Key, markedRevBytesLen, len(value))
}

// getRev implements revGetter over the batch's own writes, the published
// buffers and the backend.
func (b *Batch) getRev(rev index.Revision) ([]byte, bool, bool, error) {
	return getRev(b.buf.ents, b.frozen, b.s.be, &b.tx, &b.scratch, rev)
}

// Write opens a write transaction: one client request, one revision if it
// writes anything. Only one may be open in a batch at a time.
func (b *Batch) Write() *TxnWrite {
	if b.open != nil {
		panic("mvcc: Write while another write txn of the batch is open")
	}
	t := &TxnWrite{b: b, beginRev: b.rev}
	t.events = t.first[:0]
	b.open = t
	return t
}

// TxnWrite is one write transaction. Its reads see the batch's earlier
// transactions and its own writes. Keys and values handed to it must not be
// modified until the batch is applied.
type TxnWrite struct {
	b        *Batch
	beginRev int64
	events   []*mvccpb.Event
	// first backs events while the transaction has written one key (most
	// requests): no slice of its own to allocate.
	first [1]*mvccpb.Event
	ended bool
	// n counts the transaction's operations; End adds them to the store's.
	n txnOps
}

// Rev returns the revision this transaction's reads see: the store revision
// when it began, or, once it has written, the revision it writes at. After
// the last operation it is the revision for the response header.
func (t *TxnWrite) Rev() int64 {
	if len(t.events) > 0 {
		return t.beginRev + 1
	}
	return t.beginRev
}

// Range implements Reader.
func (t *TxnWrite) Range(key, end []byte, ro RangeOptions) (*RangeResult, error) {
	t.check()
	t.n.ranges++
	return rangeKeys(t.b.s.idx, t.b, key, end, t.Rev(), t.b.compactRev, ro)
}

// Versions implements Reader.
func (t *TxnWrite) Versions(key, end []byte, f func(created, modified, version int64) bool) {
	t.check()
	t.n.ranges++
	versions(t.b.s.idx, key, end, t.Rev(), f)
}

// Put writes key = value, attached to lease (0: none), at the transaction's
// revision (begin revision + 1; a second write in the same transaction gets
// the next sub revision) and returns that main revision. The version is
// the key's version plus one, or 1 (with create revision = this revision)
// when the key does not exist.
func (t *TxnWrite) Put(key, value []byte, lease int64) int64 {
	t.check()
	t.n.puts++
	t.n.putBytes += uint64(len(key) + len(value))
	rev := t.beginRev + 1
	idxRev := index.Revision{Main: rev, Sub: int64(len(t.events))}
	created, ver := t.b.s.idx.Put(key, idxRev)
	kv := &mvccpb.KeyValue{
		Key:            key,
		Value:          value,
		CreateRevision: created.Main,
		ModRevision:    rev,
		Version:        ver,
		Lease:          lease,
	}
	t.b.putRev(idxRev, false, marshalKV(kv))
	t.events = append(t.events, &mvccpb.Event{Type: mvccpb.Event_PUT, Kv: kv})
	return rev
}

// DeleteRange deletes the keys live in the range (ends as in Range) by
// writing tombstones. It returns how many keys it deleted and the revision of
// the transaction after it (the begin revision if nothing was written).
func (t *TxnWrite) DeleteRange(key, end []byte) (n, rev int64) {
	t.check()
	t.n.deletes++
	keys, _, _ := t.b.s.idx.Range(key, end, t.Rev(), 0)
	for _, k := range keys {
		t.delete(k)
	}
	return int64(len(keys)), t.Rev()
}

func (t *TxnWrite) delete(key []byte) {
	rev := t.beginRev + 1
	idxRev := index.Revision{Main: rev, Sub: int64(len(t.events))}
	t.b.putRev(idxRev, true, marshalKV(&mvccpb.KeyValue{Key: key}))
	if err := t.b.s.idx.Tombstone(key, idxRev); err != nil && t.b.err == nil {
		t.b.err = fmt.Errorf("tombstone %q at %v: %w", key, idxRev, err)
	}
	t.events = append(t.events, &mvccpb.Event{
		Type: mvccpb.Event_DELETE,
		Kv:   &mvccpb.KeyValue{Key: key, ModRevision: rev},
	})
}

// Events returns the changes of this transaction in order, as watchers get
// them: PUT with the full KeyValue, DELETE with Key and ModRevision set.
// The caller must not modify them.
func (t *TxnWrite) Events() []*mvccpb.Event { return t.events }

// End closes the transaction; if it wrote, the batch moves to its revision.
func (t *TxnWrite) End() {
	if t.ended {
		return
	}
	t.ended = true
	t.b.s.ops.add(&t.n)
	if len(t.events) > 0 {
		t.b.rev++
	}
	t.b.open = nil
}

func (t *TxnWrite) check() {
	if t.ended {
		panic("mvcc: use of an ended write txn")
	}
	if !t.b.applying {
		panic("mvcc: use of a write txn outside its Apply")
	}
}
