package raftnode

import "context"

// AdvanceTicks ticks raft n times at once (etcd's advanceTicks): a member
// that starts among connected peers then needs only the rest of an
// election timeout without a leader's message before it campaigns.
func (n *Node) AdvanceTicks(ctx context.Context, ticks int) error {
	return n.do(ctx, func() {
		for i := 0; i < ticks; i++ {
			n.rn.Tick()
		}
	})
}
