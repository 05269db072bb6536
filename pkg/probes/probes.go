// Package probes serves etcd v3.7.3's health endpoints (etcdhttp's
// health.go): /health, the JSON answer etcdctl and load balancers read,
// and /livez and /readyz, named checks in the text format of Kubernetes'
// probes, with a sub-path per check. The answers, status codes, query
// parameters and metrics are etcd's; the member is behind a small interface
// so the checks are tested without one.
package probes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
)

// Member is what the probes ask of the member. Its methods are called from
// HTTP handlers, concurrently.
type Member interface {
	// Alarms lists the raised alarms, every member's.
	Alarms() []*pb.AlarmMember
	// Leader is the ID of the leader this member knows, 0 for none.
	Leader() uint64
	// Read reads as etcd's health checks do (a Range of one key, keys
	// only, as root): from the local store when serializable, otherwise
	// after a linearizable wait, bounded by the member's request timeout.
	// The error's text is what the probes report, so it is etcd's server
	// error ("etcdserver: request timed out"), not a gRPC status.
	Read(ctx context.Context, serializable bool) error
	// IsLearner reports whether this member is a learner.
	IsLearner() bool
}

// Options are the probes' logger and metrics registry.
type Options struct {
	// Logger gets etcd's messages for failed probes; nil: none.
	Logger *zap.Logger
	// Registerer gets etcd's health metrics. Probes made on the same
	// registry (one per listener) share the collectors registered first.
	// nil: the metrics are kept but not exported.
	Registerer prometheus.Registerer
}

// Probes are the health endpoints of one member.
type Probes struct {
	m       Member
	lg      *zap.Logger
	metrics *metrics
	livez   checkSet
	readyz  checkSet
}

// New returns the probes of m.
func New(m Member, opts Options) (*Probes, error) {
	lg := opts.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	mt, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	p := &Probes{m: m, lg: lg, metrics: mt}
	p.livez = checkSet{kind: "livez", checks: []check{
		{"serializable_read", p.readCheck(true)},
	}}
	// etcd runs its checks in the order of a Go map, so in no fixed
	// order; kvd runs them in the order etcd registers them.
	p.readyz = checkSet{kind: "readyz", checks: []check{
		{"data_corruption", p.alarmCheck(pb.AlarmType_CORRUPT)},
		// A serializable and a linearizable read, so a failure tells a
		// local problem from a cluster one.
		{"serializable_read", p.readCheck(true)},
		{"linearizable_read", p.readCheck(false)},
		{"non_learner", p.learnerCheck},
	}}
	return p, nil
}

// Install registers /health, /livez, /readyz and a sub-path per check
// (/readyz/linearizable_read) on mux. Other paths under them are not
// registered: mux answers them 404, as etcd's.
func (p *Probes) Install(mux *http.ServeMux) {
	mux.Handle("/health", p.healthHandler())
	for _, cs := range []*checkSet{&p.livez, &p.readyz} {
		root := "/" + cs.kind
		mux.Handle(root, p.checkHandler(root, func(r *http.Request) (bool, string) {
			return p.run(r.Context(), cs, cs.without(r.URL.Query()["exclude"], p.lg))
		}))
		for _, c := range cs.checks {
			path := root + "/" + c.name
			mux.Handle(path, p.checkHandler(path, func(r *http.Request) (bool, string) {
				return p.run(r.Context(), cs, []check{c})
			}))
		}
	}
}

// Health is /health's answer.
type Health struct {
	Health string `json:"health"`
	Reason string `json:"reason"`
}

// healthHandler is etcd's /health: unhealthy (503) on the first raised
// alarm not excluded (?exclude=NOSPACE, repeatable), then without a
// leader, then when a read fails. ?serializable=true skips the leader and
// reads locally: the member's own health, not the cluster's.
func (p *Probes) healthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			p.lg.Warn("/health error", zap.Int("status-code", http.StatusMethodNotAllowed))
			return
		}
		q := r.URL.Query()
		h := p.health(r.Context(), q["exclude"], q.Get("serializable") == "true")
		if h.Health == "true" {
			p.metrics.healthSuccess.Inc()
		} else {
			p.metrics.healthFailed.Inc()
		}
		d, _ := json.Marshal(h)
		if h.Health != "true" {
			http.Error(w, string(d), http.StatusServiceUnavailable)
			p.lg.Warn("/health error", zap.String("output", string(d)), zap.Int("status-code", http.StatusServiceUnavailable))
			return
		}
		// No Content-Type, as etcd: net/http sniffs text/plain.
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(d)
	})
}

