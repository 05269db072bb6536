// Package server wires one kvd member from its parts with fx: storage, the
// raft log, the actors (raft driver, WAL writer, applier) and the gRPC API.
package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvd-dev/kvd/pkg/actors"
	"github.com/kvd-dev/kvd/pkg/alarms"
	"github.com/kvd-dev/kvd/pkg/api"
	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/engine"
	"github.com/kvd-dev/kvd/pkg/entrybatch"
	"github.com/kvd-dev/kvd/pkg/failpoint"
	"github.com/kvd-dev/kvd/pkg/gcpace"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
	"github.com/kvd-dev/kvd/pkg/lockelection"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/migrate"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/pluginhost"
	"github.com/kvd-dev/kvd/pkg/raftlog"
	"github.com/kvd-dev/kvd/pkg/raftnode"
	"github.com/kvd-dev/kvd/pkg/snapship"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
	"github.com/kvd-dev/kvd/pkg/transport"
	"github.com/kvd-dev/kvd/pkg/watchhub"
)

// Version is the etcd API version kvd speaks; Status reports it so clients
// that look at the server version treat kvd as that etcd.
const Version = "3.7.3"

// grpcOverheadBytes is the room gRPC framing gets above max-request-bytes,
// as in etcd.
const grpcOverheadBytes = 512 * 1024

// Module is the fx graph of one member. It needs a *config.Config and a
// *zap.Logger supplied.
func Module() fx.Option {
	return fx.Options(
		fx.Provide(
			newTracing,
			newTracer,
			newBackend,
			newStore,
			newRaftLog,
			newIdentity,
			newMembers,
			newPeerLink,
			newRaftNode,
			newTransport,
			apply.NewRegistry,
			newApplied,
			newLeases,
			newAuth,
			newPlugins,
			newWatchConfig,
			newMetrics,
			newEarlyMetrics,
			watchhub.New,
			newAlarms,
			newQuota,
			newAPI,
			newActors,
		),
		fx.Invoke(startActors, startBatchGate, initialCorruptCheck, serveClients, serveMetrics, func(*transport.Transport) {}),
		fx.Invoke(advanceElectionTicks),
		fx.Invoke(startCompactor),
		fx.Invoke(startCorruptMonitor),
		fx.Invoke(registerLateMetrics),
	)
}

// newBackend opens the backend once the identity check passed, and reads
// the key index file meanwhile (mvcc.ReadIndexFile) for newStore.
func newBackend(lc fx.Lifecycle, c *config.Config, _ *memberIdentity, lg *zap.Logger) (backend.Backend, *mvcc.IndexFileRead, error) {
	// An interrupted kvd migrate leaves its copy or the old engine's
	// backend beside the live one (pkg/migrate/recover.go).
	if err := migrate.Recover(c.SnapDir(), lg); err != nil {
		return nil, nil, err
	}
	// A crash while a leader's snapshot was installed leaves the old
	// backend aside (pkg/snapship).
	if err := snapship.RecoverDir(c.BackendDir()); err != nil {
		return nil, nil, err
	}
	if err := checkEngineDir(c); err != nil {
		return nil, nil, err
	}
	saved := mvcc.ReadIndexFile(engine.IndexFile(c.BackendDir()), lg.Named("mvcc"))
	be, err := openBackend(c, lg)
	if err != nil {
		saved.Discard()
		return nil, nil, err
	}
	// The collector is paced by pkg/gcpace on either engine (a floor under
	// its pace), and an engine's arena on the Go heap (Badger's memtable)
	// must not set the pace. A snapshot install reopens the same engine with
	// the same options, so one exclusion covers the member's lifetime.
	var arena int64
	if a, ok := be.(interface{ HeapArenaBytes() int64 }); ok {
		arena = a.HeapArenaBytes()
	}
	release := gcpace.Exclude(arena)
	lc.Append(fx.Hook{OnStop: func(context.Context) error { release(); return nil }})
	return be, saved, nil
}

