package server

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"

	"github.com/kvd-dev/kvd/pkg/api"
	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/engine"
	"github.com/kvd-dev/kvd/pkg/leasemgr"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftlog"
	"github.com/kvd-dev/kvd/pkg/raftnode"
	"github.com/kvd-dev/kvd/pkg/transport"
	"github.com/kvd-dev/kvd/pkg/watchhub"
)

// Metrics is the member's Prometheus registry, with etcd's metric names so
// that etcd dashboards and alerts work on kvd. Most values are read from the
// member's state at scrape time, so the hot path pays nothing for them.
type Metrics struct {
	Registry  *prometheus.Registry
	watchers  prometheus.Gauge
	streams   prometheus.Gauge
	events    prometheus.Counter
	unsynced  prometheus.Gauge
	slowWatch prometheus.Gauge
	// Applies and reads slower than warning-apply-duration; read index
	// rounds that timed out.
	slowApplies, slowReadIndexes prometheus.Counter
	// Raft snapshots sent to and received from peers, by peer ID.
	snapSent, snapSendFailed, snapReceived *prometheus.CounterVec
	// Proposals that failed or timed out; read index rounds that failed.
	proposalsFailed, readIndexesFailed prometheus.Counter
	// peerRTT is the round trip time of the transport's probes, by peer.
	peerRTT *prometheus.HistogramVec
	// snapshotInstalling is 1 while a leader's snapshot is installed.
	snapshotInstalling prometheus.Gauge
	// learnerPromotions counts the promotions made as the leader.
	learnerPromotions prometheus.Counter
	// grpc is the gRPC server's metrics (grpcmetrics.go).
	grpc *grpcMetrics
}

// earlyMetrics are the metrics fed by parts made before the Metrics: etcd's
// disk latency histograms, the store's compaction and hash metrics, the
// lease TTL histogram. The WAL, the store and the lease manager, which the
// raft node and so the Metrics depend on, feed them; so they are made apart.
type earlyMetrics struct {
	walFsync      prometheus.Histogram // etcd_disk_wal_fsync_duration_seconds
	walWrite      prometheus.Histogram // etcd_disk_wal_write_duration_seconds
	backendCommit prometheus.Histogram // etcd_disk_backend_commit_duration_seconds
	// etcd_disk_backend_defrag_duration_seconds
	backendDefrag prometheus.Histogram
	// etcd_disk_backend_snapshot_duration_seconds: Maintenance.Snapshot and
	// raft snapshots sent to peers, from the read view to the last byte, as
	// etcd times its backend snapshots.
	backendSnapshot prometheus.Histogram
	// The store's compaction and hash metrics (etcd's mvcc/metrics.go).
	indexCompactionPause, dbCompactionPause, dbCompactionTotal prometheus.Histogram
	dbCompactionKeys                                           prometheus.Counter
	dbCompactionLast                                           prometheus.Gauge
	hash, hashRev                                              prometheus.Histogram
	leaseTTL                                                   prometheus.Histogram // etcd_debugging_lease_ttl_total
}

// storeObservers feed the store's compaction and hash metrics, in etcd's
// units (whole milliseconds where etcd counts them so).
func (d earlyMetrics) storeObservers() mvcc.Observers {
	ms := func(h prometheus.Histogram) func(time.Duration) {
		return func(t time.Duration) { h.Observe(float64(t / time.Millisecond)) }
	}
	return mvcc.Observers{
		IndexCompaction: ms(d.indexCompactionPause),
		CompactionBatch: ms(d.dbCompactionPause),
		Compaction: func(t time.Duration, deleted int) {
			d.dbCompactionTotal.Observe(float64(t / time.Millisecond))
			d.dbCompactionKeys.Add(float64(deleted))
			d.dbCompactionLast.Set(float64(time.Now().Unix()))
		},
		Hash:      func(t time.Duration) { d.hash.Observe(t.Seconds()) },
		HashByRev: func(t time.Duration) { d.hashRev.Observe(t.Seconds()) },
	}
}

