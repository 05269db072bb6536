package pluginhost

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-plugin"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kvd-dev/kvd/pkg/pluginsdk"
	pb "github.com/kvd-dev/kvd/pkg/pluginsdk/authpluginpb"
)

// How the supervisor watches a running plugin and restarts a dead one.
const (
	startTimeout   = 10 * time.Second
	exitPoll       = 100 * time.Millisecond
	healthInterval = 2 * time.Second
	healthTimeout  = time.Second
	// unhealthyLimit failed health checks in a row get the process killed
	// and restarted: it is alive but no longer serving.
	unhealthyLimit = 3
	backoffMin     = 100 * time.Millisecond
	backoffMax     = 5 * time.Second
)

// running is one live process of a plugin and its gRPC client.
type running struct {
	client *plugin.Client
	conn   *grpc.ClientConn
	authn  pb.AuthenticatorClient
	authz  pb.AuthorizerClient
}

// proc is one configured plugin: the process kvd runs for it, restarted
// with backoff whenever it dies, until the host closes.
type proc struct {
	spec Spec
	lg   *zap.Logger
	m    *metrics
	cur  atomic.Pointer[running] // nil while the plugin is down
	// lastErr says why the plugin is down, for the callers' errors.
	lastErr atomic.Pointer[error]
	// tokens (authenticators), allows and scopes (authorizers, by caller
	// and method) are the cached answers of this plugin.
	tokens  *ttlCache[[sha256.Size]byte, Identity]
	allows  *ttlCache[string, struct{}]
	scopes  *ttlCache[string, []scope]
	hits    prometheus.Counter
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
	started atomic.Bool
}

func newProc(spec Spec, lg *zap.Logger, m *metrics) *proc {
	return &proc{
		spec: spec,
		// No stack traces: a plugin's error lines are about the plugin.
		lg: lg.With(zap.String("plugin", spec.Name), zap.String("kind", spec.Kind)).
			WithOptions(zap.AddStacktrace(zapcore.FatalLevel)),
		m:      m,
		tokens: newTTLCache[[sha256.Size]byte, Identity](),
		allows: newTTLCache[string, struct{}](),
		scopes: newTTLCache[string, []scope](),
		hits:   m.hits.WithLabelValues(spec.Name, spec.Kind),
		kick:   make(chan struct{}, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
}

// launch starts the process, performs the handshake and checks that it
// serves the service of its kind. Any failure names what went wrong.
func (p *proc) launch() (*running, error) {
	path, err := exec.LookPath(p.spec.Command)
	if err != nil {
		return nil, fmt.Errorf("command %q: %w", p.spec.Command, err)
	}
	cmd := exec.Command(path, p.spec.Args...)
	dieWithParent(cmd)
	// The configured env wins over kvd's own: go-plugin would append the
	// host's environment after it.
	cmd.Env = os.Environ()
	for k, v := range p.spec.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	hl := newHCLog(p.lg, path)
	out := &stderrLog{lg: p.lg}
	c := plugin.NewClient(&plugin.ClientConfig{
		HandshakeConfig:  pluginsdk.Handshake,
		Plugins:          pluginsdk.PluginSet(),
		Cmd:              cmd,
		SkipHostEnv:      true,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		StartTimeout:     startTimeout,
		Logger:           hl,
		Stderr:           out,
		SyncStdout:       hl.StandardWriter(nil),
		SyncStderr:       hl.StandardWriter(nil),
	})
	r, err := p.connect(c)
	if err != nil {
		c.Kill()
		if strings.Contains(err.Error(), "Unrecognized remote plugin message") {
			// go-plugin's own text is a page of guesses; the plugin's
			// last words, below, say more.
			err = errors.New("handshake: the plugin printed no handshake line (it exited, or is not a kvd auth plugin)")
		}
		if t := out.tail(); t != "" {
			err = fmt.Errorf("%w (plugin output: %s)", err, t)
		}
		return nil, err
	}
	return r, nil
}

func (p *proc) connect(c *plugin.Client) (*running, error) {
	rpc, err := c.Client()
	if err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if v := c.NegotiatedVersion(); v != pluginsdk.ProtocolVersion {
		return nil, fmt.Errorf("handshake: protocol version %d, want %d", v, pluginsdk.ProtocolVersion)
	}
	gc, ok := rpc.(*plugin.GRPCClient)
	if !ok {
		return nil, errors.New("handshake: plugin does not speak gRPC")
	}
	raw, err := rpc.Dispense(p.spec.Kind)
	if err != nil {
		return nil, fmt.Errorf("dispense %s: %w", p.spec.Kind, err)
	}
	r := &running{client: c, conn: gc.Conn}
	switch cl := raw.(type) {
	case pb.AuthenticatorClient:
		r.authn = cl
	case pb.AuthorizerClient:
		r.authz = cl
	}
	if err := p.probe(r); err != nil {
		return nil, err
	}
	return r, nil
}

// probe sends the kind's method one empty request: a plugin of the other
// kind (or of another program) answers Unimplemented. Its answer is
// otherwise ignored.
func (p *proc) probe(r *running) error {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	if err := health(ctx, r.conn); err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	var err error
	if r.authn != nil {
		_, err = r.authn.Authenticate(ctx, &pb.AuthenticateRequest{})
	} else {
		_, err = r.authz.Authorize(ctx, &pb.AuthorizeRequest{})
	}
	if status.Code(err) == codes.Unimplemented {
		other := pluginsdk.KindAuthenticator
		if p.spec.Kind == pluginsdk.KindAuthenticator {
			other = pluginsdk.KindAuthorizer
		}
		return fmt.Errorf("plugin does not serve the %s service (is it an %s?)", p.spec.Kind, other)
	}
	if err != nil {
		return fmt.Errorf("first call: %w", err)
	}
	return nil
}

// health is go-plugin's health check ("plugin" service), with a deadline:
// anything but SERVING is unhealthy.
func health(ctx context.Context, conn *grpc.ClientConn) error {
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: plugin.GRPCServiceName})
	if err != nil {
		return err
	}
	if s := resp.GetStatus(); s != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health status %s", s)
	}
	return nil
}

