package corruptcheck

import (
	"context"
	"errors"
	"slices"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

type fakeCompactHasher struct {
	fakeHasher
	stored []KeyValueHash
	byRev  map[int64][]PeerHash
	asked  []int64
}

func (f *fakeCompactHasher) Hashes() []KeyValueHash { return slices.Clone(f.stored) }

func (f *fakeCompactHasher) PeerHashByRev(_ context.Context, rev int64) []PeerHash {
	f.asked = append(f.asked, rev)
	return f.byRev[rev]
}

func TestCompactHashCheck(t *testing.T) {
	h := func(rev, compact int64, hash uint32) KeyValueHash {
		return KeyValueHash{Hash: hash, Revision: rev, CompactRevision: compact}
	}
	down := func(id uint64) PeerHash { return PeerHash{ID: id, Err: errors.New("down")} }
	tests := []struct {
		name      string
		stored    []KeyValueHash
		byRev     map[int64][]PeerHash
		want      []uint64
		wantAsked []int64
		wantLog   string
		// checked: the newest revision checked on the whole cluster after.
		checked int64
	}{
		{name: "all agree at the newest", stored: []KeyValueHash{h(10, 5, 1), h(20, 10, 2)},
			byRev:     map[int64][]PeerHash{20: {peer(2, 25, 10, 2), peer(3, 25, 10, 2)}},
			wantAsked: []int64{20}, checked: 20, wantLog: "successfully checked hash on whole cluster"},
		{name: "one follower differs: it is alarmed", stored: []KeyValueHash{h(20, 10, 2)},
			byRev: map[int64][]PeerHash{20: {peer(2, 25, 10, 2), peer(3, 25, 10, 9)}},
			want:  []uint64{3}, wantAsked: []int64{20}, wantLog: "Detected compaction hash mismatch"},
		{name: "leader in the minority: the leader is alarmed", stored: []KeyValueHash{h(20, 10, 2)},
			byRev: map[int64][]PeerHash{20: {peer(2, 25, 10, 9), peer(3, 25, 10, 9)}},
			want:  []uint64{1}, wantAsked: []int64{20}, wantLog: "Detected compaction hash mismatch"},
		{name: "three hashes, no quorum: member 0", stored: []KeyValueHash{h(20, 10, 2)},
			byRev: map[int64][]PeerHash{20: {peer(2, 25, 10, 8), peer(3, 25, 10, 9)}},
			want:  []uint64{0}, wantAsked: []int64{20},
			wantLog: "Detected compaction hash mismatch but cannot identify the corrupted members, so intentionally set the memberID as 0"},
		{name: "peer at another compaction skipped, older hash tried", stored: []KeyValueHash{h(10, 5, 1), h(20, 10, 2)},
			byRev: map[int64][]PeerHash{
				20: {peer(2, 25, 10, 2), peer(3, 25, 20, 7)},
				10: {peer(2, 25, 5, 1), peer(3, 25, 5, 1)},
			},
			wantAsked: []int64{20, 10}, checked: 10, wantLog: "skipped revision in compaction hash check; was not able to check all peers"},
		{name: "a peer down: nothing checked, nothing alarmed", stored: []KeyValueHash{h(20, 10, 2)},
			byRev:     map[int64][]PeerHash{20: {peer(2, 25, 10, 2), down(3)}},
			wantAsked: []int64{20}, wantLog: "Skipped peer's hash"},
		{name: "mismatch found with a peer down: the minority is alarmed", stored: []KeyValueHash{h(20, 10, 2)},
			byRev: map[int64][]PeerHash{20: {peer(2, 25, 10, 2), peer(3, 25, 10, 9), down(4), peer(5, 25, 10, 2)}},
			want:  []uint64{3}, wantAsked: []int64{20}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			f := &fakeCompactHasher{fakeHasher: fakeHasher{id: 1}, stored: tt.stored, byRev: tt.byRev}
			c := NewCompactChecker(zap.New(core), f)
			got := c.CompactHashCheck(context.Background())
			if !slices.Equal(got, tt.want) || !slices.Equal(f.alarms, tt.want) {
				t.Errorf("alarmed %v (raised %v), want %v", got, f.alarms, tt.want)
			}
			if !slices.Equal(f.asked, tt.wantAsked) {
				t.Errorf("peers asked at %v, want %v", f.asked, tt.wantAsked)
			}
			if c.latestRevisionChecked != tt.checked {
				t.Errorf("latest revision checked %d, want %d", c.latestRevisionChecked, tt.checked)
			}
			if tt.wantLog != "" && logs.FilterMessage(tt.wantLog).Len() == 0 {
				t.Errorf("no %q logged: %v", tt.wantLog, logs.All())
			}
		})
	}
}

// A revision checked on the whole cluster is not asked again; a newer
// compaction's is.
func TestCompactHashCheckSkipsChecked(t *testing.T) {
	f := &fakeCompactHasher{fakeHasher: fakeHasher{id: 1}, stored: []KeyValueHash{{Hash: 2, Revision: 20, CompactRevision: 10}},
		byRev: map[int64][]PeerHash{20: {peer(2, 25, 10, 2)}, 30: {peer(2, 35, 20, 3)}}}
	c := NewCompactChecker(zap.NewNop(), f)
	c.CompactHashCheck(context.Background())
	c.CompactHashCheck(context.Background())
	if !slices.Equal(f.asked, []int64{20}) {
		t.Fatalf("asked %v, want [20] once", f.asked)
	}
	f.stored = append(f.stored, KeyValueHash{Hash: 3, Revision: 30, CompactRevision: 20})
	c.CompactHashCheck(context.Background())
	if !slices.Equal(f.asked, []int64{20, 30}) {
		t.Fatalf("asked %v, want [20 30]", f.asked)
	}
}