func (d earlyMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{d.walFsync, d.walWrite, d.backendCommit, d.backendDefrag, d.backendSnapshot,
		d.indexCompactionPause, d.dbCompactionPause, d.dbCompactionTotal, d.dbCompactionKeys, d.dbCompactionLast, d.hash, d.hashRev, d.leaseTTL}
}

func newEarlyMetrics() earlyMetrics {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "disk", Name: name,
			Help: help, Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	}
	mh := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: name, Help: help, Buckets: buckets})
	}
	return earlyMetrics{
		walFsync:      h("wal_fsync_duration_seconds", "The latency distributions of fsync called by WAL."),
		walWrite:      h("wal_write_duration_seconds", "The latency distributions of write called by WAL."),
		backendCommit: h("backend_commit_duration_seconds", "The latency distributions of commit called by backend."),
		backendDefrag: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "disk", Name: "backend_defrag_duration_seconds",
			Help: "The latency distribution of backend defragmentation.", Buckets: prometheus.ExponentialBuckets(.1, 2, 13)}),
		backendSnapshot: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "disk", Name: "backend_snapshot_duration_seconds",
			Help: "The latency distribution of backend snapshots.", Buckets: prometheus.ExponentialBuckets(.01, 2, 17)}),
		indexCompactionPause: mh("index_compaction_pause_duration_milliseconds", "Bucketed histogram of index compaction pause duration.", prometheus.ExponentialBuckets(0.5, 2, 14)),
		dbCompactionPause:    mh("db_compaction_pause_duration_milliseconds", "Bucketed histogram of db compaction pause duration.", prometheus.ExponentialBuckets(1, 2, 13)),
		dbCompactionTotal:    mh("db_compaction_total_duration_milliseconds", "Bucketed histogram of db compaction total duration.", prometheus.ExponentialBuckets(100, 2, 14)),
		dbCompactionKeys: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "db_compaction_keys_total",
			Help: "Total number of db keys compacted."}),
		dbCompactionLast: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "db_compaction_last",
			Help: "The unix time of the last db compaction. Resets to 0 on start."}),
		hash: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "mvcc", Name: "hash_duration_seconds",
			Help: "The latency distribution of storage hash operation.", Buckets: prometheus.ExponentialBuckets(.01, 2, 15)}),
		hashRev: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "mvcc", Name: "hash_rev_duration_seconds",
			Help: "The latency distribution of storage hash by revision operation.", Buckets: prometheus.ExponentialBuckets(.01, 2, 15)}),
		// 1 second to 3 months, as etcd.
		leaseTTL: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd_debugging", Subsystem: "lease", Name: "ttl_total",
			Help: "Bucketed histogram of lease TTLs.", Buckets: prometheus.ExponentialBuckets(1, 2, 24)}),
	}
}

