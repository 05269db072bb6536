package server

import (
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/kvd-dev/kvd/pkg/config"
)

// clientStreamOptions are the client gRPC server's stream limit and
// keepalive settings, as etcd sets them (v3rpc/grpc.go, embed/etcd.go):
// max-concurrent-streams per connection; grpc-keepalive-min-time, when
// positive, as the shortest ping interval a client may use (pinging faster,
// or pinging with no active stream, gets GOAWAY "too_many_pings"; when 0,
// gRPC's own policy, 5 minutes, applies); and grpc-keepalive-interval and
// grpc-keepalive-timeout, when both are positive, as the server's pings to
// idle connections and how long it waits for the answer before closing.
func clientStreamOptions(c *config.Config) []grpc.ServerOption {
	opts := []grpc.ServerOption{grpc.MaxConcurrentStreams(uint32(c.MaxConcurrentStreams))}
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
