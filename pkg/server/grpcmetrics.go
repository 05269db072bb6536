package server

import (
	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvd-dev/kvd/pkg/config"
)

// grpcMetrics are the client gRPC server's metrics, from the middleware
// etcd v3.7.3 uses (v3rpc/grpc.go): grpc_server_started_total,
// grpc_server_handled_total, grpc_server_msg_received_total and
// grpc_server_msg_sent_total, by service and method (and code for
// handled); with metrics: extensive also grpc_server_handling_seconds.
type grpcMetrics struct {
	server *grpcprom.ServerMetrics
}

// clientServices are the services the client gRPC server registers (api's
// Register and the health service); their methods' counters start at 0,
// as etcd's InitializeMetrics makes them, so the families are there before
// any traffic.
var clientServices = []*grpc.ServiceDesc{
	&pb.KV_ServiceDesc, &pb.Watch_ServiceDesc, &pb.Lease_ServiceDesc, &pb.Cluster_ServiceDesc,
	&pb.Maintenance_ServiceDesc, &pb.Auth_ServiceDesc, &healthpb.Health_ServiceDesc,
}

func newGRPCMetrics(c *config.Config) *grpcMetrics {
	var opts []grpcprom.ServerMetricsOption
	if c.Metrics == config.MetricsExtensive {
		// The middleware's default buckets, as etcd.
		opts = append(opts, grpcprom.WithServerHandlingTimeHistogram())
	}
	m := &grpcMetrics{server: grpcprom.NewServerMetrics(opts...)}
	m.server.InitializeMetrics(serviceInfos(clientServices))
	return m
}

// grpcMetricsOptions are the client gRPC server's options that count its
// calls. serveClients puts them first, so the counting interceptors wrap
// the API's (a call the API refuses is counted with its code, as in etcd,
// whose metrics interceptor runs before its own).
func grpcMetricsOptions(mt *Metrics) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(mt.grpc.server.UnaryServerInterceptor()),
		grpc.ChainStreamInterceptor(mt.grpc.server.StreamServerInterceptor()),
	}
}

// serviceInfos lists services as grpc.Server.GetServiceInfo would once
// they are registered.
type serviceInfos []*grpc.ServiceDesc

func (s serviceInfos) GetServiceInfo() map[string]grpc.ServiceInfo {
	out := make(map[string]grpc.ServiceInfo, len(s))
	for _, d := range s {
		var ms []grpc.MethodInfo
		for _, m := range d.Methods {
			ms = append(ms, grpc.MethodInfo{Name: m.MethodName})
		}
		for _, st := range d.Streams {
			ms = append(ms, grpc.MethodInfo{Name: st.StreamName, IsClientStream: st.ClientStreams, IsServerStream: st.ServerStreams})
		}
		out[d.ServiceName] = grpc.ServiceInfo{Methods: ms, Metadata: d.Metadata}
	}
	return out
}