func newMetrics(c *config.Config, cl *membership.Cluster, n *raftnode.Node, wal *raftlog.Log, st *mvcc.Store, reg *apply.Registry, ap *apply.Applied, lm *leasemgr.Manager, az *authz.Store, disk earlyMetrics) (*Metrics, error) {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gauge := func(ns, sub, name, help string, f func() float64) {
		r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, f))
	}
	counter := func(ns, sub, name, help string, f func() float64) {
		r.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: name, Help: help}, f))
	}
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	gauge("etcd", "server", "has_leader", "Whether or not a leader exists. 1 is existence, 0 is not.", func() float64 { return b2f(n.Leader() != 0) })
	gauge("etcd", "server", "is_leader", "Whether or not this member is a leader. 1 if is, 0 otherwise.", func() float64 { return b2f(n.Leader() == n.ID()) })
	counter("etcd", "server", "leader_changes_seen_total", "The number of leader changes seen.", func() float64 { return float64(n.LeaderChanges()) })
	counter("etcd", "server", "heartbeat_send_failures_total", "The total number of leader heartbeat send failures (likely overloaded from slow disk).",
		func() float64 { return float64(n.LateHeartbeats()) })
	// Gauges in etcd too: they are raft indexes, which a snapshot install
	// may move.
	gauge("etcd", "server", "proposals_committed_total", "The total number of consensus proposals committed.", func() float64 { return float64(n.CommitIndex()) })
	gauge("etcd", "server", "proposals_applied_total", "The total number of consensus proposals applied.", func() float64 { return float64(ap.Index()) })
	gauge("kvd", "raft", "entry_batching", "1 while this member may put several writes in one raft entry (every member reads such entries), 0 otherwise.",
		func() float64 { return b2f(n.Batching()) })
	counter("kvd", "raft", "batched_entries_total", "Raft entries carrying several writes that this member handed to raft.", func() float64 { return float64(n.BatchedEntries()) })
	gauge("etcd", "server", "proposals_pending", "The current number of pending proposals to commit.", func() float64 { return float64(reg.Len()) })
	gauge("etcd", "mvcc", "db_total_size_in_bytes", "Total size of the underlying database physically allocated in bytes.", func() float64 { return float64(st.Backend().Size()) })
	gauge("etcd", "mvcc", "db_total_size_in_use_in_bytes", "Total size of the underlying database logically in use in bytes.", func() float64 { return float64(st.Backend().SizeInUse()) })
	gauge("etcd_debugging", "mvcc", "current_revision", "The current revision of store.", func() float64 { return float64(st.Rev()) })
	gauge("etcd_debugging", "mvcc", "compact_revision", "The revision of the last compaction in store.", func() float64 { return float64(st.CompactRev()) })
	gauge("etcd", "server", "is_learner", "Whether or not this member is a learner. 1 if is, 0 otherwise.", func() float64 { return b2f(cl.IsLearner(cl.Self())) })
	quota := float64(c.QuotaBytes())
	gauge("etcd", "server", "quota_backend_bytes", "Current backend storage quota size in bytes.", func() float64 { return quota })
	gauge("etcd_debugging", "mvcc", "keys_total", "Total number of keys.", func() float64 { return float64(st.Keys()) })
	// The mvcc counters are the store's own (mvcc/stats.go); a scrape
	// reads them.
	counter("etcd", "mvcc", "range_total", "Total number of ranges seen by this member.", func() float64 { return float64(st.Ops().Ranges) })
	counter("etcd", "mvcc", "put_total", "Total number of puts seen by this member.", func() float64 { return float64(st.Ops().Puts) })
	counter("etcd", "mvcc", "delete_total", "Total number of deletes seen by this member.", func() float64 { return float64(st.Ops().Deletes) })
	counter("etcd", "mvcc", "txn_total", "Total number of txns seen by this member.", func() float64 { return float64(st.Ops().Txns) })
	gauge("etcd_debugging", "mvcc", "total_put_size_in_bytes", "The total size of put kv pairs seen by this member.", func() float64 { return float64(st.Ops().PutBytes) })
	gauge("etcd_debugging", "auth", "revision", "The current revision of auth store.", func() float64 { return float64(az.Revision()) })
	counter("etcd_debugging", "lease", "granted_total", "The total number of granted leases.", func() float64 { return float64(lm.Counts().Granted) })
	counter("etcd_debugging", "lease", "revoked_total", "The total number of revoked leases.", func() float64 { return float64(lm.Counts().Revoked) })
	counter("etcd_debugging", "lease", "renewed_total", "The number of renewed leases seen by the leader.", func() float64 { return float64(lm.Counts().Renewed) })
	counter("etcd_debugging", "server", "lease_expired_total", "The total number of expired leases.", func() float64 { return float64(lm.Counts().Expired) })
	// A gauge in etcd too.
	gauge("etcd", "disk", "wal_write_bytes_total", "Total number of bytes written in WAL.", func() float64 { return float64(wal.WrittenBytes()) })
	gauge("os", "fd", "used", "The number of used file descriptors.", fdUsed)
	gauge("os", "fd", "limit", "The file descriptor limit.", fdLimit)

	// kvd's own.
	gauge("kvd", "backend", "buffered_writes", "Key writes applied and held in the write-back buffer, not yet committed to the backend.", func() float64 {
		w, _ := st.Buffered()
		return float64(w)
	})
	gauge("kvd", "backend", "buffered_bytes", "Estimated bytes of the writes held in the write-back buffer, not yet committed to the backend.", func() float64 {
		_, b := st.Buffered()
		return float64(b)
	})
	registerQueues(r, n)
	info := func(name, help, label, value string) {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "server", Name: name, Help: help}, []string{label})
		g.WithLabelValues(value).Set(1)
		r.MustRegister(g)
	}
	info("version", "Which version is running. 1 for 'server_version' label with current version.", "server_version", Version)
	info("id", "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.", "server_id", membership.HexID(cl.Self()))
	info("go_version", "Which Go version server is running with. 1 for 'server_go_version' label with current version.", "server_go_version", runtime.Version())
	cv := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "cluster", Name: "version",
		Help: "Which version is running. 1 for 'cluster_version' label with current cluster version"}, []string{"cluster_version"})
	cv.WithLabelValues(clusterVersion).Set(1)
	eng := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "kvd", Subsystem: "backend", Name: "engine_info",
		Help: "The storage engine of this member's backend. 1 for the 'engine' label with its name."}, []string{"engine"})
	name, err := engine.Canonical(c.Backend.Engine)
	if err != nil {
		return nil, err
	}
	eng.WithLabelValues(name).Set(1)
	features, err := c.Features()
	if err != nil {
		return nil, fmt.Errorf("feature-gates: %w", err)
	}
	fe := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "etcd_server_feature_enabled",
		Help: "Whether or not a feature is enabled. 1 is enabled, 0 is not."}, []string{"name", "stage"})
	for name, on := range features {
		fe.WithLabelValues(name, config.FeatureStage(name)).Set(b2f(on))
	}
	r.MustRegister(cv, eng, fe, newKnownPeers(cl))

	mt := &Metrics{
		Registry:  r,
		watchers:  prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "watcher_total", Help: "Total number of watchers."}),
		streams:   prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "watch_stream_total", Help: "Total number of watch streams."}),
		events:    prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "events_total", Help: "Total number of events sent by this member."}),
		unsynced:  prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "pending_events_total", Help: "Total number of unsynced watchers (kvd: watchers catching up)."}),
		slowWatch: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "slow_watcher_total", Help: "Total number of unsynced slow watchers."}),

		slowApplies: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "slow_apply_total",
			Help: "The total number of slow apply requests (likely overloaded from slow disk)."}),
		slowReadIndexes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "slow_read_indexes_total",
			Help: "The total number of pending read indexes not in sync with leader's or timed out read index requests."}),
		proposalsFailed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "proposals_failed_total",
			Help: "The total number of failed proposals seen."}),
		readIndexesFailed: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "read_indexes_failed_total",
			Help: "The total number of failed read indexes seen."}),
		peerRTT: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "network", Name: "peer_round_trip_time_seconds",
			Help: "Round-Trip-Time histogram between peers", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"To"}),
		snapshotInstalling: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "server", Name: "snapshot_apply_in_progress_total",
			Help: "1 if the server is applying the incoming snapshot. 0 if none."}),
		learnerPromotions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "learner_promote_successes",
			Help: "The total number of successful learner promotions while this member is leader."}),
		grpc: newGRPCMetrics(c),
	}
	snapCounter := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network", Name: name, Help: help}, []string{label})
	}
	mt.snapSent = snapCounter("snapshot_send_success", "Total number of successful snapshot sends", "To")
	mt.snapSendFailed = snapCounter("snapshot_send_failures", "Total number of snapshot send failures", "To")
	mt.snapReceived = snapCounter("snapshot_receive_success", "Total number of successful snapshot receives", "From")
	r.MustRegister(disk.collectors()...)
	r.MustRegister(mt.watchers, mt.streams, mt.events, mt.unsynced, mt.slowWatch, mt.snapSent, mt.snapSendFailed, mt.snapReceived,
		mt.slowApplies, mt.slowReadIndexes, mt.proposalsFailed, mt.readIndexesFailed, mt.peerRTT, mt.snapshotInstalling, mt.learnerPromotions, mt.grpc.server)
	r.MustRegister(mt.grpc.collectors()...)
	return mt, nil
}

