package membership

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// The expected IDs are what etcd v3.7.3 prints for the same flags
// (etcd --name default with its default peer URL and token).
func TestIDsAreEtcds(t *testing.T) {
	id := MemberID([]string{"http://localhost:2380"}, "etcd-cluster", nil)
	if id != 0x8e9e05c52164694d {
		t.Fatalf("member id = %x, want 8e9e05c52164694d", id)
	}
	if cid := ClusterID([]uint64{id}); cid != 0xcdf818194e3a8c32 {
		t.Fatalf("cluster id = %x, want cdf818194e3a8c32", cid)
	}
	// Order of peer URLs does not matter; the time does.
	a := MemberID([]string{"http://b:2", "http://a:1"}, "t", nil)
	b := MemberID([]string{"http://a:1", "http://b:2"}, "t", nil)
	now := time.Unix(1700000000, 0)
	c := MemberID([]string{"http://a:1", "http://b:2"}, "t", &now)
	if a != b || a == c {
		t.Fatalf("ids %x %x %x", a, b, c)
	}
	if ClusterID([]uint64{2, 1}) != ClusterID([]uint64{1, 2}) {
		t.Fatal("cluster ID depends on member order")
	}
}

func TestChangesFollowEtcdsRules(t *testing.T) {
	c := New(9, 1)
	var seen []Change
	c.OnChange(func(ch Change) { seen = append(seen, ch) })
	m1 := Member{ID: 1, Name: "a", PeerURLs: []string{"http://a:2380"}}
	m2 := Member{ID: 2, PeerURLs: []string{"http://b:2380"}}
	m3 := Member{ID: 3, PeerURLs: []string{"http://c:2380"}}
	for _, step := range []struct {
		kind ChangeKind
		m    Member
		want error
	}{
		{AddMember, m1, nil},
		{AddMember, m1, ErrIDExists},
		{AddLearner, Member{ID: 5, PeerURLs: m1.PeerURLs}, ErrPeerURLExists},
		{AddLearner, m2, nil},
		{AddLearner, m3, ErrTooManyLearners},
		{Promote, m1, ErrMemberNotLearner},
		{Promote, m2, nil},
		{Promote, Member{ID: 7}, ErrIDNotFound},
		{UpdateMember, Member{ID: 2, PeerURLs: m1.PeerURLs}, ErrPeerURLExists},
		{UpdateMember, Member{ID: 2, PeerURLs: []string{"http://b2:2380"}}, nil},
		{RemoveMember, m2, nil},
		{RemoveMember, m2, ErrIDRemoved},
		{AddMember, m2, ErrIDRemoved},
	} {
		err := c.Validate(step.kind, step.m)
		if !errors.Is(err, step.want) || (err == nil) != (step.want == nil) {
			t.Fatalf("validate %v %x: %v, want %v", step.kind, step.m.ID, err, step.want)
		}
		if err == nil {
			c.Apply(step.kind, step.m)
		}
	}
	if got := c.Members(); len(got) != 1 || got[0].ID != 1 || got[0].Name != "a" {
		t.Fatalf("members %+v", got)
	}
	if !c.IsRemoved(2) || c.IsLearner(1) {
		t.Fatal("removed/learner wrong")
	}
	if len(seen) != 5 || !seen[4].Removed || seen[3].Member.PeerURLs[0] != "http://b2:2380" {
		t.Fatalf("changes seen: %+v", seen)
	}
	if _, ok := c.SetAttributes(2, "late", nil); ok {
		t.Fatal("attributes set on a removed member")
	}
	m, ok := c.SetAttributes(1, "a", []string{"http://a:2379"})
	if !ok || m.ClientURLs[0] != "http://a:2379" {
		t.Fatalf("set attributes: %+v %v", m, ok)
	}
}

// Records written for the list restore the same list.
func TestRecordsRoundTrip(t *testing.T) {
	c := New(9, 1)
	c.Apply(AddMember, Member{ID: 1, Name: "a", PeerURLs: []string{"http://a:1"}, ClientURLs: []string{"http://a:2"}})
	c.Apply(AddLearner, Member{ID: 0xffffffffffffffff, PeerURLs: []string{"http://b:1"}})
	c.Apply(AddMember, Member{ID: 3, PeerURLs: []string{"http://c:1"}})
	c.Apply(RemoveMember, Member{ID: 3})
	var l Loader
	for _, m := range c.Members() {
		if err := l.Add(MemberKey(m.ID), m.Marshal()); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Add(RemovedKey(3), nil); err != nil {
		t.Fatal(err)
	}
	if err := l.Add("zz", nil); err == nil {
		t.Fatal("unknown record accepted")
	}
	d := New(9, 1)
	l.RestoreInto(d)
	if got, want := d.Members(), c.Members(); len(got) != 2 || got[1].ID != want[1].ID || !got[1].IsLearner || got[0].ClientURLs[0] != "http://a:2" {
		t.Fatalf("restored %+v, want %+v", got, want)
	}
	if !d.IsRemoved(3) {
		t.Fatal("removed ID not restored")
	}
	// IDs: the members, learners included, the removed not.
	ids := d.IDs()
	slices.Sort(ids)
	if !slices.Equal(ids, []uint64{1, 0xffffffffffffffff}) {
		t.Fatalf("IDs() = %x, want 1 and the learner", ids)
	}
}

func TestHexID(t *testing.T) {
	for id, want := range map[uint64]string{0: "0", 0xa: "a", 0x8e9e05c52164694d: "8e9e05c52164694d", 1<<64 - 1: "ffffffffffffffff"} {
		if got := HexID(id); got != want {
			t.Errorf("HexID(%#x) = %q, want %q", id, got, want)
		}
	}
}
