package membership

import (
	"fmt"
	"strconv"
	"strings"
)

// Records of the member list in the backend: "m/<id hex>" holds a member's
// JSON, "r/<id hex>" marks a removed ID (its value is empty).
const (
	memberPrefix  = "m/"
	removedPrefix = "r/"
)

// MemberKey is the record key of member id.
func MemberKey(id uint64) string { return memberPrefix + fmt.Sprintf("%016x", id) }

// RemovedKey is the record key marking id removed.
func RemovedKey(id uint64) string { return removedPrefix + fmt.Sprintf("%016x", id) }

// Loader collects records read from a backend; Done restores them.
type Loader struct {
	members []Member
	removed []uint64
}

// Add takes one record.
func (l *Loader) Add(key string, value []byte) error {
	switch {
	case strings.HasPrefix(key, memberPrefix):
		m, err := Unmarshal(value)
		if err != nil {
			return fmt.Errorf("member record %s: %w", key, err)
		}
		// The key names the member: a record under another member's key (or
		// a key that is not one MemberKey makes) is damage, which restoring
		// would turn into a member listed under the wrong ID.
		if key != MemberKey(m.ID) {
			return fmt.Errorf("member record %s holds member %s", key, HexID(m.ID))
		}
		l.members = append(l.members, m)
	case strings.HasPrefix(key, removedPrefix):
		id, err := strconv.ParseUint(key[len(removedPrefix):], 16, 64)
		if err != nil {
			return fmt.Errorf("removed-member record %s: %w", key, err)
		}
		if key != RemovedKey(id) {
			return fmt.Errorf("removed-member record %s: not a key RemovedKey makes", key)
		}
		l.removed = append(l.removed, id)
	default:
		return fmt.Errorf("unknown member record %q", key)
	}
	return nil
}

// Empty reports whether no record was read.
func (l *Loader) Empty() bool { return len(l.members) == 0 && len(l.removed) == 0 }

// Members are the member records read, in the order read.
func (l *Loader) Members() []Member { return l.members }

// Removed are the removed IDs read, in the order read.
func (l *Loader) Removed() []uint64 { return l.removed }

// RestoreInto replaces c's list with the records read.
func (l *Loader) RestoreInto(c *Cluster) { c.Restore(l.members, l.removed) }
