package linearizability

import (
	"fmt"
	"sort"

	"github.com/anishathalye/porcupine"
)

// This file checks recorded watch streams against etcd's watch guarantees
// (https://etcd.io/docs/v3.5/learning/api_guarantees/#watch-apis):
//
//   - ordered: event revisions never go down; events of different
//     revisions arrive in increasing revision order;
//   - no duplicates: no (revision, key) event twice;
//   - atomic: all events of one revision (a txn) arrive in one response;
//   - no gaps / reliable: a stream that covers a range of revisions has an
//     event for every acknowledged write in it, and every event is a write
//     that was acknowledged or of unknown outcome, with its key, value and
//     the key's previous value (prev_kv; left out, as etcd does, when the
//     revision before the event was compacted);
//   - resumable: a stream that breaks or is canceled is reopened at the
//     last revision + 1, and a reopen below the compacted revision is
//     answered with a cancel carrying the compact revision, which ends the
//     stream legally (its coverage ends where the events did).

// EventType is a watch event's type.
type EventType int

// Event types.
const (
	EventPut EventType = iota
	EventDelete
)

func (t EventType) String() string {
	if t == EventDelete {
		return "DELETE"
	}
	return "PUT"
}

// WatchEvent is one event of a watch response, or one key a write changed.
type WatchEvent struct {
	Type EventType
	Key  string
	// Value is the put value (empty for a delete).
	Value string
	// Rev is the event's mod revision (for a delete, the deleting revision).
	Rev int64
	// PrevExists and PrevValue are the event's prev_kv.
	PrevExists bool
	PrevValue  string
}

func (e WatchEvent) String() string {
	if e.Type == EventDelete {
		return fmt.Sprintf("DELETE %s @%d", e.Key, e.Rev)
	}
	return fmt.Sprintf("PUT %s=%q @%d", e.Key, e.Value, e.Rev)
}

// EntryKind says what a stream entry records.
type EntryKind int

// Stream entry kinds.
const (
	// EntryOpen: the client opened a watch at StartRev.
	EntryOpen EntryKind = iota
	// EntryResponse: a response from the server.
	EntryResponse
	// EntryBreak: the stream broke (an error; Err says which).
	EntryBreak
)

// WatchEntry is one recorded step of a watcher.
type WatchEntry struct {
	Kind     EntryKind
	StartRev int64  // EntryOpen
	Err      string // EntryBreak
	// EntryResponse:
	HeaderRev       int64
	Created         bool
	Canceled        bool
	CompactRevision int64
	Events          []WatchEvent
}

// WatchStream is everything one watcher recorded, in order.
type WatchStream struct {
	Name string
	// Start is the revision the first watch was opened at.
	Start   int64
	Entries []WatchEntry
}

// Writes are the writes a workload issued: acknowledged ones with their
// revision, and ones whose outcome is unknown.
type Writes struct {
	acked          map[int64][]WatchEvent
	unknownPuts    map[string]int // key "\x00" value -> count
	unknownDeletes map[string]int // key -> count
}

// NewWrites returns an empty set of writes.
func NewWrites() *Writes {
	return &Writes{acked: map[int64][]WatchEvent{}, unknownPuts: map[string]int{}, unknownDeletes: map[string]int{}}
}

// AddAcked records a write acknowledged at rev that changed the keys of
// events (their Rev and Prev fields are ignored).
func (w *Writes) AddAcked(rev int64, events ...WatchEvent) {
	for _, e := range events {
		e.Rev = rev
		w.acked[rev] = append(w.acked[rev], e)
	}
}

// AddUnknown records a write of unknown outcome that would change the keys
// of events. Put values must be unique across all writes.
func (w *Writes) AddUnknown(events ...WatchEvent) {
	for _, e := range events {
		if e.Type == EventDelete {
			w.unknownDeletes[e.Key]++
		} else {
			w.unknownPuts[e.Key+"\x00"+e.Value]++
		}
	}
}

// Acked returns the acknowledged revisions in order.
func (w *Writes) Acked() []int64 {
	revs := make([]int64, 0, len(w.acked))
	for r := range w.acked {
		revs = append(revs, r)
	}
	sort.Slice(revs, func(i, j int) bool { return revs[i] < revs[j] })
	return revs
}

// WritesFromHistory collects the writes of a history of this package's
// operations: puts, deletes that deleted a key and compare-and-puts that
// succeeded with their revision; failed writes as unknown.
func WritesFromHistory(history []porcupine.Operation) *Writes {
	w := NewWrites()
	w.AddHistory(history)
	return w
}

