package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftnode"
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
}

// diskHistograms are etcd's disk latency histograms. The WAL and the store,
// which the raft node and so the Metrics depend on, feed them; so they are
// made apart.
type diskHistograms struct {
	walFsync      prometheus.Histogram // etcd_disk_wal_fsync_duration_seconds
	backendCommit prometheus.Histogram // etcd_disk_backend_commit_duration_seconds
}

func newDiskHistograms() diskHistograms {
	h := func(name, help string) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "etcd", Subsystem: "disk", Name: name,
			Help: help, Buckets: prometheus.ExponentialBuckets(0.001, 2, 14)})
	}
	return diskHistograms{
		walFsync:      h("wal_fsync_duration_seconds", "The latency distributions of fsync called by WAL."),
		backendCommit: h("backend_commit_duration_seconds", "The latency distributions of commit called by backend."),
	}
}

func newMetrics(cl *membership.Cluster, n *raftnode.Node, st *mvcc.Store, reg *apply.Registry, ap *apply.Applied, disk diskHistograms) *Metrics {
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
	counter("etcd", "server", "proposals_committed_total", "The total number of consensus proposals committed.", func() float64 { return float64(n.CommitIndex()) })
	counter("etcd", "server", "proposals_applied_total", "The total number of consensus proposals applied.", func() float64 { return float64(ap.Index()) })
	gauge("etcd", "server", "proposals_pending", "The current number of pending proposals to commit.", func() float64 { return float64(reg.Len()) })
	gauge("etcd", "mvcc", "db_total_size_in_bytes", "Total size of the underlying database physically allocated in bytes.", func() float64 { return float64(st.Backend().Size()) })
	gauge("etcd", "mvcc", "db_total_size_in_use_in_bytes", "Total size of the underlying database logically in use in bytes.", func() float64 { return float64(st.Backend().SizeInUse()) })
	gauge("etcd_debugging", "mvcc", "current_revision", "The current revision of store.", func() float64 { return float64(st.Rev()) })
	gauge("etcd_debugging", "mvcc", "compact_revision", "The revision of the last compaction in store.", func() float64 { return float64(st.CompactRev()) })
	info := func(name, help, label, value string) {
		g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "server", Name: name, Help: help}, []string{label})
		g.WithLabelValues(value).Set(1)
		r.MustRegister(g)
	}
	info("version", "Which version is running. 1 for 'server_version' label with current version.", "server_version", Version)
	info("id", "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.", "server_id", membership.HexID(cl.Self()))

	mt := &Metrics{
		Registry:  r,
		watchers:  prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "watcher_total", Help: "Total number of watchers."}),
		streams:   prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "watch_stream_total", Help: "Total number of watch streams."}),
		events:    prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "events_total", Help: "Total number of events sent by this member."}),
		unsynced:  prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd_debugging", Subsystem: "mvcc", Name: "pending_events_total", Help: "Total number of unsynced watchers (kvd: watchers catching up)."}),
		slowWatch: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "etcd", Subsystem: "mvcc", Name: "slow_watcher_total", Help: "Total number of unsynced slow watchers."}),

		slowApplies: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "slow_apply_total",
			Help: "The total number of slow apply requests (likely overloaded from slow disk)."}),
		slowReadIndexes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "server", Name: "slow_read_indexes_total",
			Help: "The total number of pending read indexes not in sync with leader's or timed out read index requests."}),
	}
	snapCounter := func(name, help, label string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "etcd", Subsystem: "network", Name: name, Help: help}, []string{label})
	}
	mt.snapSent = snapCounter("snapshot_send_success", "Total number of successful snapshot sends", "To")
	mt.snapSendFailed = snapCounter("snapshot_send_failures", "Total number of snapshot send failures", "To")
	mt.snapReceived = snapCounter("snapshot_receive_success", "Total number of successful snapshot receives", "From")
	r.MustRegister(disk.walFsync, disk.backendCommit, mt.watchers, mt.streams, mt.events, mt.unsynced, mt.slowWatch, mt.snapSent, mt.snapSendFailed, mt.snapReceived,
		mt.slowApplies, mt.slowReadIndexes)
	return mt
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
