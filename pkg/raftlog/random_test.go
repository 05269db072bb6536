package raftlog

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
)

// model is the log as raft expects it to be, kept the simple way.
type model struct {
	snapIndex, snapTerm uint64
	terms               []uint64 // terms of entries snapIndex+1..
	term, vote, commit  uint64
}

func (m *model) last() uint64 { return m.snapIndex + uint64(len(m.terms)) }

func (m *model) view() logView {
	v := logView{
		First: m.snapIndex + 1, Last: m.last(),
		SnapIndex: m.snapIndex, SnapTerm: m.snapTerm,
		HS: [3]uint64{m.term, m.vote, m.commit},
	}
	for i, term := range m.terms {
		v.Terms = append(v.Terms, term)
		v.Data = append(v.Data, string(ent(m.snapIndex+1+uint64(i), term).GetData()))
	}
	return v
}

func (m *model) hardState() *raftpb.HardState { return hardState(m.term, m.vote, m.commit) }

// TestRandomOpsAgainstModel runs random appends (with conflicts), hard state
// changes, received and local snapshots, reopens and torn tails against a
// model, comparing the Storage view after every step.
//
// Seeds keep one segment, three or all behind the snapshot: with more than
// one, reopens replay from the newest snapshot's segment; shortcuts counts
// those that skipped segments, so the test is known to cover that path.
func TestRandomOpsAgainstModel(t *testing.T) {
	shortcuts := 0
	defer func() {
		t.Logf("%d reopens skipped segments", shortcuts)
		if !t.Failed() && shortcuts == 0 {
			t.Errorf("no reopen skipped a segment")
		}
	}()
	for seed := uint64(1); seed <= 12; seed++ {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed*7919))
			dir := t.TempDir()
			o := testOpts{segmentSize: int64(200 + rng.IntN(2000)), prealloc: seed%2 == 1, maxWALs: []int{0, -1, 3}[seed%3]}
			l := openLog(t, dir, o)
			defer func() { l.Close() }()
			m := &model{term: 1}
			mustSave(t, l, m.hardState(), nil, nil)
			var trace []string
			step := func(format string, args ...any) {
				trace = append(trace, fmt.Sprintf(format, args...))
			}
			fail := func(format string, args ...any) {
				t.Helper()
				n := min(len(trace), 15)
				t.Fatalf("%s\nlast ops:\n%v", fmt.Sprintf(format, args...), trace[len(trace)-n:])
			}

			for op := 0; op < 400; op++ {
				switch p := rng.IntN(100); {
				case p < 50: // append, maybe replacing an uncommitted suffix
					lo := max(m.commit, m.snapIndex) + 1
					first := lo + uint64(rng.IntN(int(m.last()-lo+2)))
					if first <= m.last() {
						m.term++
					}
					n := uint64(1 + rng.IntN(8))
					es := ents(first, first+n-1, m.term)
					m.terms = append(m.terms[:first-m.snapIndex-1], make([]uint64, n)...)
					for i := range n {
						m.terms[first-m.snapIndex-1+i] = m.term
					}
					var hs *raftpb.HardState
					if rng.IntN(2) == 0 {
						m.commit += uint64(rng.IntN(int(m.last()-m.commit) + 1))
						hs = m.hardState()
					} else if first <= m.last() {
						hs = m.hardState() // the term changed
					}
					step("append %d..%d term %d hs %v", first, first+n-1, m.term, hs)
					if err := l.Save(hs, es, nil); err != nil {
						fail("Save: %v", err)
					}
				case p < 60: // hard state only
					m.commit += uint64(rng.IntN(int(m.last()-m.commit) + 1))
					m.vote = uint64(rng.IntN(3))
					step("hard state %v", m.hardState())
					if err := l.Save(m.hardState(), nil, nil); err != nil {
						fail("Save(hs): %v", err)
					}
				case p < 75: // local snapshot of applied state
					if m.commit <= m.snapIndex {
						continue
					}
					idx := m.snapIndex + 1 + uint64(rng.IntN(int(m.commit-m.snapIndex)))
					step("create snapshot %d", idx)
					if err := l.CreateSnapshot(idx, &raftpb.ConfState{Voters: []uint64{1}}, nil); err != nil {
						fail("CreateSnapshot(%d): %v", idx, err)
					}
					term := m.terms[idx-m.snapIndex-1]
					m.terms = append([]uint64(nil), m.terms[idx-m.snapIndex:]...)
					m.snapIndex, m.snapTerm = idx, term
				case p < 80: // snapshot received from a leader
					idx := m.commit + 1 + uint64(rng.IntN(30))
					m.term++
					m.snapIndex, m.snapTerm, m.terms, m.commit = idx, m.term, nil, idx
					var es []*raftpb.Entry
					if rng.IntN(2) == 0 {
						n := uint64(1 + rng.IntN(4))
						es = ents(idx+1, idx+n, m.term)
						for range n {
							m.terms = append(m.terms, m.term)
						}
					}
					step("receive snapshot %d term %d + %d entries", idx, m.term, len(es))
					if err := l.Save(m.hardState(), es, snapshot(idx, m.term, 1)); err != nil {
						fail("Save(snapshot): %v", err)
					}
				case p < 92: // clean reopen
					step("reopen")
					l = reopen(t, l, dir, o)
					if l.segmentsRead < len(l.segs) {
						shortcuts++
					}
				default: // crash leaving a torn tail
					segs := segmentFiles(t, dir)
					if len(segs) == 0 {
						continue
					}
					tail := []byte{0, 0, 0}
					if rng.IntN(2) == 0 {
						tail = appendEntryRecordT(t, ent(m.last()+1, m.term+1))
						tail = tail[:len(tail)-1-rng.IntN(len(tail)-1)]
					}
					step("torn tail of %d bytes", len(tail))
					l.Close()
					appendBytes(t, segs[len(segs)-1], tail)
					l = openLog(t, dir, o)
				}
				if got, want := viewOf(t, l.Storage()), m.view(); !reflect.DeepEqual(got, want) {
					fail("after op %d:\n got %+v\nwant %+v", op, got, want)
				}
			}
			l = reopen(t, l, dir, o)
			if got, want := viewOf(t, l.Storage()), m.view(); !reflect.DeepEqual(got, want) {
				fail("final reopen:\n got %+v\nwant %+v", got, want)
			}
		})
	}
}