// AddHistory adds the writes of history (see WritesFromHistory).
func (w *Writes) AddHistory(history []porcupine.Operation) {
	for _, op := range history {
		in, out := op.Input.(Input), op.Output.(Output)
		var e WatchEvent
		switch in.Kind {
		case Put, CompareAndPut:
			e = WatchEvent{Type: EventPut, Key: in.Key, Value: in.Value}
		case Delete:
			e = WatchEvent{Type: EventDelete, Key: in.Key}
		default:
			continue
		}
		switch {
		case out.Unknown:
			w.AddUnknown(e)
		case in.Kind == Put, in.Kind == Delete && out.Deleted > 0, in.Kind == CompareAndPut && out.Succeeded:
			w.AddAcked(out.Rev, e)
		}
	}
}

// WatchCheck says what CheckWatch may assume.
type WatchCheck struct {
	// End is the revision every stream that was not ended by a compaction
	// must have covered: the last write of the run.
	End int64
	// Contiguous: every revision of the run is a write under the watched
	// prefix, so a complete stream has events at every revision from its
	// start to its end.
	Contiguous bool
	// Compactions are the revisions the run compacted at (nil: not
	// checked); a compact revision in a cancel must be one of them.
	Compactions []int64
	// FreshKeys: no watched key existed before the stream's start, so the
	// first event of a key has no prev_kv.
	FreshKeys bool
}

// CheckWatch checks one stream against the writes and returns every
// violation found (nil if none).
func CheckWatch(s WatchStream, w *Writes, c WatchCheck) []error {
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("watch %s: "+format, append([]any{s.Name}, args...)...))
	}
	compactions := map[int64]bool{}
	var maxCompaction int64
	for _, r := range c.Compactions {
		compactions[r] = true
		maxCompaction = max(maxCompaction, r)
	}

	var (
		lastRev     int64 = s.Start - 1 // revision of the last event
		lastResp          = -1          // entry index of the last event
		open              = false
		openStart   int64
		compactEnd  = false
		seen        = map[int64][]WatchEvent{} // events by revision
		seenKey     = map[string]bool{}        // rev/key pairs
		seenPutVal  = map[string]int64{}       // key\x00value -> rev
		state       = map[string]*WatchEvent{} // key -> last event
		unknownUsed = map[string]int{}
	)
	for i, en := range s.Entries {
		switch en.Kind {
		case EntryOpen:
			if compactEnd {
				fail("entry %d: reopened after the stream was ended by a compaction", i)
			}
			if en.StartRev != lastRev+1 {
				fail("entry %d: reopened at %d, want last event revision %d + 1", i, en.StartRev, lastRev)
			}
			open, openStart = true, en.StartRev
		case EntryBreak:
			open = false
		case EntryResponse:
			if !open {
				fail("entry %d: response on no open watch", i)
			}
			if compactEnd {
				fail("entry %d: response after the stream was ended by a compaction", i)
			}
			if en.Canceled && en.CompactRevision > 0 {
				if len(en.Events) > 0 {
					fail("entry %d: compaction cancel carries %d events", i, len(en.Events))
				}
				if en.CompactRevision <= openStart {
					fail("entry %d: canceled as compacted at %d, but the watch started at %d, above it", i, en.CompactRevision, openStart)
				} else if c.Contiguous && en.CompactRevision <= lastRev+1 {
					fail("entry %d: canceled as compacted at %d, but the watch needed revision %d next, not compacted", i, en.CompactRevision, lastRev+1)
				}
				if c.Compactions != nil && !compactions[en.CompactRevision] {
					fail("entry %d: compact revision %d is no compaction of the run %v", i, en.CompactRevision, c.Compactions)
				}
				compactEnd = true
				open = false
				continue
			}
			if en.CompactRevision > 0 {
				fail("entry %d: compact revision %d on a response that is no cancel", i, en.CompactRevision)
			}
			for j, e := range en.Events {
				id := fmt.Sprintf("entry %d event %d (%v)", i, j, e)
				k := fmt.Sprintf("%d\x00%s", e.Rev, e.Key)
				switch {
				case seenKey[k]:
					fail("%s: duplicate event", id)
					continue
				case e.Rev < lastRev:
					fail("%s: out of order after revision %d", id, lastRev)
					continue
				case e.Rev == lastRev && lastResp != i:
					fail("%s: revision %d split over responses (txn not atomic)", id, e.Rev)
				case e.Rev < s.Start:
					fail("%s: before the watch's start %d", id, s.Start)
				}
				if e.Rev > en.HeaderRev && en.HeaderRev > 0 {
					fail("%s: above the response's header revision %d", id, en.HeaderRev)
				}
				seenKey[k] = true
				seen[e.Rev] = append(seen[e.Rev], e)
				lastRev, lastResp = e.Rev, i
				// prev_kv is the key's previous event in this stream.
				// Like etcd, kvd reads prev_kv at the event's revision - 1
				// when it sends the event, and leaves it out if that
				// revision is compacted by then.
				if prev, ok := state[e.Key]; ok && !(!e.PrevExists && e.Rev <= maxCompaction) {
					wantExists := prev.Type == EventPut
					if e.PrevExists != wantExists || (wantExists && e.PrevValue != prev.Value) {
						fail("%s: prev_kv (%v %q), but the key's previous event was %v", id, e.PrevExists, e.PrevValue, *prev)
					}
				} else if c.FreshKeys && e.PrevExists {
					fail("%s: prev_kv %q on the key's first event", id, e.PrevValue)
				}
				ev := e
				state[e.Key] = &ev
				// The event must be a write of the run.
				if want, ok := w.acked[e.Rev]; ok {
					if !containsEvent(want, e) {
						fail("%s: revision %d was acknowledged for %v", id, e.Rev, want)
					}
					continue
				}
				if e.Type == EventDelete {
					if unknownUsed["d\x00"+e.Key] >= w.unknownDeletes[e.Key] {
						fail("%s: no write deleted this key at this revision (acknowledged or unknown)", id)
					}
					unknownUsed["d\x00"+e.Key]++
					continue
				}
				pv := e.Key + "\x00" + e.Value
				if r, ok := seenPutVal[pv]; ok && r != e.Rev {
					fail("%s: the same put also appeared at revision %d", id, r)
				}
				seenPutVal[pv] = e.Rev
				if w.unknownPuts[pv] == 0 {
					fail("%s: no write put this value (acknowledged or unknown)", id)
				}
			}
		}
	}
	// Coverage: from the start to End, or to the last event when a
	// compaction ended the stream.
	end := c.End
	if compactEnd {
		end = lastRev
	}
	for rev, want := range w.acked {
		if rev < s.Start || rev > end {
			continue
		}
		got := seen[rev]
		if len(got) == 0 {
			fail("gap: no event for acknowledged write at revision %d (%v)", rev, want)
			continue
		}
		for _, e := range want {
			if !containsEvent(got, e) {
				fail("gap: revision %d lacks %v (got %v)", rev, e, got)
			}
		}
		if len(got) != len(want) {
			fail("revision %d has events %v, the write changed %v", rev, got, want)
		}
	}
	if c.Contiguous {
		for rev := s.Start; rev <= end; rev++ {
			if len(seen[rev]) == 0 && len(w.acked[rev]) == 0 {
				fail("gap: no event at revision %d (every revision of the run is a watched write)", rev)
			}
		}
	}
	if !compactEnd && lastRev < c.End {
		fail("stream ends at revision %d, before the run's last write %d, and was not compacted", lastRev, c.End)
	}
	return errs
}

