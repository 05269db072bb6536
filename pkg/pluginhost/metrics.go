package pluginhost

import "github.com/prometheus/client_golang/prometheus"

// metrics are per plugin: calls by result (accept, reject, abstain, allow,
// deny, failure), their latency, cache hits, restarts and whether the
// plugin is up.
type metrics struct {
	calls    *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	hits     *prometheus.CounterVec
	restarts *prometheus.CounterVec
	up       *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvd", Subsystem: "auth_plugin", Name: "calls_total",
			Help: "Calls to auth plugins by plugin, kind and result (accept, reject, abstain, allow, deny, failure).",
		}, []string{"plugin", "kind", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "kvd", Subsystem: "auth_plugin", Name: "call_duration_seconds",
			Help:    "Latency of calls to auth plugins (cache hits excluded).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}, []string{"plugin", "kind"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvd", Subsystem: "auth_plugin", Name: "cache_hits_total",
			Help: "Decisions answered from the plugin's cache without a call.",
		}, []string{"plugin", "kind"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "kvd", Subsystem: "auth_plugin", Name: "restarts_total",
			Help: "Attempts to restart an auth plugin that exited or stopped answering.",
		}, []string{"plugin"}),
		up: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "kvd", Subsystem: "auth_plugin", Name: "up",
			Help: "1 while the auth plugin's process is running and handshaken.",
		}, []string{"plugin"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.calls, m.latency, m.hits, m.restarts, m.up} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
