package linearizability

import (
	"strings"
	"testing"
)

func put(key, val string, rev int64) WatchEvent {
	return WatchEvent{Type: EventPut, Key: key, Value: val, Rev: rev}
}

func del(key string, rev int64) WatchEvent {
	return WatchEvent{Type: EventDelete, Key: key, Rev: rev}
}

func resp(evs ...WatchEvent) WatchEntry {
	var h int64
	for _, e := range evs {
		h = max(h, e.Rev)
	}
	return WatchEntry{Kind: EntryResponse, HeaderRev: h, Events: evs}
}

func open(rev int64) WatchEntry { return WatchEntry{Kind: EntryOpen, StartRev: rev} }

// testWrites: rev 2 put a=1, rev 3 txn put b=1 c=1, rev 4 delete a,
// rev 5 put a=2, rev 6 an unknown put b=2 that took effect; an unknown
// put c=9 that did not.
func testWrites() *Writes {
	w := NewWrites()
	w.AddAcked(2, put("a", "1", 0))
	w.AddAcked(3, put("b", "1", 0), put("c", "1", 0))
	w.AddAcked(4, del("a", 0))
	w.AddAcked(5, put("a", "2", 0))
	w.AddUnknown(put("b", "2", 0))
	w.AddUnknown(put("c", "9", 0))
	return w
}

func withPrev(e WatchEvent, prev string) WatchEvent {
	e.PrevExists, e.PrevValue = true, prev
	return e
}

// good is a complete stream of testWrites from revision 2 to 6.
func good() WatchStream {
	return WatchStream{Name: "w", Start: 2, Entries: []WatchEntry{
		open(2),
		{Kind: EntryResponse, Created: true, HeaderRev: 1},
		resp(put("a", "1", 2)),
		resp(put("b", "1", 3), put("c", "1", 3)),
		resp(withPrev(del("a", 4), "1"), put("a", "2", 5)),
		resp(withPrev(put("b", "2", 6), "1")),
	}}
}

var testCheck = WatchCheck{End: 6, Contiguous: true, Compactions: []int64{5}, FreshKeys: true}

func expectViolation(t *testing.T, s WatchStream, want string) {
	t.Helper()
	errs := CheckWatch(s, testWrites(), testCheck)
	for _, err := range errs {
		if strings.Contains(err.Error(), want) {
			return
		}
	}
	t.Errorf("want a violation containing %q, got %v", want, errs)
}

func TestWatchGood(t *testing.T) {
	if errs := CheckWatch(good(), testWrites(), testCheck); errs != nil {
		t.Fatalf("good stream: %v", errs)
	}
	// Broken after revision 3 and resumed at 4.
	s := good()
	s.Entries = append(s.Entries[:4:4], WatchEntry{Kind: EntryBreak, Err: "EOF"}, open(4), s.Entries[4], s.Entries[5])
	if errs := CheckWatch(s, testWrites(), testCheck); errs != nil {
		t.Fatalf("resumed stream: %v", errs)
	}
}

func TestWatchCompactionEndsStream(t *testing.T) {
	s := good()
	s.Entries = append(s.Entries[:4:4], WatchEntry{Kind: EntryBreak, Err: "EOF"}, open(4),
		WatchEntry{Kind: EntryResponse, Canceled: true, CompactRevision: 5})
	if errs := CheckWatch(s, testWrites(), testCheck); errs != nil {
		t.Fatalf("stream ended by a compaction: %v", errs)
	}
	// A compact revision at or below the start is no reason to cancel.
	s.Entries[len(s.Entries)-1].CompactRevision = 4
	expectViolation(t, s, "above it")
	// Nor one the run never compacted at.
	s.Entries[len(s.Entries)-1].CompactRevision = 6
	expectViolation(t, s, "no compaction of the run")
	// Without the compaction, a stream that stops early is a gap.
	s = good()
	s.Entries = s.Entries[:4]
	expectViolation(t, s, "gap: no event for acknowledged write at revision 4")
	expectViolation(t, s, "not compacted")
}

