// Package pluginhost runs kvd's auth plugins: it starts each configured
// plugin as a process (HashiCorp go-plugin, gRPC), restarts it when it dies,
// and asks it, with a per-call timeout and the configured on-failure
// outcome, who a caller is (authenticators) or whether an identified caller
// may touch some keys (authorizers). Answers are cached briefly so a plugin
// is not on every request's path.
package pluginhost

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
)

// What a call gets while its plugin is down, slow or failing.
const (
	OnFailureDeny = "deny"
	OnFailureSkip = "skip"
)

// Spec is one configured plugin (an entry of the config's auth-plugins).
type Spec struct {
	Name    string
	Kind    string // pluginsdk.KindAuthenticator or pluginsdk.KindAuthorizer
	Command string
	Args    []string
	Env     map[string]string
	// Timeout bounds each call.
	Timeout time.Duration
	// OnFailure is OnFailureDeny or OnFailureSkip.
	OnFailure string
	// CacheTTL is how long an accepted token or an allow is reused; 0
	// asks the plugin every time.
	CacheTTL time.Duration
}

// Options are the host's logger, metrics registry and tracer; nil
// Registerer and Tracer mean none.
type Options struct {
	Logger     *zap.Logger
	Registerer prometheus.Registerer
	Tracer     trace.Tracer
}

// Host runs the configured plugins. Its methods are safe for concurrent
// use; a Host without plugins answers everything without a call.
type Host struct {
	lg             *zap.Logger
	m              *metrics
	tr             trace.Tracer
	authenticators []*proc
	authorizers    []*proc
	closeOnce      sync.Once
}

// Start is New and Host.Start.
func Start(specs []Spec, o Options) (*Host, error) {
	h, err := New(specs, o)
	if err != nil {
		return nil, err
	}
	if err := h.Start(); err != nil {
		return nil, err
	}
	return h, nil
}

// New checks the specs and registers the metrics; no process runs until
// Start.
func New(specs []Spec, o Options) (*Host, error) {
	lg := o.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	h := &Host{lg: lg.Named("auth-plugin"), m: m, tr: o.Tracer}
	if h.tr == nil {
		h.tr = noop.NewTracerProvider().Tracer("")
	}
	for _, s := range specs {
		if err := validate(s); err != nil {
			return nil, fmt.Errorf("auth plugin %q: %w", s.Name, err)
		}
		p := newProc(s, h.lg, m)
		if s.Kind == pluginsdk.KindAuthenticator {
			h.authenticators = append(h.authenticators, p)
		} else {
			h.authorizers = append(h.authorizers, p)
		}
	}
	return h, nil
}

// Start starts every plugin, authenticators first, each in config order,
// and returns when each has answered its handshake. A plugin that is
// missing, not executable, speaks another protocol version or serves
// another kind stops the start with an error naming it; the plugins
// already started are stopped.
func (h *Host) Start() error {
	for _, p := range h.procs() {
		if err := p.start(); err != nil {
			h.Close()
			return fmt.Errorf("auth plugin %q: %w", p.spec.Name, err)
		}
	}
	return nil
}

func (h *Host) procs() []*proc {
	return append(append([]*proc(nil), h.authenticators...), h.authorizers...)
}

func validate(s Spec) error {
	switch {
	case s.Name == "":
		return errors.New("no name")
	case s.Kind != pluginsdk.KindAuthenticator && s.Kind != pluginsdk.KindAuthorizer:
		return fmt.Errorf("kind %q: want %s or %s", s.Kind, pluginsdk.KindAuthenticator, pluginsdk.KindAuthorizer)
	case s.Command == "":
		return errors.New("no command")
	case s.Timeout <= 0:
		return fmt.Errorf("timeout %v: want a positive duration", s.Timeout)
	case s.OnFailure != OnFailureDeny && s.OnFailure != OnFailureSkip:
		return fmt.Errorf("on-failure %q: want %s or %s", s.OnFailure, OnFailureDeny, OnFailureSkip)
	case s.CacheTTL < 0:
		return fmt.Errorf("cache-ttl %v: want zero or more", s.CacheTTL)
	}
	return nil
}

// HasAuthenticators and HasAuthorizers tell whether any plugin of that kind
// is configured, so callers skip the work of asking none.
func (h *Host) HasAuthenticators() bool { return h != nil && len(h.authenticators) > 0 }
func (h *Host) HasAuthorizers() bool    { return h != nil && len(h.authorizers) > 0 }

// Close stops every plugin and waits for their supervisors.
func (h *Host) Close() {
	if h == nil {
		return
	}
	h.closeOnce.Do(func() {
		var wg sync.WaitGroup
		for _, p := range h.procs() {
			wg.Go(p.close)
		}
		wg.Wait()
	})
}

// Status is what `kvd plugins check` prints of a plugin.
type Status struct {
	Name            string
	Kind            string
	ProtocolVersion int
	PID             int
	// Err is why the plugin is not serving; nil when healthy.
	Err error
}

// Status reports each plugin's state, in config order within each kind.
func (h *Host) Status() []Status {
	var out []Status
	for _, p := range h.procs() {
		st := Status{Name: p.spec.Name, Kind: p.spec.Kind}
		r := p.cur.Load()
		if r == nil {
			st.Err = p.downErr()
		} else {
			st.ProtocolVersion, st.PID = r.client.NegotiatedVersion(), pid(r)
			st.Err = p.healthNow()
		}
		out = append(out, st)
	}
	return out
}