// PeerRTT observes the round trip time of a probe of peer to.
func (m *Metrics) PeerRTT(to uint64, d time.Duration) {
	m.peerRTT.WithLabelValues(membership.HexID(to)).Observe(d.Seconds())
}

// fdUsed counts this process's open file descriptors (etcd's os_fd_used).
func fdUsed() float64 {
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return float64(len(fds))
}

// fdLimit is the soft limit on open file descriptors (etcd's os_fd_limit).
func fdLimit() float64 {
	var l unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
		return 0
	}
	return float64(l.Cur)
}

// registerQueues exports the depth of each actor's mailbox, read at scrape
// time: kvd_actor_queue_length{actor, mailbox}. The watch hub's is added by
// registerLateMetrics (the hub is made after the metrics).
func registerQueues(r *prometheus.Registry, n *raftnode.Node) {
	q := func(actor, mailbox string, f func(raftnode.Queues) int) {
		r.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "kvd", Subsystem: "actor", Name: "queue_length",
			Help:        "Messages waiting in an actor's mailbox.",
			ConstLabels: prometheus.Labels{"actor": actor, "mailbox": mailbox}},
			func() float64 { return float64(f(n.QueueLengths())) }))
	}
	q("raft", "step", func(q raftnode.Queues) int { return q.Step })
	q("raft", "propose", func(q raftnode.Queues) int { return q.Propose })
	q("raft", "read", func(q raftnode.Queues) int { return q.Read })
	q("raft", "control", func(q raftnode.Queues) int { return q.Control })
	q("wal", "appends", func(q raftnode.Queues) int { return q.Appends })
	q("applier", "applies", func(q raftnode.Queues) int { return q.Applies })
}

