package server

import (
	"context"
	"testing"

	"go.uber.org/zap"
)

// initial-election-tick-advance: with it, a multi-member member advances
// election-ticks - 2 once more than one peer is connected; without it, or
// alone, none.
func TestInitialElectionTickAdvance(t *testing.T) {
	for _, tc := range []struct {
		name    string
		enabled bool
		members int
		want    int
	}{{"on", true, 3, 8}, {"off", false, 3, 0}, {"single member", true, 1, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			polls, advanced := 0, 0
			got := tickAdvancer{
				enabled: tc.enabled, members: tc.members, electionTicks: 10, lg: zap.NewNop(),
				// Peers come up on the third poll.
				activePeers: func() int { polls++; return min(polls-1, 2) },
				advance:     func(_ context.Context, n int) error { advanced += n; return nil },
			}.run(context.Background())
			if got != tc.want || advanced != tc.want {
				t.Fatalf("advanced %d (reported %d), want %d", advanced, got, tc.want)
			}
		})
	}
}