// checkEngineDir refuses to start the configured engine beside another
// engine's backend: the member would start empty and replay, or diverge.
func checkEngineDir(c *config.Config) error {
	present, err := engine.Present(c.SnapDir())
	if err != nil {
		return fmt.Errorf("data-dir %s: %w", c.DataDir, err)
	}
	want, err := engine.Canonical(c.Backend.Engine)
	if err != nil {
		return fmt.Errorf("backend.engine: %w", err)
	}
	if len(present) == 0 || slices.Contains(present, want) {
		return nil
	}
	return fmt.Errorf("data-dir %s holds a %s backend, not %s (backend.engine): run `kvd migrate --data-dir %s --to %s` to move the data to %s, or set backend.engine: %s",
		c.DataDir, present[0], want, c.DataDir, want, want, present[0])
}

// openBackend opens the configured engine in its directory. The store
// closes it (newStore): after a snapshot install it is another instance.
func openBackend(c *config.Config, lg *zap.Logger) (backend.Backend, error) {
	return engine.Open(c, c.Backend.Engine, c.BackendDir(), lg)
}

func newStore(lc fx.Lifecycle, c *config.Config, be backend.Backend, saved *mvcc.IndexFileRead, disk earlyMetrics, tr trace.Tracer, lg *zap.Logger) (*mvcc.Store, error) {
	s, err := mvcc.OpenWithOptions(be, mvcc.Options{
		Logger:            lg.Named("mvcc"),
		BatchInterval:     c.BackendBatchInterval.Std(),
		BatchLimit:        c.BackendBatchLimit,
		CompactBatchLimit: c.CompactionBatchLimit,
		OnCommit:          func(d time.Duration) { disk.backendCommit.Observe(d.Seconds()) },
		Observe:           disk.storeObservers(),
		Tracer:            tr,
		// startActors runs it in the actor group: a failed compaction stops
		// the member.
		ExternalCompactor: true,
		IndexFileRead:     saved,
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("open mvcc store: %w", err), be.Close())
	}
	lc.Append(fx.Hook{OnStop: func(context.Context) error {
		return errors.Join(s.Close(), s.Backend().Close())
	}})
	return s, nil
}

func newRaftLog(lc fx.Lifecycle, c *config.Config, _ *memberIdentity, disk earlyMetrics, lg *zap.Logger) (*raftlog.Log, error) {
	l, err := raftlog.Open(raftlog.Options{Dir: c.WALPath(), NoSync: c.UnsafeNoFsync, SegmentSize: failpoint.WALSegmentBytes(), Logger: lg.Named("wal"), CatchUpEntries: c.SnapshotCatchupEntries,
		MaxSnapshots: c.MaxSnapshots, MaxWALs: c.MaxWALs,
		OnFsync: func(d time.Duration) { disk.walFsync.Observe(d.Seconds()) },
		OnWrite: func(d time.Duration) { disk.walWrite.Observe(d.Seconds()) }})
	if err != nil {
		return nil, fmt.Errorf("open wal %s: %w", c.WALPath(), err)
	}
	lc.Append(fx.Hook{OnStop: func(context.Context) error { return l.Close() }})
	return l, nil
}

func newRaftNode(c *config.Config, l *raftlog.Log, st *mvcc.Store, cl *membership.Cluster, boot *bootstrap, link *peerLink, tr trace.Tracer, lg *zap.Logger) (*raftnode.Node, error) {
	if l.IsNew() && st.ConsistentIndex() > 0 {
		return nil, fmt.Errorf("data-dir %s: the backend holds applied data (index %d) but the WAL in %s is empty; refusing to start a new member over it",
			c.DataDir, st.ConsistentIndex(), c.WALPath())
	}
	if err := forceNewCluster(c, l, st, cl, lg); err != nil {
		return nil, err
	}
	snap, err := l.Storage().Snapshot()
	if err != nil {
		return nil, fmt.Errorf("read raft snapshot: %w", err)
	}
	if err := checkBackendCurrent(c, st, snap.GetMetadata().GetIndex()); err != nil {
		return nil, err
	}
	return raftnode.New(raftnode.Config{
		ID:             cl.Self(),
		Peers:          boot.peers,
		Applied:        snap.GetMetadata().GetIndex(),
		TickInterval:   c.HeartbeatDuration(),
		ElectionTicks:  c.ElectionTicks(),
		HeartbeatTicks: 1,
		PreVote:        c.PreVote,
		// The API's request timeout ends a read index round, as etcd's
		// read loop: its callers share one deadline instead of a timer each.
		ReadIndexTimeout: requestTimeout(c),
		Log:              l,
		Logger:           lg,
		Tracer:           tr,
		Send:             link.Send,
	})
}