// knownPeers is etcd_network_known_peers: 1 for every member of the
// cluster, this one included as in etcd, read from the member list at
// scrape time.
type knownPeers struct {
	cl   *membership.Cluster
	desc *prometheus.Desc
}

func newKnownPeers(cl *membership.Cluster) *knownPeers {
	return &knownPeers{cl: cl, desc: prometheus.NewDesc("etcd_network_known_peers", "The current number of known peers.", []string{"Local", "Remote"}, nil)}
}

func (k *knownPeers) Describe(ch chan<- *prometheus.Desc) { ch <- k.desc }

func (k *knownPeers) Collect(ch chan<- prometheus.Metric) {
	self := membership.HexID(k.cl.Self())
	for _, m := range k.cl.Members() {
		ch <- prometheus.MustNewConstMetric(k.desc, prometheus.GaugeValue, 1, self, membership.HexID(m.ID))
	}
}

// peerStats exports the transport's per-peer counters at scrape time with
// etcd's names: bytes sent and received, messages dropped, and whether
// the stream to the peer is up.
type peerStats struct {
	self                        string
	health                      func() []transport.PeerStatus
	sent, received, failed, act *prometheus.Desc
}

func newPeerStats(self uint64, health func() []transport.PeerStatus) *peerStats {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("etcd_network_"+name, help, labels, nil)
	}
	return &peerStats{
		self:     membership.HexID(self),
		health:   health,
		sent:     d("peer_sent_bytes_total", "The total number of bytes sent to peers.", "To"),
		received: d("peer_received_bytes_total", "The total number of bytes received from peers.", "From"),
		failed:   d("peer_sent_failures_total", "The total number of send failures from peers.", "To"),
		act:      d("active_peers", "The current number of active peer connections.", "Local", "Remote"),
	}
}