func (p *Probes) health(ctx context.Context, exclude []string, serializable bool) Health {
	for _, a := range p.m.Alarms() {
		name := a.Alarm.String()
		if slices.Contains(exclude, name) {
			continue
		}
		reason := "ALARM UNKNOWN"
		switch a.Alarm {
		case pb.AlarmType_NOSPACE, pb.AlarmType_CORRUPT:
			reason = "ALARM " + name
		}
		p.lg.Warn("serving /health false due to an alarm", zap.Stringer("alarm", a))
		return Health{Health: "false", Reason: reason}
	}
	if !serializable && p.m.Leader() == 0 {
		p.lg.Warn("serving /health false; no leader")
		return Health{Health: "false", Reason: "RAFT NO LEADER"}
	}
	if err := p.m.Read(ctx, serializable); err != nil {
		p.lg.Warn("serving /health false; Range fails", zap.Error(err))
		return Health{Health: "false", Reason: "RANGE ERROR:" + err.Error()}
	}
	return Health{Health: "true"}
}

// check is one named check of /livez or /readyz.
type check struct {
	name string
	fn   func(context.Context) error
}

// checkSet is the checks of one endpoint; kind ("livez", "readyz") is its
// path and the type label of its metrics.
type checkSet struct {
	kind   string
	checks []check
}

// without drops the checks named in exclude. Names that are no check are
// only logged, as etcd: a probe written for another version still works.
func (cs *checkSet) without(exclude []string, lg *zap.Logger) []check {
	out := make([]check, 0, len(cs.checks))
	for _, c := range cs.checks {
		if !slices.Contains(exclude, c.name) {
			out = append(out, c)
		}
	}
	var missing []string
	for _, e := range exclude {
		known := slices.ContainsFunc(cs.checks, func(c check) bool { return c.name == e })
		if q := fmt.Sprintf("%q", e); e != "" && !known && !slices.Contains(missing, q) {
			missing = append(missing, q)
		}
	}
	if len(missing) > 0 {
		lg.Warn("some health checks cannot be excluded", zap.String("missing-health-checks", strings.Join(missing, ",")))
	}
	return out
}

// run runs every check (all of them, also after a failure) and returns
// whether all passed and etcd's report: a line per check, "[+]name ok" or
// "[-]name failed: reason".
func (p *Probes) run(ctx context.Context, cs *checkSet, checks []check) (bool, string) {
	ok := true
	var b strings.Builder
	for _, c := range checks {
		if err := c.fn(ctx); err != nil {
			fmt.Fprintf(&b, "[-]%s failed: %v\n", c.name, err)
			ok = false
			p.metrics.record(cs.kind, c.name, false)
		} else {
			fmt.Fprintf(&b, "[+]%s ok\n", c.name)
			p.metrics.record(cs.kind, c.name, true)
		}
	}
	return ok, b.String()
}

// checkHandler answers a /livez or /readyz path: 200 "ok" (after the
// report with ?verbose), or 503 with the report.
func (p *Probes) checkHandler(path string, run func(*http.Request) (bool, string)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.Header().Set("Allow", http.MethodGet)
			http.Error(w, "Method Not Allowed", http.StatusMethodNotAllowed)
			p.lg.Warn("Health request error", zap.String("path", path), zap.Int("status-code", http.StatusMethodNotAllowed))
			return
		}
		ok, report := run(r)
		if !ok {
			http.Error(w, report, http.StatusServiceUnavailable)
			p.lg.Error("Health check error", zap.String("path", path), zap.String("reason", report), zap.Int("status-code", http.StatusServiceUnavailable))
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if _, verbose := r.URL.Query()["verbose"]; verbose {
			fmt.Fprint(w, report)
		}
		fmt.Fprint(w, "ok\n")
	})
}

func (p *Probes) readCheck(serializable bool) func(context.Context) error {
	return func(ctx context.Context) error { return p.m.Read(ctx, serializable) }
}

func (p *Probes) alarmCheck(at pb.AlarmType) func(context.Context) error {
	return func(context.Context) error {
		for _, a := range p.m.Alarms() {
			if a.Alarm == at {
				return fmt.Errorf("alarm activated: %s", at)
			}
		}
		return nil
	}
}

var errLearner = errors.New("not supported for learner")

func (p *Probes) learnerCheck(context.Context) error {
	if p.m.IsLearner() {
		return errLearner
	}
	return nil
}