// checkBackendCurrent refuses a backend older than the WAL's snapshot, as
// etcd does ("database file ... does not match with snapshot"): raft resumes
// after the snapshot, so the entries between the backend's consistent index
// and the snapshot would never be applied and the member would diverge.
func checkBackendCurrent(c *config.Config, st *mvcc.Store, snapIndex uint64) error {
	if ci := st.ConsistentIndex(); ci < snapIndex {
		return fmt.Errorf("database file (%s index %d) does not match with snapshot (index %d): the backend is older than the WAL's snapshot and cannot catch up from it; restore this member from a snapshot, or remove it from the cluster and add it back with an empty data-dir",
			c.BackendDir(), ci, snapIndex)
	}
	return nil
}

func newApplied(st *mvcc.Store) *apply.Applied { return apply.NewApplied(st.ConsistentIndex()) }

// newWatchConfig is the watch hub's configuration; tests decorate it.
func newWatchConfig(c *config.Config, st *mvcc.Store, mt *Metrics, lg *zap.Logger) watchhub.Config {
	return watchhub.Config{Store: st, Logger: lg.Named("watch"), Metrics: watchMetrics{mt}, ProgressInterval: c.WatchProgressNotifyInterval.Std()}
}

func newAPI(lc fx.Lifecycle, c *config.Config, n *raftnode.Node, st *mvcc.Store, reg *apply.Registry, ap *apply.Applied, cl *membership.Cluster, ptr *transport.Transport, lm *leasemgr.Manager, hub *watchhub.Hub, az *authz.Store, plugins *pluginhost.Host, as *alarms.Store, q *alarms.Quota, mt *Metrics, tr trace.Tracer, lg *zap.Logger) (*api.Server, error) {
	// Calls only the leader answers are relayed to its client URL, which
	// may be https: dial it as a client, with the client block.
	clientTLS, err := tlsconf.ForClient(c, lg)
	if err != nil {
		return nil, err
	}
	// Files of snapshots that were being sent when the member stopped.
	leftovers, _ := filepath.Glob(filepath.Join(c.MemberDir(), api.SnapshotFilePattern))
	for _, p := range leftovers {
		if err := os.Remove(p); err != nil {
			return nil, fmt.Errorf("remove leftover snapshot file: %w", err)
		}
	}
	s := api.New(api.Config{
		MaxTxnOps:       int(c.MaxTxnOps),
		MaxRequestBytes: int(c.MaxRequestBytes),
		RequestTimeout:  requestTimeout(c),
		ElectionTimeout: time.Duration(c.ElectionTimeout) * time.Millisecond,
		QuotaBytes:      c.QuotaBytes(),
		Version:         Version,
		ClientCertAuth:  c.ClientTLS.ClientCertAuth,
		BcryptCost:      int(c.BcryptCost),

		WarningApplyDuration: c.WarningApplyDuration.Std(),

		StrictReconfigCheck: c.StrictReconfigCheck,
		HealthInterval:      healthInterval,
		SnapshotDir:         c.MemberDir(),
	}, api.Deps{Raft: n, Store: st, Registry: reg, Applied: ap, Cluster: cl, PeerActiveSince: ptr.ActiveSince, Tracer: tr, Logger: lg, Leases: lm, WatchHub: hub, Auth: az, Plugins: plugins, Alarms: as, Quota: q,
		LeaderCreds: clientTLS.DialCredentials, SlowReads: mt.slowApplies, SlowReadIndexes: mt.slowReadIndexes})
	lc.Append(fx.Hook{OnStop: func(context.Context) error { s.Close(); return nil }})
	return s, nil
}