func TestWatchGap(t *testing.T) {
	s := good()
	s.Entries[4] = resp(put("a", "2", 5)) // the delete at 4 is missing
	expectViolation(t, s, "gap: no event for acknowledged write at revision 4")
	// A missing revision of an unknown write is a gap under Contiguous.
	s = good()
	s.Entries = s.Entries[:5]
	s.Entries = append(s.Entries, resp(withPrev(put("b", "x", 7), "1")))
	w := testWrites()
	w.AddAcked(7, put("b", "x", 0))
	errs := CheckWatch(s, w, WatchCheck{End: 7, Contiguous: true, FreshKeys: true})
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "no event at revision 6") {
		t.Errorf("want the gap at 6, got %v", errs)
	}
}

func TestWatchDuplicate(t *testing.T) {
	s := good()
	// Resumed at the last revision instead of last+1: the server resends it.
	s.Entries = append(s.Entries[:4:4], WatchEntry{Kind: EntryBreak}, open(3), resp(put("b", "1", 3), put("c", "1", 3)), s.Entries[4], s.Entries[5])
	expectViolation(t, s, "duplicate event")
	expectViolation(t, s, "reopened at 3")
	s = good()
	s.Entries[5] = resp(withPrev(put("b", "2", 6), "1"), withPrev(put("b", "2", 6), "1"))
	expectViolation(t, s, "duplicate event")
}

func TestWatchReorder(t *testing.T) {
	s := good()
	s.Entries[4] = resp(put("a", "2", 5), withPrev(del("a", 4), "1"))
	expectViolation(t, s, "out of order")
}

func TestWatchSplitTxn(t *testing.T) {
	s := good()
	s.Entries = append(s.Entries[:3:3], resp(put("b", "1", 3)), resp(put("c", "1", 3)), s.Entries[4], s.Entries[5])
	expectViolation(t, s, "split over responses")
}

func TestWatchUnknownWrites(t *testing.T) {
	s := good()
	// A value nobody wrote.
	s.Entries[5] = resp(withPrev(put("b", "zz", 6), "1"))
	expectViolation(t, s, "no write put this value")
	// An acknowledged revision with another write's event.
	s = good()
	s.Entries[2] = resp(put("a", "other", 2))
	expectViolation(t, s, "was acknowledged for")
	// No prev_kv where the revision before is compacted (at 6): legal.
	s = good()
	s.Entries[5] = resp(put("b", "2", 6))
	if errs := CheckWatch(s, testWrites(), WatchCheck{End: 6, Contiguous: true, Compactions: []int64{6}, FreshKeys: true}); errs != nil {
		t.Errorf("prev_kv left out above a compaction: %v", errs)
	}
	// Not below it.
	expectViolation(t, s, "prev_kv")
	// Wrong prev_kv.
	s = good()
	s.Entries[5] = resp(withPrev(put("b", "2", 6), "0"))
	expectViolation(t, s, "prev_kv")
}

func TestWatchesAgree(t *testing.T) {
	a, b := good(), good()
	if errs := CheckWatchesAgree([]WatchStream{a, b}); errs != nil {
		t.Fatalf("equal streams: %v", errs)
	}
	b.Entries[5] = resp(withPrev(put("b", "9", 6), "1"))
	b.Entries = append(b.Entries, resp(put("a", "3", 7)))
	if errs := CheckWatchesAgree([]WatchStream{a, b}); len(errs) == 0 {
		t.Fatal("streams disagreeing at revision 6 passed")
	}
	c := good()
	c.Entries[4] = resp(put("a", "2", 5))
	if errs := CheckWatchesAgree([]WatchStream{a, c}); len(errs) == 0 {
		t.Fatal("a stream missing revision 4 passed")
	}
}