// start launches the first process; the member does not start without it.
func (p *proc) start() error {
	r, err := p.launch()
	if err != nil {
		return err
	}
	p.up(r)
	p.started.Store(true)
	go p.supervise()
	return nil
}

func (p *proc) up(r *running) {
	p.cur.Store(r)
	p.m.up.WithLabelValues(p.spec.Name).Set(1)
	p.lg.Info("auth plugin running", zap.Int("pid", pid(r)), zap.Int("protocol-version", r.client.NegotiatedVersion()))
}

func (p *proc) down(why error) {
	p.lastErr.Store(&why)
	if r := p.cur.Swap(nil); r != nil {
		r.client.Kill()
	}
	p.m.up.WithLabelValues(p.spec.Name).Set(0)
}

func pid(r *running) int {
	if rc := r.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// supervise restarts the plugin when its process exits or stops answering
// health checks, with exponential backoff, until close.
func (p *proc) supervise() {
	defer close(p.done)
	poll := time.NewTicker(exitPoll)
	defer poll.Stop()
	lastHealth := time.Now()
	failed := 0
	for {
		select {
		case <-p.stop:
			p.down(errors.New("stopped"))
			return
		case <-poll.C:
		case <-p.kick:
		}
		r := p.cur.Load()
		if r == nil {
			continue
		}
		if r.client.Exited() {
			p.lg.Error("auth plugin exited; restarting")
			p.down(errors.New("plugin process exited"))
			p.restart()
			failed = 0
			continue
		}
		if time.Since(lastHealth) < healthInterval {
			continue
		}
		lastHealth = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
		err := health(ctx, r.conn)
		cancel()
		if err == nil {
			failed = 0
			continue
		}
		failed++
		p.lg.Warn("auth plugin health check failed", zap.Int("in-a-row", failed), zap.Error(err))
		if failed >= unhealthyLimit {
			p.lg.Error("auth plugin unhealthy; restarting")
			p.down(fmt.Errorf("plugin failed %d health checks", failed))
			p.restart()
			failed = 0
		}
	}
}

// restart relaunches the plugin until it runs or the host closes.
func (p *proc) restart() {
	wait := backoffMin
	for {
		select {
		case <-p.stop:
			return
		case <-time.After(wait):
		}
		p.m.restarts.WithLabelValues(p.spec.Name).Inc()
		r, err := p.launch()
		if err == nil {
			select {
			case <-p.stop:
				r.client.Kill()
				return
			default:
			}
			p.up(r)
			return
		}
		p.lg.Error("auth plugin restart failed", zap.Duration("next-try-in", min(2*wait, backoffMax)), zap.Error(err))
		e := fmt.Errorf("restart failed: %w", err)
		p.lastErr.Store(&e)
		wait = min(2*wait, backoffMax)
	}
}

// check asks the supervisor to look at the process now (a call failed in a
// way that suggests it died).
func (p *proc) check() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// close stops the supervisor and the process; a plugin never started has
// neither.
func (p *proc) close() {
	if !p.started.Load() {
		return
	}
	p.once.Do(func() { close(p.stop) })
	<-p.done
}

// downErr is why calls find the plugin down.
func (p *proc) downErr() error {
	if e := p.lastErr.Load(); e != nil {
		return fmt.Errorf("not running: %w", *e)
	}
	return errors.New("not running")
}

// healthNow runs one health check of the running process.
func (p *proc) healthNow() error {
	r := p.cur.Load()
	if r == nil {
		return p.downErr()
	}
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	defer cancel()
	return health(ctx, r.conn)
}