// healthInterval is how long a peer must have been connected to count for
// the strict reconfiguration check: etcd's 5s (api.HealthInterval); the
// package's tests, which change members right after a start, shorten it.
var healthInterval = api.HealthInterval

// Actors are the member's running actors.
type Actors struct {
	Group   *actors.Group
	Node    *raftnode.Node
	WAL     *raftnode.WALWriter
	Applier *apply.Applier
	Expirer *leasemgr.Expirer
	Hub     *watchhub.Hub
	// Publisher records this member's name and client URLs once.
	Publisher *publisher
}

func newActors(lc fx.Lifecycle, sd fx.Shutdowner, c *config.Config, n *raftnode.Node, l *raftlog.Log, st *mvcc.Store, cl *membership.Cluster, link *peerLink,
	reg *apply.Registry, ap *apply.Applied, lm *leasemgr.Manager, az *authz.Store, s *api.Server, hub *watchhub.Hub, as *alarms.Store, q *alarms.Quota, mt *Metrics, tr trace.Tracer, lg *zap.Logger) (*Actors, error) {
	snap, err := l.Storage().Snapshot()
	if err != nil {
		return nil, fmt.Errorf("read raft snapshot: %w", err)
	}
	g := actors.NewGroup(lg, func(err error) {
		lg.Error("member stopping after an actor failed", zap.Error(err))
		_ = sd.Shutdown(fx.ExitCode(1))
	})
	wal := raftnode.NewWALWriter(l, n, tr)
	a := &Actors{
		Group: g,
		Node:  n,
		Hub:   hub,
		WAL:   wal,
		Applier: apply.New(apply.Config{
			Store:           st,
			Raft:            n,
			Inbox:           n.Applies,
			Registry:        reg,
			Applied:         ap,
			Snapshots:       l,
			SyncBackend:     func() error { return flushAndSync(st) },
			SnapshotCount:   c.SnapshotCount,
			SnapshotCatchup: c.SnapshotCatchupEntries,
			SnapshotIndex:   snap.GetMetadata().GetIndex(),
			ConfState:       snap.GetMetadata().GetConfState(),
			Leases:          lm,
			Auth:            az,
			Members:         cl,
			Alarms:          as,
			Quota:           q,
			RaiseNoSpace:    s.RaiseNoSpace,
			Events:          hub.Notify,
			Tracer:          tr,
			Logger:          lg.Named("apply"),

			WarningApplyDuration: c.WarningApplyDuration.Std(),
			SlowApplies:          mt.slowApplies,
		}),
	}
	a.Expirer = newExpirer(c, n, lm, s, lg)
	inst := &snapship.Installer{
		Stager: link.stager, Store: st, Dir: c.BackendDir(),
		Open:   func(dir string) (backend.Backend, error) { return engine.Open(c, c.Backend.Engine, dir, lg) },
		Apply:  a.Applier.Install,
		Reload: func() error { return reloadFromStore(st, cl, lm, az, as, hub) },
		Logger: lg.Named("snapshot"),
	}
	wal.InstallSnapshot = inst.Install
	link.sender.Point = a.Applier.SnapshotPoint
	a.Publisher = &publisher{c: c, api: s, cl: cl, lg: lg, done: make(chan struct{})}
	g.Hook(lc)
	return a, nil
}

// flushAndSync commits the store's buffered writes and makes the backend
// durable: the applier calls it before the WAL is truncated behind a raft
// snapshot.
func flushAndSync(st *mvcc.Store) error {
	if err := st.Flush(); err != nil {
		return err
	}
	if err := st.Backend().Sync(); err != nil {
		return fmt.Errorf("sync backend: %w", err)
	}
	return nil
}