func (p *peerStats) Describe(ch chan<- *prometheus.Desc) {
	ch <- p.sent
	ch <- p.received
	ch <- p.failed
	ch <- p.act
}

func (p *peerStats) Collect(ch chan<- prometheus.Metric) {
	for _, s := range p.health() {
		id := membership.HexID(s.ID)
		ch <- prometheus.MustNewConstMetric(p.sent, prometheus.CounterValue, float64(s.SentBytes), id)
		ch <- prometheus.MustNewConstMetric(p.received, prometheus.CounterValue, float64(s.ReceivedBytes), id)
		ch <- prometheus.MustNewConstMetric(p.failed, prometheus.CounterValue, float64(s.Dropped), id)
		active := 0.0
		if s.Active {
			active = 1
		}
		ch <- prometheus.MustNewConstMetric(p.act, prometheus.GaugeValue, active, p.self, id)
	}
}

// registerLateMetrics adds what is made after the metrics: the peer
// transport's counters, the watch hub's mailbox, the snapshot install
// gauge, the API's counters and defragment gauge. It runs before the actors start
// and the API serves.
func registerLateMetrics(mt *Metrics, disk earlyMetrics, cl *membership.Cluster, tr *transport.Transport, hub *watchhub.Hub, a *Actors, s *api.Server) {
	s.ProposalsFailed, s.ReadIndexesFailed = mt.proposalsFailed, mt.readIndexesFailed
	s.ClientRequests = mt.grpc.requests.Inc
	s.LearnerPromotions = mt.learnerPromotions
	s.DefragDuration, s.SnapshotDuration = disk.backendDefrag, disk.backendSnapshot
	mt.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "disk", Name: "defrag_inflight",
		Help: "Whether or not defrag is active on the member. 1 means active, 0 means not."}, func() float64 {
		if s.Defragmenting() {
			return 1
		}
		return 0
	}))
	if install := a.WAL.InstallSnapshot; install != nil {
		a.WAL.InstallSnapshot = func(ctx context.Context, snap *raftpb.Snapshot) error {
			defer mt.installing()()
			return install(ctx, snap)
		}
	}
	mt.Registry.MustRegister(newPeerStats(cl.Self(), tr.PeerHealth),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "kvd", Subsystem: "actor", Name: "queue_length",
			Help:        "Messages waiting in an actor's mailbox.",
			ConstLabels: prometheus.Labels{"actor": "watch-hub", "mailbox": "inbox"}},
			func() float64 { return float64(hub.QueueLength()) }))
}

// installing marks a snapshot install in etcd_server_snapshot_apply_in_progress_total
// until the returned func is called.
func (m *Metrics) installing() func() {
	m.snapshotInstalling.Set(1)
	return func() { m.snapshotInstalling.Set(0) }
}

// SnapshotSent counts a raft snapshot send to a peer by outcome.
func (m *Metrics) SnapshotSent(to uint64, ok bool) {
	if ok {
		m.snapSent.WithLabelValues(membership.HexID(to)).Inc()
	} else {
		m.snapSendFailed.WithLabelValues(membership.HexID(to)).Inc()
	}
}

// SnapshotReceived counts a raft snapshot received from a peer.
func (m *Metrics) SnapshotReceived(from uint64) {
	m.snapReceived.WithLabelValues(membership.HexID(from)).Inc()
}

// watchMetrics adapts Metrics to the watch hub's hooks.
type watchMetrics struct{ m *Metrics }

var _ watchhub.Metrics = watchMetrics{}

func (w watchMetrics) Watchers(delta int) { w.m.watchers.Add(float64(delta)) }
func (w watchMetrics) Streams(delta int)  { w.m.streams.Add(float64(delta)) }
func (w watchMetrics) EventsSent(n int)   { w.m.events.Add(float64(n)) }
func (w watchMetrics) Slow(unsynced, victims int) {
	w.m.unsynced.Set(float64(unsynced))
	w.m.slowWatch.Set(float64(unsynced + victims))
}
