package mvcc

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/failpoint"
	"github.com/kvd-dev/kvd/pkg/index"
)

// Write-back buffering, etcd's batched backend commits.
//
// Apply does not commit the backend. It appends the batch's Key bucket
// writes to the active buffer and its Meta and Lease writes to the active
// buffer's meta and aux maps, then publishes them to readers. The flusher goroutine commits
// buffers: it freezes the active buffer (a new one takes its place), writes
// the frozen one in one backend.Update together with the latest consistent
// index, and only then drops it. So the backend always holds a prefix of the
// applied history that matches its consistent index, and on restart raft
// replays the entries after it from the WAL.
//
// Readers find a revision in the active buffer's published prefix, then in
// the frozen buffer, then in the backend. They load the store revision, then
// the buffers (bufState), then open the backend view; that finds every
// revision <= the loaded revision because
//   - Apply publishes the buffers before the revision;
//   - a freeze moves the active buffer to frozen in one bufState;
//   - a frozen buffer is dropped from bufState only after its commit, so a
//     reader that no longer sees it opens a backend view that holds it;
//   - buffered entries are never modified once published, and a published
//     prefix is never overwritten (a new active buffer gets a new array).

// bufEntry is one Key bucket write that is not committed yet.
type bufEntry struct {
	rev   index.Revision
	tomb  bool
	value []byte
}

// wbuf is a write-back buffer.
type wbuf struct {
	// ents are in revision order; the applier appends beyond the published
	// prefix (bufState.active) during an Apply.
	ents []bufEntry
	// meta holds Meta bucket writes, the last one per key.
	meta map[string][]byte
	// aux holds the writes to other buckets (Lease), the last one per key.
	aux map[auxKey]auxWrite
	// bytes estimates the backend update the buffer makes, as Badger counts
	// it (key + value + bucket + 14 per write).
	bytes int
	// links are the span contexts of the sampled proposals whose writes the
	// buffer holds (Batch.Link); nil when none was traced.
	links []trace.Link
}

const initialBufEntries = 256

func newWbuf() *wbuf {
	return &wbuf{ents: make([]bufEntry, 0, initialBufEntries), meta: map[string][]byte{}, aux: map[auxKey]auxWrite{}}
}

func (w *wbuf) empty() bool { return len(w.ents) == 0 && len(w.meta) == 0 && len(w.aux) == 0 }

func writeBytes(bucket backend.Bucket, key, value int) int {
	return key + value + len(bucket) + 14
}

// bufState is what readers see of the buffers. It is immutable once stored
// in Store.bufs.
type bufState struct {
	// active is the published prefix of the active buffer.
	active []bufEntry
	// frozen is the buffer being committed, nil if none.
	frozen []bufEntry
}

func compareRev(a, b index.Revision) int {
	switch {
	case a.Main != b.Main:
		if a.Main < b.Main {
			return -1
		}
		return 1
	case a.Sub < b.Sub:
		return -1
	case a.Sub > b.Sub:
		return 1
	}
	return 0
}

// findRev returns the value of the put at rev in ents, if there.
func findRev(ents []bufEntry, rev index.Revision) ([]byte, bool) {
	n := len(ents)
	if n == 0 || compareRev(rev, ents[0].rev) < 0 || compareRev(rev, ents[n-1].rev) > 0 {
		return nil, false
	}
	i, ok := slices.BinarySearchFunc(ents, rev, func(e bufEntry, r index.Revision) int { return compareRev(e.rev, r) })
	if !ok || ents[i].tomb {
		return nil, false
	}
	return ents[i].value, true
}