func startActors(lc fx.Lifecycle, a *Actors, st *mvcc.Store) {
	lc.Append(fx.Hook{OnStart: func(context.Context) error {
		a.Group.Go("mvcc-compactor", st.Compactor())
		a.Group.Go("raft", a.Node)
		a.Group.Go("wal", a.WAL)
		a.Group.Go("watch-hub", a.Hub)
		a.Group.Go("applier", a.Applier)
		a.Group.Go("lease-expirer", a.Expirer)
		a.Group.Go("publisher", a.Publisher)
		return nil
	}})
}

// startBatchGate lets the raft driver put several writes in one entry
// while every member reads such entries (pkg/entrybatch).
func startBatchGate(lc fx.Lifecycle, a *Actors, cl *membership.Cluster, tr *transport.Transport, lg *zap.Logger) {
	g := &entrybatch.Gate{
		Self:     cl.Self(),
		Members:  cl.IDs,
		Features: tr.PeerFeatures,
		Set:      a.Node.SetBatching,
		Logger:   lg.Named("raft"),
	}
	lc.Append(fx.Hook{OnStart: func(context.Context) error {
		a.Group.Go("entry-batch-gate", g)
		return nil
	}})
}

// serveClients binds the client URLs at start but serves them only once
// this member's attributes are published (as etcd: a client that connects
// earlier waits), so MemberList on any member already shows its client URLs.
// An https URL serves gRPC and HTTP over TLS on one port (tlssplit.go).
func serveClients(lc fx.Lifecycle, c *config.Config, s *api.Server, a *Actors, mt *Metrics, tr *memberTracing, lg *zap.Logger) error {
	urls, err := c.ClientURLs()
	if err != nil {
		return fmt.Errorf("listen-client-urls: %w", err)
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(s.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(s.StreamInterceptor()),
		grpc.MaxRecvMsgSize(int(c.MaxRequestBytes) + grpcOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
	}
	opts = append(grpcMetricsOptions(mt), opts...)
	opts = append(opts, clientStreamOptions(c)...)
	opts = append(opts, tracingServerOptions(tr)...)
	warnPlainWithTLS(lg, "listen-client-urls", "client-transport-security", c.ClientTLS, urls)
	var (
		tlsInfo *tlsconf.Info
		fails   *tlsconf.FailureLog
	)
	if anyHTTPS(urls) {
		// The files are checked now: a bad one stops the start.
		if tlsInfo, err = tlsconf.ForClient(c, lg); err != nil {
			return err
		}
		fails = tlsconf.NewFailureLog(lg, "listen-client-urls")
		opts = append(opts, grpc.Creds(tlsconf.ServerCredentials(fails)))
	}
	g := grpc.NewServer(opts...)
	s.Register(g)
	// etcd serves the standard gRPC health service too; load balancers and
	// probes ask it.
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	// etcd's JSON gateway serves /v3/ on each listener once they are bound
	// (clientgw.go). Plaintext and TLS listeners get their own HTTP server,
	// each forwarding on a gateway connection of its kind.
	base := httpHandler(s, mt, c.EnablePprof)
	gws := &clientGateways{le: lockelection.New(lg.Named("lockelection"))}
	gws.le.Register(g) // etcd's v3lock and v3election services
	// Every method's counters start at 0, as etcd's InitializeMetrics
	// makes them, so the families are there before any traffic.
	mt.grpc.server.Initialize(g)
	certAuth := c.ClientTLS.ClientCertAuth
	hsrv := &http.Server{Handler: gws.handler(base, false, certAuth, s.Auth.Enabled), ReadHeaderTimeout: 10 * time.Second}
	hsrvTLS := &http.Server{Handler: gws.handler(base, true, certAuth, s.Auth.Enabled), ReadHeaderTimeout: 10 * time.Second,
		Protocols: clientHTTPProtocols(), ConnContext: withTLSState}
	if tlsInfo != nil {
		hsrv.Protocols = clientHTTPProtocols()
	}
	var splits []*splitListener
	stopc := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			lns, err := listenAll("listen-client-urls", urls)
			if err != nil {
				return err
			}
			for i, ln := range lns {
				var info *tlsconf.Info
				if urls[i].Scheme == "https" {
					info = tlsInfo
				}
				if err := gws.add(ln, info, lg); err != nil {
					return err
				}
				if urls[i].Scheme == "https" {
					splits = append(splits, newTLSSplitListener(ln, tlsInfo.ServerConfig(clientProtos...), fails, lg))
				} else {
					splits = append(splits, newSplitListener(ln))
				}
			}
			go func() {
				select {
				case <-a.Publisher.Done():
				case <-stopc:
					return
				}
				for _, sl := range splits {
					lg.Info("serving client requests (gRPC and HTTP)", zap.String("address", sl.ln.Addr().String()), zap.Bool("tls", sl.tls != nil))
					go func(sl *splitListener) {
						if err := g.Serve(sl.grpc); err != nil {
							lg.Warn("grpc serve ended", zap.Error(err))
						}
					}(sl)
					go func(sl *splitListener) {
						srv := hsrv
						if sl.tls != nil {
							srv = hsrvTLS
						}
						if err := srv.Serve(sl.http); err != nil && !errors.Is(err, http.ErrServerClosed) {
							lg.Warn("http serve ended", zap.Error(err))
						}
					}(sl)
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			close(stopc)
			_ = hsrv.Close()
			_ = hsrvTLS.Close()
			gws.Close()
			done := make(chan struct{})
			go func() { g.GracefulStop(); close(done) }()
			select {
			case <-done:
			case <-ctx.Done():
				g.Stop()
			case <-time.After(3 * time.Second):
				g.Stop()
			}
			for _, sl := range splits {
				sl.Close()
			}
			return nil
		},
	})
	return nil
}

// serveMetrics serves /metrics, /health, /livez and /readyz on each of
// listen-metrics-urls from start on, as etcd does, so scrapers and probes
// need not share the client port. An https URL uses the client TLS
// configuration, as etcd's.
func serveMetrics(lc fx.Lifecycle, c *config.Config, s *api.Server, mt *Metrics, lg *zap.Logger) error {
	urls, err := c.MetricsURLs()
	if err != nil || len(urls) == 0 {
		return err
	}
	srv := &http.Server{Handler: metricsHandler(s, mt), ReadHeaderTimeout: 10 * time.Second}
	var tlsInfo *tlsconf.Info
	if anyHTTPS(urls) {
		if tlsInfo, err = tlsconf.ForClient(c, lg); err != nil {
			return err
		}
		srv.ErrorLog = httpErrorLog(lg, tlsconf.NewFailureLog(lg, "listen-metrics-urls"))
	}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			lns, err := listenAll("listen-metrics-urls", urls)
			if err != nil {
				return err
			}
			for i, ln := range lns {
				ln = tlsListener(ln, urls[i], tlsInfo, clientProtos)
				lg.Info("serving metrics", zap.String("address", ln.Addr().String()), zap.Bool("tls", urls[i].Scheme == "https"))
				go func() {
					if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
						lg.Warn("metrics serve ended", zap.Error(err))
					}
				}()
			}
			return nil
		},
		// Close also closes the listeners Serve was given.
		OnStop: func(context.Context) error { return srv.Close() },
	})
	return nil
}

// listenAll binds every URL of flag, or none: on an error it closes what it
// bound.
func listenAll(flag string, urls []url.URL) ([]net.Listener, error) {
	var lns []net.Listener
	for _, u := range urls {
		ln, err := listen(flag, u)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// listen binds the TCP address of an http or https URL; the caller adds
// TLS for https.
func listen(flag string, u url.URL) (net.Listener, error) {
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("%s: %s: only http and https are served so far", flag, u.String())
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		return nil, fmt.Errorf("%s: listen on %s: %w", flag, u.Host, err)
	}
	return ln, nil
}

// requestTimeout bounds a request's wait for raft, as etcd's ReqTimeout:
// 5 s plus two election timeouts.
func requestTimeout(c *config.Config) time.Duration {
	return 5*time.Second + 2*time.Duration(c.ElectionTimeout)*time.Millisecond
}
