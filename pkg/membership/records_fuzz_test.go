package membership

import (
	"bytes"
	"slices"
	"testing"
	"unicode/utf8"
)

// FuzzLoader feeds a fuzzed member record (key and value, as read from the
// backend or a snapshot from a peer) to the Loader. It must take it or return
// an error, never panic; what it takes restores into a member list, and a
// member record decodes to a member that encodes and decodes to itself.
func FuzzLoader(f *testing.F) {
	m := Member{ID: 0x8e9e05c52164694d, Name: "n1", PeerURLs: []string{"http://127.0.0.1:2380"}, ClientURLs: []string{"http://127.0.0.1:2379"}}
	f.Add(MemberKey(m.ID), m.Marshal())
	l := Member{ID: 2, PeerURLs: []string{"https://10.0.0.2:2380"}, IsLearner: true}
	f.Add(MemberKey(l.ID), l.Marshal())
	f.Add(RemovedKey(3), []byte{})
	f.Add("r/zz", []byte{})
	f.Add("m/0000000000000001", []byte(`{"id":1e30,"peerURLs":null}`))
	f.Add("x", []byte("{}"))
	f.Fuzz(func(t *testing.T, key string, value []byte) {
		var ld Loader
		if err := ld.Add(key, value); err != nil {
			return
		}
		if ld.Empty() {
			t.Fatalf("record %q accepted but nothing loaded", key)
		}
		c := New(1, 1)
		var seen []Change
		c.OnChange(func(ch Change) { seen = append(seen, ch) })
		ld.RestoreInto(c)
		if len(seen) != 1 {
			t.Fatalf("restore of one record told %d changes", len(seen))
		}
		for _, m := range ld.members {
			if key != MemberKey(m.ID) {
				t.Fatalf("member %x accepted under key %q", m.ID, key)
			}
			if got, ok := c.Member(m.ID); !ok || got.ID != m.ID {
				t.Fatalf("restored list lacks member %x", m.ID)
			}
			if !utf8.Valid(value) {
				continue // encoding/json replaces invalid UTF-8
			}
			enc := m.Marshal()
			m2, err := Unmarshal(enc)
			if err != nil {
				t.Fatalf("re-encoded member %s does not decode: %v", enc, err)
			}
			if m2.ID != m.ID || m2.Name != m.Name || m2.IsLearner != m.IsLearner ||
				!slices.Equal(m2.PeerURLs, m.PeerURLs) || !slices.Equal(m2.ClientURLs, m.ClientURLs) {
				t.Fatalf("member changed in a round trip: %+v -> %s -> %+v", m, enc, m2)
			}
			if !bytes.Equal(m2.Marshal(), enc) {
				t.Fatalf("member encoding not stable: %s vs %s", enc, m2.Marshal())
			}
		}
		for _, id := range ld.removed {
			if key != RemovedKey(id) {
				t.Fatalf("removed ID %x accepted under key %q", id, key)
			}
			if !c.IsRemoved(id) {
				t.Fatalf("restored list lacks removed ID %x", id)
			}
		}
	})
}