func appendEntryRecordT(t *testing.T, e *raftpb.Entry) []byte {
	b, err := appendEntryRecord(nil, e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestConcurrentReadsDuringWrites runs raft-style Storage reads while one
// goroutine saves and another snapshots; run with -race.
func TestConcurrentReadsDuringWrites(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testOpts{segmentSize: 2048})
	defer l.Close()
	s := l.Storage()
	const total = 2000
	var committed atomic.Uint64
	var wg sync.WaitGroup
	done := make(chan struct{})
	errc := make(chan error, 8)

	wg.Add(1)
	go func() { // WAL writer
		defer wg.Done()
		defer close(done)
		for i := uint64(1); i <= total; i += 5 {
			if err := l.Save(hardState(1, 1, i+4), ents(i, i+4, 1), nil); err != nil {
				errc <- err
				return
			}
			committed.Store(i + 4)
		}
	}()
	wg.Add(1)
	go func() { // snapshotter
		defer wg.Done()
		var last uint64
		for {
			select {
			case <-done:
				return
			default:
			}
			if c := committed.Load(); c >= last+50 {
				if err := l.CreateSnapshot(c-10, nil, nil); err != nil {
					errc <- err
					return
				}
				last = c
			}
		}
	}()
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() { // raft reading
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				first, _ := s.FirstIndex()
				last, _ := s.LastIndex()
				if last+1 < first {
					errc <- fmt.Errorf("first %d > last+1 %d", first, last+1)
					return
				}
				if last < first {
					continue
				}
				es, err := s.Entries(first, last+1, 1024)
				if errors.Is(err, raft.ErrCompacted) {
					continue
				}
				if err != nil {
					errc <- err
					return
				}
				for i, e := range es {
					if e.GetIndex() != es[0].GetIndex()+uint64(i) {
						errc <- fmt.Errorf("non-contiguous entries from Entries")
						return
					}
				}
				if _, err := s.Term(es[len(es)-1].GetIndex()); err != nil && !errors.Is(err, raft.ErrCompacted) {
					errc <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
	if last, _ := s.LastIndex(); last != total {
		t.Fatalf("LastIndex = %d, want %d", last, total)
	}
}