// getRev reads the KeyValue put at rev from active, then frozen, then the
// backend view that *tx holds, opening it with be on first use. scratch is
// reused for the backend key. owned reports a value the caller may keep
// as it is (backend.OwnedValues); any other is to be copied.
func getRev(active, frozen []bufEntry, be backend.Backend, tx *backend.ReadTx, scratch *[]byte, rev index.Revision) (v []byte, owned, ok bool, err error) {
	if v, ok := findRev(active, rev); ok {
		return v, false, true, nil
	}
	if v, ok := findRev(frozen, rev); ok {
		return v, false, true, nil
	}
	if *tx == nil {
		t, err := be.ReadTx()
		if err != nil {
			return nil, false, false, fmt.Errorf("open backend read tx: %w", err)
		}
		*tx = t
	}
	*scratch = appendRev((*scratch)[:0], rev, false)
	v, ok, err = (*tx).Get(backend.Key, *scratch)
	_, owned = (*tx).(backend.OwnedValues)
	return v, owned, ok, err
}

// publishActive makes the active buffer's entries so far visible to readers.
// The caller holds applyMu.
func (s *Store) publishActive() {
	s.stateMu.Lock()
	old := s.bufs.Load()
	s.bufs.Store(&bufState{active: s.active.ents, frozen: old.frozen})
	s.stateMu.Unlock()
}

// errStoreClosed is returned by Flush after Close.
var errStoreClosed = errors.New("mvcc: store closed")

// flushReq asks the flusher to freeze the active buffer; done gets nil once
// it is frozen (commit false) or the commit's result (commit true).
type flushReq struct {
	commit bool
	// reset, when set, runs on the flusher instead of a flush (see Reset).
	reset func() error
	done  chan error
}

// flusher commits buffers to the backend, one at a time, on its goroutine.
type flusher struct {
	s        *Store
	interval time.Duration
	onCommit func(time.Duration)
	// tracer, if set, traces the commits of buffers with links.
	tracer trace.Tracer
	reqc   chan flushReq
	stopc  chan struct{}
	donec  chan struct{}
	// err is the first failed commit; the flusher commits nothing after it.
	// Flusher goroutine only.
	err error
}

func (f *flusher) init(s *Store, interval time.Duration) {
	f.s = s
	f.interval = interval
	f.reqc = make(chan flushReq)
	f.stopc = make(chan struct{})
	f.donec = make(chan struct{})
}

func (f *flusher) run() {
	defer close(f.donec)
	tick := time.NewTicker(f.interval)
	defer tick.Stop()
	for {
		select {
		case <-f.stopc:
			return
		case <-tick.C:
			f.flush(nil)
		case r := <-f.reqc:
			if r.reset != nil {
				r.done <- r.reset()
				continue
			}
			reqs := []flushReq{r}
		drain:
			for {
				select {
				case r := <-f.reqc:
					if r.reset != nil {
						f.flush(reqs)
						reqs = nil
						r.done <- r.reset()
						continue
					}
					reqs = append(reqs, r)
				default:
					break drain
				}
			}
			f.flush(reqs)
		}
	}
}

// request hands r to the flusher and waits for its answer.
func (f *flusher) request(commit bool) error {
	r := flushReq{commit: commit, done: make(chan error, 1)}
	select {
	case f.reqc <- r:
	case <-f.donec:
		return errStoreClosed
	}
	return <-r.done
}

func (f *flusher) stop() {
	close(f.stopc)
	<-f.donec
}

// flush freezes the active buffer, answers the requests that only wait for
// that, commits it, and answers the rest.
func (f *flusher) flush(reqs []flushReq) {
	reply := func(commit bool, err error) {
		for _, r := range reqs {
			if r.commit == commit {
				r.done <- err
			}
		}
	}
	if f.err != nil {
		err := fmt.Errorf("%w: %w", ErrStoreFailed, f.err)
		reply(false, err)
		reply(true, err)
		return
	}
	s := f.s
	w := s.freeze()
	reply(false, nil)
	if w != nil {
		start := time.Now()
		err := s.commit(w)
		if err == nil && f.onCommit != nil {
			f.onCommit(time.Since(start))
		}
		if f.tracer != nil && len(w.links) > 0 {
			f.traceCommit(w, start, err)
		}
		if err != nil {
			f.err = err
			s.flushFailed.Store(&err)
			s.lg.Error("backend commit of applied writes failed; the store refuses further writes", zap.Error(err))
		} else {
			s.stateMu.Lock()
			old := s.bufs.Load()
			s.bufs.Store(&bufState{active: old.active})
			s.stateMu.Unlock()
		}
	}
	if f.err != nil {
		reply(true, fmt.Errorf("%w: %w", ErrStoreFailed, f.err))
		return
	}
	reply(true, nil)
}

