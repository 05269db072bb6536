package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kvd-dev/kvd/pkg/api"
)

// clusterVersion is the cluster version etcd v3.7 members agree on.
const clusterVersion = "3.7.0"

// httpHandler serves etcd's plain HTTP endpoints on the client port:
// /version, /health (a linearizable read must succeed, as etcd checks),
// /livez, /readyz and /metrics; and /debug/pprof with enable-pprof.
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
// both the client and the metrics listeners.
func handleMetricsAndHealth(mux *http.ServeMux, s *api.Server, mt *Metrics) {
	mux.Handle("/metrics", promhttp.HandlerFor(mt.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := s.Health(ctx); err != nil {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"health": "false", "reason": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"health": "true", "reason": ""})
	})
	ok := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	}
	mux.HandleFunc("/livez", ok)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		if err := s.Health(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		ok(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
