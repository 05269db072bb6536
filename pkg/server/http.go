package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kvd-dev/kvd/pkg/api"
	"github.com/kvd-dev/kvd/pkg/probes"
)

// clusterVersion is the cluster version etcd v3.7 members agree on.
const clusterVersion = "3.7.0"

// httpHandler serves etcd's plain HTTP endpoints on the client port:
// /version, /metrics, the probes (/health, /livez, /readyz) and
// /debug/pprof with enable-pprof.
func httpHandler(s *api.Server, mt *Metrics, pprofOn bool) http.Handler {
	mux := http.NewServeMux()
	handleMetricsAndHealth(mux, s, mt)
	if pprofOn {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"etcdserver": Version, "etcdcluster": clusterVersion})
	})
	return mux
}

// metricsHandler serves what etcd serves on listen-metrics-urls: /metrics,
// /health, /livez and /readyz.
func metricsHandler(s *api.Server, mt *Metrics) http.Handler {
	mux := http.NewServeMux()
	handleMetricsAndHealth(mux, s, mt)
	return mux
}

// handleMetricsAndHealth registers /metrics and the probes etcd serves on
// both the client and the metrics listeners (pkg/probes). The probes of both
// listeners count on the same health metrics.
func handleMetricsAndHealth(mux *http.ServeMux, s *api.Server, mt *Metrics) {
	mux.Handle("/metrics", promhttp.HandlerFor(mt.Registry, promhttp.HandlerOpts{}))
	pr, err := probes.New(probeMember{s}, probes.Options{Logger: s.Logger, Registerer: mt.Registry})
	if err != nil {
		// Only a metric of the same name and another kind could be in the way.
		panic(err)
	}
	pr.Install(mux)
}

// probeMember is what the probes ask of the member.
type probeMember struct{ s *api.Server }

func (m probeMember) Alarms() []*pb.AlarmMember { return m.s.Alarms.Get(pb.AlarmType_NONE) }
func (m probeMember) Leader() uint64            { return m.s.Raft.Leader() }
func (m probeMember) IsLearner() bool           { return m.s.Cluster.IsLearner(m.s.Cluster.Self()) }
func (m probeMember) Read(ctx context.Context, serializable bool) error {
	return m.s.ProbeRead(ctx, serializable)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
