package corruptcheck

import (
	"context"
	"errors"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

type fakeHasher struct {
	id      uint64
	hashes  []KeyValueHash // successive local hashes
	revs    []int64
	peers   []PeerHash
	readErr error
	alarms  []uint64
	askedAt int64
}

func (f *fakeHasher) MemberID() uint64 { return f.id }

func (f *fakeHasher) HashByRev(int64) (KeyValueHash, int64, error) {
	h, r := f.hashes[0], f.revs[0]
	if len(f.hashes) > 1 {
		f.hashes, f.revs = f.hashes[1:], f.revs[1:]
	}
	return h, r, nil
}

func (f *fakeHasher) PeerHashByRev(_ context.Context, rev int64) []PeerHash {
	f.askedAt = rev
	return f.peers
}

func (f *fakeHasher) LinearizableReadNotify(context.Context) error { return f.readErr }

func (f *fakeHasher) TriggerCorruptAlarm(_ context.Context, id uint64) {
	f.alarms = append(f.alarms, id)
}

func peer(id uint64, rev, compact int64, hash uint32) PeerHash {
	return PeerHash{ID: id, Resp: &pb.HashKVResponse{Header: &pb.ResponseHeader{Revision: rev, MemberId: id}, Hash: hash, CompactRevision: compact}}
}

func TestPeriodicCheck(t *testing.T) {
	leader := KeyValueHash{Hash: 100, Revision: 10, CompactRevision: 5}
	tests := []struct {
		name    string
		hashes  []KeyValueHash
		revs    []int64
		peers   []PeerHash
		want    uint64
		wantLog string
	}{
		{name: "all equal", peers: []PeerHash{peer(2, 10, 5, 100), peer(3, 9, 5, 100)}},
		{name: "follower hash differs", peers: []PeerHash{peer(2, 10, 5, 100), peer(3, 10, 5, 7)}, want: 3,
			wantLog: "same compact revision then hashes must match"},
		{name: "first of two diverged followers only", peers: []PeerHash{peer(2, 10, 5, 8), peer(3, 10, 5, 7)}, want: 2,
			wantLog: "same compact revision then hashes must match"},
		{name: "follower compacted differently, other hash: not compared", peers: []PeerHash{peer(2, 10, 4, 7)}},
		{name: "follower ahead of the leader", peers: []PeerHash{peer(2, 11, 5, 100)}, want: 2,
			wantLog: "revision from follower must be less than or equal to leader's"},
		{name: "follower compacted past the leader", peers: []PeerHash{peer(2, 10, 6, 100)}, want: 2,
			wantLog: "compact revision from follower must be less than or equal to leader's"},
		{name: "unreachable peer skipped", peers: []PeerHash{{ID: 2, Err: errors.New("down")}, peer(3, 10, 5, 100)}},
		{name: "leader's own hash changed at one revision",
			hashes: []KeyValueHash{leader, {Hash: 101, Revision: 10, CompactRevision: 5}}, revs: []int64{10, 10},
			peers: []PeerHash{peer(2, 10, 5, 7)}, want: 1, wantLog: "found hash mismatch"},
		{name: "leader moved on between hashes: no self mismatch",
			hashes: []KeyValueHash{leader, {Hash: 101, Revision: 11, CompactRevision: 5}}, revs: []int64{10, 11},
			peers: []PeerHash{peer(2, 11, 5, 100)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			core, logs := observer.New(zap.InfoLevel)
			f := &fakeHasher{id: 1, hashes: tt.hashes, revs: tt.revs, peers: tt.peers}
			if f.hashes == nil {
				f.hashes, f.revs = []KeyValueHash{leader}, []int64{10}
			}
			got, err := New(zap.New(core), f).PeriodicCheck(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if f.askedAt != 10 {
				t.Errorf("peers asked at revision %d, want 10", f.askedAt)
			}
			if got != tt.want {
				t.Errorf("alarmed member %x, want %x", got, tt.want)
			}
			if tt.want == 0 && len(f.alarms) != 0 || tt.want != 0 && (len(f.alarms) != 1 || f.alarms[0] != tt.want) {
				t.Errorf("alarms raised %v, want [%x]", f.alarms, tt.want)
			}
			if tt.wantLog != "" && logs.FilterMessage(tt.wantLog).Len() == 0 {
				t.Errorf("no %q logged; logs: %v", tt.wantLog, logs.All())
			}
			if logs.FilterMessage("finished peer corruption check").Len() != 1 {
				t.Errorf("no summary logged")
			}
		})
	}
}

func TestPeriodicCheckReadIndexFails(t *testing.T) {
	f := &fakeHasher{id: 1, hashes: []KeyValueHash{{Hash: 1, Revision: 3}}, revs: []int64{3},
		peers: []PeerHash{peer(2, 3, 0, 2)}, readErr: errors.New("no leader")}
	if _, err := New(zap.NewNop(), f).PeriodicCheck(context.Background()); err == nil {
		t.Fatal("want the read index error")
	}
	if len(f.alarms) != 0 {
		t.Fatalf("alarm raised without a read index: %v", f.alarms)
	}
}