func containsEvent(list []WatchEvent, e WatchEvent) bool {
	for _, x := range list {
		if x.Type == e.Type && x.Key == e.Key && (e.Type == EventDelete || x.Value == e.Value) {
			return true
		}
	}
	return false
}

// CheckWatchesAgree checks that streams have the same events at every
// revision each of them saw (a revision one stream saw and another, whose
// events go past it, did not is a gap in the other).
func CheckWatchesAgree(streams []WatchStream) []error {
	type info struct {
		byRev   map[int64][]WatchEvent
		first   int64
		lastRev int64
	}
	infos := make([]info, len(streams))
	for i, s := range streams {
		in := info{byRev: map[int64][]WatchEvent{}, first: s.Start}
		for _, en := range s.Entries {
			for _, e := range en.Events {
				in.byRev[e.Rev] = append(in.byRev[e.Rev], e)
				if e.Rev > in.lastRev {
					in.lastRev = e.Rev
				}
			}
		}
		infos[i] = in
	}
	var errs []error
	for i := range streams {
		for j := range streams {
			if i == j {
				continue
			}
			a, b := infos[i], infos[j]
			for rev, evs := range a.byRev {
				if rev < b.first || rev > b.lastRev {
					continue
				}
				other := b.byRev[rev]
				if len(other) == 0 {
					errs = append(errs, fmt.Errorf("watch %s has no event at revision %d, which %s saw (%v)", streams[j].Name, rev, streams[i].Name, evs))
					continue
				}
				if i < j {
					for _, e := range evs {
						if !containsEvent(other, e) || len(other) != len(evs) {
							errs = append(errs, fmt.Errorf("watches %s and %s disagree at revision %d: %v vs %v", streams[i].Name, streams[j].Name, rev, evs, other))
							break
						}
					}
				}
			}
		}
	}
	return errs
}

// Merge adds o's writes to w.
func (w *Writes) Merge(o *Writes) {
	for r, evs := range o.acked {
		w.acked[r] = append(w.acked[r], evs...)
	}
	for k, n := range o.unknownPuts {
		w.unknownPuts[k] += n
	}
	for k, n := range o.unknownDeletes {
		w.unknownDeletes[k] += n
	}
}
