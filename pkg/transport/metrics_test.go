package transport

import (
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
)

// A stream's peer is probed as soon as the stream opens, and the bytes of
// the frames one member sends are the bytes the other receives from it.
func TestProbeAndReceivedBytes(t *testing.T) {
	var probes atomic.Int64
	var rttTo atomic.Uint64
	a := startMember(t, 1, 7, "", func(c *Config) {
		c.RTT = func(id uint64, d time.Duration) {
			if d <= 0 {
				t.Errorf("RTT to %x: %v", id, d)
			}
			rttTo.Store(id)
			probes.Add(1)
		}
	})
	b := startMember(t, 2, 7, "", nil)
	connect(t, a, b)
	waitFor(t, "a probe of b", func() bool { return probes.Load() > 0 })
	if got := rttTo.Load(); got != 2 {
		t.Errorf("RTT reported for %x, want 2", got)
	}
	a.Send([]*raftpb.Message{msg(1, 2, 1, 0), msg(1, 2, 2, 0)})
	waitFor(t, "delivery", func() bool { return len(b.Received()) == 2 })
	waitFor(t, "bytes counted", func() bool {
		return b.Health(1).ReceivedBytes > 0 && b.Health(1).ReceivedBytes == a.Health(2).SentBytes
	})
}