// traceCommit records the commit of w that began at start as a
// "backend.commit" span. It is a root: the commit serves many requests,
// each in its own trace; it links to each traced proposal whose writes it
// made durable in the backend. (The WAL made them durable first; this is
// when the backend caught up.)
func (f *flusher) traceCommit(w *wbuf, start time.Time, err error) {
	_, span := f.tracer.Start(context.Background(), "backend.commit",
		trace.WithNewRoot(),
		trace.WithTimestamp(start),
		trace.WithLinks(w.links...),
		trace.WithAttributes(
			attribute.Int("kvd.backend.writes", len(w.ents)+len(w.meta)+len(w.aux)),
			attribute.Int("kvd.backend.bytes", w.bytes),
		))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "backend commit failed")
	}
	span.End()
}

// freeze swaps in a new active buffer and publishes the old one as frozen.
// It returns nil if there is nothing to commit. The frozen slot is free:
// only the flusher freezes, and it commits each frozen buffer before the
// next freeze.
func (s *Store) freeze() *wbuf {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	w := s.active
	if w.empty() {
		return nil
	}
	s.active = newWbuf()
	s.stateMu.Lock()
	s.bufs.Store(&bufState{frozen: w.ents})
	s.stateMu.Unlock()
	return w
}

// commit writes w to the backend in one update, or in parts when the
// engine cannot hold it in one (split.go).
func (s *Store) commit(w *wbuf) error {
	failpoint.Hit(failpoint.BackendBeforeCommit)
	err := s.be.Update(func(tx backend.WriteTx) error {
		if err := putEnts(tx, w.ents); err != nil {
			return err
		}
		return putMetaAux(tx, w)
	})
	if errors.Is(err, backend.ErrUpdateTooLarge) {
		err = s.commitSplit(w)
	}
	if err != nil {
		return fmt.Errorf("commit %d buffered writes (%d bytes) to the backend: %w", len(w.ents)+len(w.meta)+len(w.aux), w.bytes, err)
	}
	failpoint.Hit(failpoint.BackendAfterCommit)
	return nil
}

// putEnts writes Key bucket records.
func putEnts(tx backend.WriteTx, ents []bufEntry) error {
	var k []byte
	for i := range ents {
		e := &ents[i]
		k = appendRev(k[:0], e.rev, e.tomb)
		if err := tx.Put(backend.Key, k, e.value); err != nil {
			return fmt.Errorf("put revision %v: %w", e.rev, err)
		}
	}
	return nil
}

// putMetaAux writes w's Meta and other bucket writes.
func putMetaAux(tx backend.WriteTx, w *wbuf) error {
	for key, v := range w.meta {
		if err := tx.Put(backend.Meta, []byte(key), v); err != nil {
			return fmt.Errorf("put meta %s: %w", key, err)
		}
	}
	for k, a := range w.aux {
		var err error
		if a.del {
			err = tx.Delete(k.bucket, []byte(k.key))
		} else {
			err = tx.Put(k.bucket, []byte(k.key), a.value)
		}
		if err != nil {
			return fmt.Errorf("write %s key %x: %w", k.bucket, k.key, err)
		}
	}
	return nil
}

// Flush commits to the backend everything applied so far, with its
// consistent index, and returns once the commit is done. A failed commit is
// fatal: the store refuses further writes (ErrStoreFailed), and the member
// must restart and replay the WAL from the backend's consistent index.
//
// Flush is safe from any goroutine, but not from inside an Apply callback.
// Callers: before a raft snapshot lets the WAL be truncated, and Close.
func (s *Store) Flush() error {
	if err := s.flusher.request(true); err != nil {
		return fmt.Errorf("mvcc flush: %w", err)
	}
	return nil
}
