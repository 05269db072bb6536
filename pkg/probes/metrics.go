package probes

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are etcd's: /health counts its answers; each /livez and /readyz
// check, also through its sub-path, sets a gauge and counts its outcome.
type metrics struct {
	healthSuccess prometheus.Counter     // etcd_server_health_success
	healthFailed  prometheus.Counter     // etcd_server_health_failures
	checkGauge    *prometheus.GaugeVec   // etcd_server_healthcheck{type,name}: 1 passed, 0 failed
	checkTotal    *prometheus.CounterVec // etcd_server_healthchecks_total{type,name,status}
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		healthSuccess: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "health_success",
			Help: "The total number of successful health checks"}),
		healthFailed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "health_failures",
			Help: "The total number of failed health checks"}),
		checkGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "server", Name: "healthcheck",
			Help: "The result of each kind of healthcheck."}, []string{"type", "name"}),
		checkTotal: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "healthchecks_total",
			Help: "The total number of each kind of healthcheck."}, []string{"type", "name", "status"}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.healthSuccess, err = register(reg, m.healthSuccess); err != nil {
		return nil, err
	}
	if m.healthFailed, err = register(reg, m.healthFailed); err != nil {
		return nil, err
	}
	if m.checkGauge, err = register(reg, m.checkGauge); err != nil {
		return nil, err
	}
	if m.checkTotal, err = register(reg, m.checkTotal); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, or returns the same collector registered before.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if prev, ok := are.ExistingCollector.(C); ok {
			return prev, nil
		}
	}
	return c, fmt.Errorf("register health metrics: %w", err)
}

func (m *metrics) record(kind, name string, ok bool) {
	val, status := 0.0, "error"
	if ok {
		val, status = 1, "success"
	}
	m.checkGauge.WithLabelValues(kind, name).Set(val)
	m.checkTotal.WithLabelValues(kind, name, status).Inc()
}
