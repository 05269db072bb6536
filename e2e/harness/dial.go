package harness

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// DialOptions are the gRPC options of every test client: reconnect within
// 50-250 ms of a member coming back. gRPC's default backoff starts at 1 s and
// grows by 1.6× per failed attempt, so a client made before its member
// listens, or kept across a restart, would wait seconds for a member that
// is already serving; the tests would spend that time idle. A reconnect
// is a reconnect: what the tests check does not depend on when it happens.
var DialOptions = []grpc.DialOption{
	grpc.WithConnectParams(grpc.ConnectParams{
		Backoff: backoff.Config{
			BaseDelay:  50 * time.Millisecond,
			Multiplier: 1.6,
			Jitter:     0.2,
			MaxDelay:   250 * time.Millisecond,
		},
		MinConnectTimeout: 5 * time.Second,
	}),
}
