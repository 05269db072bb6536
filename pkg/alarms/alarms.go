// Package alarms is the replicated alarm set (etcd's v3alarm.AlarmStore):
// which member raised which alarm (NOSPACE, CORRUPT). Alarms change only by
// applying a raft entry (an AlarmRequest ACTIVATE or DEACTIVATE), so every
// member holds the same set; they are persisted in the backend's alarm bucket
// with the consistent index of that entry and reloaded at start and after a
// snapshot install.
package alarms

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/protobuf/proto"
)

// Writer stages alarm records in the batch that applies the entry
// (*mvcc.Batch).
type Writer interface {
	PutAlarm(key []byte)
	DeleteAlarm(key []byte)
}

type key struct {
	member uint64
	alarm  pb.AlarmType
}

// Store is the alarm set. Its methods are safe for concurrent use; only the
// applier changes it.
type Store struct {
	mu  sync.RWMutex
	set map[key]struct{}
	// noSpace and corrupt mirror whether any member has that alarm: the
	// applier asks on every request.
	noSpace atomic.Bool
	corrupt atomic.Bool
}

// New returns an empty set.
func New() *Store { return &Store{set: map[key]struct{}{}} }

// Key is the backend key of an alarm record: the marshaled AlarmMember, as
// etcd's schema stores it.
func Key(member uint64, at pb.AlarmType) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(&pb.AlarmMember{MemberID: member, Alarm: at})
	if err != nil {
		panic(fmt.Sprintf("alarms: marshal: %v", err))
	}
	return b
}

// Load replaces the set by the records records yields (mvcc.Store's
// AlarmRecords).
func (s *Store) Load(records func(fn func(key []byte) error) error) error {
	set := map[key]struct{}{}
	err := records(func(k []byte) error {
		m := &pb.AlarmMember{}
		if err := proto.Unmarshal(k, m); err != nil {
			return fmt.Errorf("decode alarm record %x: %w", k, err)
		}
		set[key{m.MemberID, m.Alarm}] = struct{}{}
		return nil
	})
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.set = set
	s.updateLocked()
	s.mu.Unlock()
	return nil
}

// Activate raises alarm at for member and stages its record in w. It returns
// the alarm, or nil for AlarmType_NONE (etcd ignores it). Raising an alarm
// already raised changes nothing and returns it again.
func (s *Store) Activate(w Writer, member uint64, at pb.AlarmType) *pb.AlarmMember {
	if at == pb.AlarmType_NONE {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{member, at}
	if _, ok := s.set[k]; !ok {
		s.set[k] = struct{}{}
		w.PutAlarm(Key(member, at))
		s.updateLocked()
	}
	return &pb.AlarmMember{MemberID: member, Alarm: at}
}

// Deactivate clears alarm at of member and stages the removal of its
// record; it returns the alarm cleared, or nil when it was not raised.
func (s *Store) Deactivate(w Writer, member uint64, at pb.AlarmType) *pb.AlarmMember {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{member, at}
	if _, ok := s.set[k]; !ok {
		return nil
	}
	delete(s.set, k)
	w.DeleteAlarm(Key(member, at))
	s.updateLocked()
	return &pb.AlarmMember{MemberID: member, Alarm: at}
}

// Get (nil-safe, as Has) lists the alarms of type at, or every alarm for AlarmType_NONE, by
// type then member ID.
func (s *Store) Get(at pb.AlarmType) []*pb.AlarmMember {
	if s == nil {
		return nil
	}
	s.mu.RLock()
	out := make([]*pb.AlarmMember, 0, len(s.set))
	for k := range s.set {
		if at == pb.AlarmType_NONE || k.alarm == at {
			out = append(out, &pb.AlarmMember{MemberID: k.member, Alarm: k.alarm})
		}
	}
	s.mu.RUnlock()
	slices.SortFunc(out, func(a, b *pb.AlarmMember) int {
		return cmp.Or(cmp.Compare(a.Alarm, b.Alarm), cmp.Compare(a.MemberID, b.MemberID))
	})
	return out
}

// Has reports whether member has raised alarm at.
func (s *Store) Has(member uint64, at pb.AlarmType) bool {
	if s == nil {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.set[key{member, at}]
	return ok
}

// NoSpace reports whether any member has raised NOSPACE.
func (s *Store) NoSpace() bool { return s != nil && s.noSpace.Load() }

// Corrupt reports whether any member has raised CORRUPT.
func (s *Store) Corrupt() bool { return s != nil && s.corrupt.Load() }

func (s *Store) updateLocked() {
	var nospace, corrupt bool
	for k := range s.set {
		switch k.alarm {
		case pb.AlarmType_NOSPACE:
			nospace = true
		case pb.AlarmType_CORRUPT:
			corrupt = true
		}
	}
	s.noSpace.Store(nospace)
	s.corrupt.Store(corrupt)
}
