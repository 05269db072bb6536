package harness

import (
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// ClientConfig is the configuration of every test client of endpoints: a
// 5 s dial timeout, no client log, and a reconnect within 50-250 ms of a
// member coming back. gRPC's default backoff starts at 1 s and grows by
// 1.6× per failed attempt, so a client made before its member listens, or
// kept across a restart, would wait seconds for a member that is already
// serving; the tests would spend that time idle. What the tests check does
// not depend on when a reconnect happens. Callers add credentials or TLS.
func ClientConfig(endpoints ...string) clientv3.Config {
	return clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff: backoff.Config{
					BaseDelay:  50 * time.Millisecond,
					Multiplier: 1.6,
					Jitter:     0.2,
					MaxDelay:   250 * time.Millisecond,
				},
				MinConnectTimeout: 5 * time.Second,
			}),
		},
	}
}
