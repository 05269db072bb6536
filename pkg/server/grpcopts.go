package server

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/kvd-dev/kvd/pkg/config"
)

// clientStreamWorkers is how many long-lived goroutines serve the client
// server's streams. Without them grpc-go starts a goroutine per call whose
// stack grows (copied) on every call; a worker keeps its grown stack. A
// call that finds no idle worker still gets a goroutine of its own, so this
// is not a limit. 256 covers the calls in flight from hundreds of clients:
// scripts/bench-cpu.sh A/B, 5 rounds, server CPU per 1-key range 0.85-0.94x
// of a goroutine per call, puts unchanged; 64 and 1024 did no better.
const clientStreamWorkers = 256

// clientStreamOptions are the client gRPC server's stream limit and
// keepalive settings, as etcd sets them (v3rpc/grpc.go, embed/etcd.go):
// max-concurrent-streams per connection; grpc-keepalive-min-time, when
// positive, as the shortest ping interval a client may use (pinging faster,
// or pinging with no active stream, gets GOAWAY "too_many_pings"; when 0,
// gRPC's own policy, 5 minutes, applies); and grpc-keepalive-interval and
// grpc-keepalive-timeout, when both are positive, as the server's pings to
// idle connections and how long it waits for the answer before closing.
func clientStreamOptions(c *config.Config) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxConcurrentStreams(uint32(c.MaxConcurrentStreams)),
		grpc.NumStreamWorkers(clientStreamWorkers),
	}
	if c.GRPCKeepAliveMinTime > 0 {
		opts = append(opts, grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             c.GRPCKeepAliveMinTime.Std(),
			PermitWithoutStream: false,
		}))
	}
	if c.GRPCKeepAliveInterval > 0 && c.GRPCKeepAliveTimeout > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{
			Time:    c.GRPCKeepAliveInterval.Std(),
			Timeout: c.GRPCKeepAliveTimeout.Std(),
		}))
	}
	return opts
}
