// Package linearizability is a porcupine model of the etcd KV API on a
// handful of keys, for checking histories recorded against a cluster.
//
// Every operation touches one key, so histories are partitioned by key and
// each partition's state is one key's: whether it exists, its value, its
// mod revision, and the highest store revision any operation linearized so
// far has shown. Besides values, the model checks revisions against the
// linearization order: a write that changes the key gets a revision above
// every revision seen before it, and a read's header revision is never
// below one seen before it.
package linearizability

import (
	"fmt"
	"math"
	"sort"

	"github.com/anishathalye/porcupine"
)

// Kind names an operation.
type Kind int

// Operations the model knows.
const (
	Get Kind = iota
	Put
	Delete
	// CompareAndPut is a txn: if the key's value equals Expect, put Value.
	CompareAndPut
)

func (k Kind) String() string {
	switch k {
	case Get:
		return "get"
	case Put:
		return "put"
	case Delete:
		return "delete"
	case CompareAndPut:
		return "cas"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Input is an operation's request.
type Input struct {
	Kind   Kind
	Key    string
	Value  string // Put, CompareAndPut
	Expect string // CompareAndPut
}

// Output is an operation's response. A write whose outcome is unknown (an
// error or timeout: it may or may not have been applied) has Unknown set
// and nothing else, and its operation should return at Infinity.
type Output struct {
	Unknown bool
	// Rev is the response header's revision.
	Rev int64
	// Get: whether the key exists, its value and mod revision.
	Exists bool
	Value  string
	ModRev int64
	// Delete: keys deleted (0 or 1).
	Deleted int64
	// CompareAndPut: whether the compare held.
	Succeeded bool
}

// Infinity is the return time to give an operation whose outcome is unknown:
// it may then be linearized anywhere after its call, including never being
// observed.
const Infinity = int64(math.MaxInt64)

// state is one key's state. modRev is 0 for a missing key and -1 when the
// key was last written by a write of unknown outcome, whose revision is
// learnt from the next read that sees it. That revision lies in
// (unknownAfter, unknownBy]: after every revision observed before the
// write, and at or before the first revision of an operation that observed
// its value (a failed compare-and-put, say; 0 while none did).
type state struct {
	exists       bool
	value        string
	modRev       int64
	lastRev      int64
	unknownAfter int64
	unknownBy    int64
}

// Model is the porcupine model, partitioned by key.
var Model = porcupine.Model{
	Partition: partitionByKey,
	Init:      func() interface{} { return state{} },
	Step: func(s, in, out interface{}) (bool, interface{}) {
		return step(s.(state), in.(Input), out.(Output))
	},
	DescribeOperation: describe,
	DescribeState: func(s interface{}) string {
		st := s.(state)
		if !st.exists {
			return fmt.Sprintf("<none> (last rev %d)", st.lastRev)
		}
		return fmt.Sprintf("%q @%d (last rev %d)", st.value, st.modRev, st.lastRev)
	},
}

func step(s state, in Input, out Output) (bool, interface{}) {
	if out.Unknown {
		return true, applyUnknown(s, in)
	}
	switch in.Kind {
	case Get:
		if out.Rev < s.lastRev || out.Exists != s.exists {
			return false, s
		}
		if !out.Exists {
			s.lastRev = out.Rev
			return true, s
		}
		if out.Value != s.value || (s.modRev >= 0 && out.ModRev != s.modRev) || out.ModRev > out.Rev {
			return false, s
		}
		if s.modRev < 0 && (out.ModRev <= s.unknownAfter || (s.unknownBy > 0 && out.ModRev > s.unknownBy)) {
			return false, s
		}
		s.modRev, s.unknownAfter, s.unknownBy = out.ModRev, 0, 0
		s.lastRev = out.Rev
		return true, s
	case Put:
		if out.Rev <= s.lastRev {
			return false, s
		}
		return true, state{exists: true, value: in.Value, modRev: out.Rev, lastRev: out.Rev}
	case Delete:
		if !s.exists {
			if out.Deleted != 0 || out.Rev < s.lastRev {
				return false, s
			}
			s.lastRev = out.Rev
			return true, s
		}
		if out.Deleted != 1 || out.Rev <= s.lastRev {
			return false, s
		}
		return true, state{lastRev: out.Rev}
	case CompareAndPut:
		holds := s.exists && s.value == in.Expect
		if out.Succeeded != holds {
			return false, s
		}
		if !holds {
			if out.Rev < s.lastRev {
				return false, s
			}
			if s.exists && s.modRev < 0 && s.unknownBy == 0 {
				// It saw the unknown write's value: that write's
				// revision is at most this one.
				s.unknownBy = out.Rev
			}
			s.lastRev = out.Rev
			return true, s
		}
		if out.Rev <= s.lastRev {
			return false, s
		}
		return true, state{exists: true, value: in.Value, modRev: out.Rev, lastRev: out.Rev}
	}
	return false, s
}

// applyUnknown is the state after a write of unknown outcome that took
// effect; porcupine covers "never took effect" by linearizing it last.
func applyUnknown(s state, in Input) state {
	switch in.Kind {
	case Put:
		return state{exists: true, value: in.Value, modRev: -1, lastRev: s.lastRev, unknownAfter: s.lastRev}
	case Delete:
		return state{lastRev: s.lastRev}
	case CompareAndPut:
		if s.exists && s.value == in.Expect {
			return state{exists: true, value: in.Value, modRev: -1, lastRev: s.lastRev, unknownAfter: s.lastRev}
		}
	}
	return s
}

func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(Input).Key
		byKey[k] = append(byKey[k], op)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([][]porcupine.Operation, 0, len(keys))
	for _, k := range keys {
		out = append(out, byKey[k])
	}
	return out
}

func describe(in, out interface{}) string {
	i, o := in.(Input), out.(Output)
	var req string
	switch i.Kind {
	case Get, Delete:
		req = fmt.Sprintf("%s(%s)", i.Kind, i.Key)
	case Put:
		req = fmt.Sprintf("put(%s, %q)", i.Key, i.Value)
	case CompareAndPut:
		req = fmt.Sprintf("cas(%s, %q -> %q)", i.Key, i.Expect, i.Value)
	}
	if o.Unknown {
		return req + " -> unknown"
	}
	switch i.Kind {
	case Get:
		if !o.Exists {
			return fmt.Sprintf("%s -> <none> (rev %d)", req, o.Rev)
		}
		return fmt.Sprintf("%s -> %q @%d (rev %d)", req, o.Value, o.ModRev, o.Rev)
	case Delete:
		return fmt.Sprintf("%s -> deleted %d (rev %d)", req, o.Deleted, o.Rev)
	case CompareAndPut:
		return fmt.Sprintf("%s -> %v (rev %d)", req, o.Succeeded, o.Rev)
	}
	return fmt.Sprintf("%s -> rev %d", req, o.Rev)
}
