package raftnode

import "time"

// heartbeatWatch is etcd's timeoutDetector for leader heartbeats: a
// heartbeat sent to a peer more than max after the previous one to it is a
// send failure (etcd_server_heartbeat_send_failures_total): the leader's
// raft loop fell behind, and followers may soon start an election. It is
// used on the raft driver goroutine only.
type heartbeatWatch struct {
	max  time.Duration
	last map[uint64]time.Time // peer -> when the last heartbeat to it left
}

func newHeartbeatWatch(max time.Duration) heartbeatWatch {
	return heartbeatWatch{max: max, last: make(map[uint64]time.Time)}
}

// sent records a heartbeat to peer at now and reports whether it was late,
// and by how much past max.
func (w *heartbeatWatch) sent(peer uint64, now time.Time) (late bool, by time.Duration) {
	prev, ok := w.last[peer]
	w.last[peer] = now
	if !ok {
		return false, 0
	}
	if by = now.Sub(prev) - w.max; by > 0 {
		return true, by
	}
	return false, 0
}

// reset forgets every peer, as etcd does on a leader change: the first
// heartbeat of a new term is never late.
func (w *heartbeatWatch) reset() { clear(w.last) }
