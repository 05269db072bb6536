// Package config is kvd's configuration: one YAML file whose keys are named
// like etcd's --config-file keys where the meaning is the same, plus kvd's own
// backend: and tracing: sections, and the command-line flags that override it.
//
// The life of a Config: defaults, then the file (Load), then the flags given on
// the command line (Parse), then Complete fills the values derived from others
// (data-dir from name, initial-cluster from name and peer URLs, wal-dir from
// data-dir), then Validate. After Parse every field holds a concrete value.
package config

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Engine names accepted in backend.engine.
const (
	EngineBolt   = "bolt"
	EngineBadger = "badger"
)

// Initial cluster states, as in etcd.
const (
	ClusterStateNew      = "new"
	ClusterStateExisting = "existing"
)

// Auto compaction modes, as in etcd.
const (
	CompactionPeriodic = "periodic"
	CompactionRevision = "revision"
)

// Levels of metrics detail (metrics), as in etcd.
const (
	MetricsBasic     = "basic"
	MetricsExtensive = "extensive"
)

// Tracing protocols, named like OTEL_EXPORTER_OTLP_PROTOCOL values.
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// DefaultQuotaBackendBytes is the backend quota used when quota-backend-bytes
// is 0 (etcd's DefaultQuotaBytes).
const DefaultQuotaBackendBytes int64 = 2 << 30

// BadgerMinMemTableSize is the least backend.badger.mem-table-size: a
// Badger update holds 15% of a memtable, and kvd commits up to 8 MiB in one
// (100/15 of 8 MiB, rounded up to whole MiB).
const BadgerMinMemTableSize = 54 << 20

// BadgerDefaultMemTableSize is the memtable when
// backend.badger.mem-table-size is unset. Badger's own default, 64 MiB,
// flushes 2.5 times as often: in a run at 4 GiB of 1 KiB values it doubled
// put and range p99 and raised RSS by a third (docs/benchmarks.md, "Up to
// 4G").
const BadgerDefaultMemTableSize = 160 << 20

// Config is a member's whole configuration. Field comments give the YAML key's
// meaning; the yaml tag is the key and, for fields with a flag, the flag name.
type Config struct {
	// Name is this member's name, its key in initial-cluster.
	Name string `yaml:"name"`
	// DataDir holds the member's WAL, snapshots and backend. Empty means
	// "<name>.kvd" (Complete fills it).
	DataDir string `yaml:"data-dir"`
	// WALDir is where the WAL lives. Empty means "<data-dir>/member/wal"
	// (Complete fills it).
	WALDir string `yaml:"wal-dir"`

	// SnapshotCount is the number of applied requests (etcd's committed
	// transactions; a batched entry counts each request it carries) that
	// triggers a raft snapshot (and lets the WAL be truncated behind it).
	SnapshotCount uint64 `yaml:"snapshot-count"`
	// SnapshotCatchupEntries is how many requests' entries the leader keeps
	// after a snapshot so slow followers can catch up without a snapshot
	// transfer (etcd's entries, one request each).
	SnapshotCatchupEntries uint64 `yaml:"snapshot-catchup-entries"`
	// MaxSnapshots and MaxWALs bound the files kept; 0 keeps all.
	MaxSnapshots uint `yaml:"max-snapshots"`
	MaxWALs      uint `yaml:"max-wals"`

	// HeartbeatInterval is the raft tick in milliseconds.
	HeartbeatInterval uint `yaml:"heartbeat-interval"`
	// ElectionTimeout is in milliseconds; it must be at least five heartbeats.
	ElectionTimeout uint `yaml:"election-timeout"`
	// InitialElectionTickAdvance lets a fresh member elect sooner.
	InitialElectionTickAdvance bool `yaml:"initial-election-tick-advance"`
	// PreVote enables raft's pre-vote phase.
	PreVote bool `yaml:"pre-vote"`

	// Comma-separated URL lists, as in etcd's file and flags.
	ListenClientURLs         string `yaml:"listen-client-urls"`
	AdvertiseClientURLs      string `yaml:"advertise-client-urls"`
	ListenPeerURLs           string `yaml:"listen-peer-urls"`
	InitialAdvertisePeerURLs string `yaml:"initial-advertise-peer-urls"`
	// ListenMetricsURLs serves /metrics and /health apart from the client
	// URLs; empty serves none.
	ListenMetricsURLs string `yaml:"listen-metrics-urls"`

	// InitialCluster is "name=peerURL,name=peerURL,...". Empty means this
	// member alone: "<name>=<initial-advertise-peer-urls>" (Complete fills it).
	InitialCluster      string `yaml:"initial-cluster"`
	InitialClusterState string `yaml:"initial-cluster-state"`
	InitialClusterToken string `yaml:"initial-cluster-token"`
	StrictReconfigCheck bool   `yaml:"strict-reconfig-check"`
	ForceNewCluster     bool   `yaml:"force-new-cluster"`

	// QuotaBackendBytes is the backend size limit; 0 means
	// DefaultQuotaBackendBytes, a negative value no quota (etcd's).
	QuotaBackendBytes int64 `yaml:"quota-backend-bytes"`
	// BackendBatchInterval and BackendBatchLimit bound how long and how many
	// applies share one backend commit; 0 means the engine's default.
	BackendBatchInterval Duration `yaml:"backend-batch-interval"`
	BackendBatchLimit    int      `yaml:"backend-batch-limit"`

	MaxTxnOps             uint     `yaml:"max-txn-ops"`
	MaxRequestBytes       uint     `yaml:"max-request-bytes"`
	MaxConcurrentStreams  uint     `yaml:"max-concurrent-streams"`
	GRPCKeepAliveMinTime  Duration `yaml:"grpc-keepalive-min-time"`
	GRPCKeepAliveInterval Duration `yaml:"grpc-keepalive-interval"`
	GRPCKeepAliveTimeout  Duration `yaml:"grpc-keepalive-timeout"`

	// AutoCompactionMode is "periodic" or "revision". AutoCompactionRetention
	// is, for periodic, hours as an integer or a Go duration ("1h30m"); for
	// revision, a revision count. "0" disables auto compaction.
	AutoCompactionMode      string `yaml:"auto-compaction-mode"`
	AutoCompactionRetention string `yaml:"auto-compaction-retention"`
	CompactionBatchLimit    int    `yaml:"compaction-batch-limit"`

	// InitialCorruptCheck compares this member's hash with its peers' before
	// serving. ExperimentalInitialCorruptCheck is etcd's older name for it,
	// the InitialCorruptCheck feature gate etcd v3.7's; Complete folds both in.
	InitialCorruptCheck             bool     `yaml:"initial-corrupt-check"`
	ExperimentalInitialCorruptCheck bool     `yaml:"experimental-initial-corrupt-check"`
	CorruptCheckTime                Duration `yaml:"corrupt-check-time"`
	// CompactHashCheckTime is how often the leader compares compaction
	// hashes with its followers' when the CompactHashCheck gate is on.
	CompactHashCheckTime Duration `yaml:"compact-hash-check-time"`
	// WarningApplyDuration logs applies slower than this.
	WarningApplyDuration Duration `yaml:"warning-apply-duration"`
	// WatchProgressNotifyInterval is the period of progress notifications
	// to watchers that asked for them (etcd's default 10m).
	WatchProgressNotifyInterval Duration `yaml:"watch-progress-notify-interval"`
	// UnsafeNoFsync skips WAL fsyncs. For tests only: a crash loses data.
	UnsafeNoFsync bool `yaml:"unsafe-no-fsync"`

	// AuthToken is "simple" or "jwt,<options>" as in etcd.
	AuthToken    string `yaml:"auth-token"`
	AuthTokenTTL uint   `yaml:"auth-token-ttl"`
	BcryptCost   uint   `yaml:"bcrypt-cost"`
	// AuthPlugins are out-of-process authenticators and authorizers. A list
	// of them cannot be spelled as a flag, so this is a file key only.
	// Complete fills each plugin's defaults.
	AuthPlugins []AuthPlugin `yaml:"auth-plugins"`

	ClientTLS TLS `yaml:"client-transport-security"`
	PeerTLS   TLS `yaml:"peer-transport-security"`

	// LogLevel is debug, info, warn, error, panic or fatal. LogOutputs are
	// "stderr", "stdout", "default" (stderr) or file paths.
	LogLevel    string   `yaml:"log-level"`
	LogOutputs  []string `yaml:"log-outputs"`
	LogFormat   string   `yaml:"log-format"`
	EnablePprof bool     `yaml:"enable-pprof"`
	// Metrics is etcd's --metrics: "basic" exports the gRPC server
	// counters, "extensive" adds the grpc_server_handling_seconds
	// histogram.
	Metrics string `yaml:"metrics"`

	// FeatureGates is etcd's feature-gates list, "Name=true,Name=false".
	// kvd acts on LeaseCheckpoint, LeaseCheckpointPersist (always on in kvd,
	// as in etcd v3.6+), InitialCorruptCheck (Complete folds it into
	// initial-corrupt-check), CompactHashCheck (compact-hash-check-time) and
	// FastLeaseKeepAlive; the other etcd gates are
	// refused unless given their default (unsupportedFeatureGates).
	FeatureGates string `yaml:"feature-gates"`

	Backend Backend `yaml:"backend"`
	Tracing Tracing `yaml:"tracing"`
}

// TLS is etcd's client-transport-security / peer-transport-security block
// (pkg/tlsconf turns it into TLS configurations). The files are read again
// at each handshake when they changed, so rotated certificates need no
// restart.
type TLS struct {
	// CertFile and KeyFile are the certificate the member serves; it also
	// presents it when it connects to a member, unless ClientCertFile is set.
	CertFile string `yaml:"cert-file"`
	KeyFile  string `yaml:"key-file"`
	// ClientCertFile and ClientKeyFile are the certificate the member
	// presents when it connects, as a client, to another member (peer
	// streams and snapshots for the peer block; member-to-member client
	// calls for the client block).
	ClientCertFile string `yaml:"client-cert-file"`
	ClientKeyFile  string `yaml:"client-key-file"`
	// ClientCertAuth requires and verifies client certificates. As in etcd,
	// TrustedCAFile alone requires them too.
	ClientCertAuth bool   `yaml:"client-cert-auth"`
	TrustedCAFile  string `yaml:"trusted-ca-file"`
	// AutoTLS generates a self-signed certificate under
	// <data-dir>/fixtures/client or fixtures/peer when no cert-file is given.
	AutoTLS bool `yaml:"auto-tls"`
	// AllowedCNs and AllowedHostnames (exclusive) restrict the certificates
	// accepted from the other side: its verified certificate's CommonName
	// must be one of AllowedCNs, or the certificate must be valid for one
	// of AllowedHostnames.
	AllowedCNs       []string `yaml:"allowed-cn"`
	AllowedHostnames []string `yaml:"allowed-hostname"`
}

// Empty reports whether no TLS material or mode is configured.
func (t TLS) Empty() bool {
	return t.CertFile == "" && t.KeyFile == "" && t.ClientCertFile == "" && t.ClientKeyFile == "" &&
		!t.ClientCertAuth && t.TrustedCAFile == "" && !t.AutoTLS && len(t.AllowedCNs) == 0 && len(t.AllowedHostnames) == 0
}

// Auth plugin kinds: which of the plugin protocol's services kvd calls.
const (
	AuthPluginAuthenticator = "authenticator"
	AuthPluginAuthorizer    = "authorizer"
)

// Auth plugin on-failure values: what a call gets while its plugin is down or
// too slow to answer.
const (
	OnFailureDeny = "deny"
	OnFailureSkip = "skip"
)

// Auth plugin defaults, applied by Complete. An authorizer is on every
// request's path, so a hung one must fail fast; an authenticator is asked
// at login, where bcrypt checks of a burst of logins or a first fetch of
// an identity provider's keys take longer.
const (
	DefaultAuthPluginTimeout          = Duration(500 * time.Millisecond)
	DefaultAuthenticatorPluginTimeout = Duration(2 * time.Second)
	DefaultAuthPluginCacheTTL         = Duration(5 * time.Second)
)

// AuthPlugin is one entry of the auth-plugins list: a process kvd starts and
// calls over the plugin protocol (pkg/pluginsdk).
type AuthPlugin struct {
	// Name tells plugins apart in logs, metrics and errors, so it must be
	// unique.
	Name string `yaml:"name"`
	// Kind is "authenticator" or "authorizer"; it picks the protocol service
	// kvd expects the process to serve.
	Kind string `yaml:"kind"`
	// Command is run as given, without a shell; whether it exists is checked
	// when the plugin starts, not when the file is loaded.
	Command string `yaml:"command"`
	// Args are passed as they are, so values need no shell quoting.
	Args []string `yaml:"args"`
	// Env is added to kvd's own environment for the plugin process, to pass
	// settings and secrets without putting them on its command line.
	Env map[string]string `yaml:"env"`
	// Timeout bounds each call, so a stuck plugin cannot stall requests;
	// 0 or absent means DefaultAuthPluginTimeout (authorizers) or
	// DefaultAuthenticatorPluginTimeout.
	Timeout Duration `yaml:"timeout"`
	// OnFailure is "deny" (the default: fail closed) or "skip" (go on as if
	// the plugin had no opinion): what a call gets while the plugin is down
	// or slower than Timeout.
	OnFailure string `yaml:"on-failure"`
	// CacheTTL spares the plugin a call for a repeated request: an allow
	// (authorizer) or an accepted token (authenticator) is reused this long.
	// A pointer, so that an explicit 0 (no caching) differs from absent
	// (DefaultAuthPluginCacheTTL).
	CacheTTL *Duration `yaml:"cache-ttl"`
}

// withDefaults returns p with its absent fields set to their defaults.
func (p AuthPlugin) withDefaults() AuthPlugin {
	if p.Timeout == 0 {
		p.Timeout = DefaultAuthPluginTimeout
		if p.Kind == AuthPluginAuthenticator {
			p.Timeout = DefaultAuthenticatorPluginTimeout
		}
	}
	if p.OnFailure == "" {
		p.OnFailure = OnFailureDeny
	}
	if p.CacheTTL == nil {
		ttl := DefaultAuthPluginCacheTTL
		p.CacheTTL = &ttl
	}
	return p
}

// Backend chooses the storage engine and carries each engine's options. Only
// the chosen engine's block is used; the other may stay at its defaults.
type Backend struct {
	// Engine is "bolt" or "badger".
	Engine string `yaml:"engine"`
	Bolt   Bolt   `yaml:"bolt"`
	Badger Badger `yaml:"badger"`
}

// Bolt holds bbolt's options.
type Bolt struct {
	// InitialMmapSize is the size bbolt maps up front, so readers do not block
	// on a remap while the file grows; 0 takes etcd's size (see
	// Config.BoltInitialMmapSize).
	InitialMmapSize int64 `yaml:"initial-mmap-size"`
	// FreelistType is "map" or "array".
	FreelistType string `yaml:"freelist-type"`
}

// Badger holds Badger's options. Zero values mean Badger's own defaults,
// but for the memtable (MemTableBytes).
type Badger struct {
	MemTableSize     int64 `yaml:"mem-table-size"`
	ValueLogFileSize int64 `yaml:"value-log-file-size"`
	ValueThreshold   int64 `yaml:"value-threshold"`
	NumCompactors    int   `yaml:"num-compactors"`
	BlockCacheSize   int64 `yaml:"block-cache-size"`
}

// MemTableBytes is the memtable Badger runs with: MemTableSize, or
// BadgerDefaultMemTableSize when unset.
func (b Badger) MemTableBytes() int64 {
	if b.MemTableSize > 0 {
		return b.MemTableSize
	}
	return BadgerDefaultMemTableSize
}

// Tracing configures OpenTelemetry export. The standard OTEL_* environment
// variables take precedence over it (see pkg/tracing).
type Tracing struct {
	Enabled bool `yaml:"enabled"`
	// Endpoint is the collector URL, e.g. "http://127.0.0.1:4317"; http means
	// no TLS. Empty means the OTLP default (localhost:4317 or :4318).
	Endpoint string `yaml:"endpoint"`
	// Protocol is "grpc" or "http/protobuf".
	Protocol string `yaml:"protocol"`
	// SamplingRatio is the fraction of new traces sampled, in [0, 1]; spans
	// with a sampled parent are always sampled.
	SamplingRatio float64 `yaml:"sampling-ratio"`
	ServiceName   string  `yaml:"service-name"`
}

// defaults is Default without the derived fields, so that a file or flag that
// sets name also moves data-dir and initial-cluster.
func defaults() *Config {
	return &Config{
		Name:                        "default",
		SnapshotCount:               10000,
		SnapshotCatchupEntries:      5000,
		MaxSnapshots:                5,
		MaxWALs:                     5,
		HeartbeatInterval:           100,
		ElectionTimeout:             1000,
		InitialElectionTickAdvance:  true,
		PreVote:                     true,
		ListenClientURLs:            "http://127.0.0.1:2379",
		AdvertiseClientURLs:         "http://127.0.0.1:2379",
		ListenPeerURLs:              "http://127.0.0.1:2380",
		InitialAdvertisePeerURLs:    "http://127.0.0.1:2380",
		InitialClusterState:         ClusterStateNew,
		InitialClusterToken:         "etcd-cluster",
		StrictReconfigCheck:         true,
		MaxTxnOps:                   128,
		MaxRequestBytes:             1572864,
		MaxConcurrentStreams:        math.MaxUint32,
		GRPCKeepAliveMinTime:        Duration(5 * time.Second),
		GRPCKeepAliveInterval:       Duration(2 * time.Hour),
		GRPCKeepAliveTimeout:        Duration(20 * time.Second),
		AutoCompactionMode:          CompactionPeriodic,
		AutoCompactionRetention:     "0",
		CompactionBatchLimit:        1000,
		CompactHashCheckTime:        Duration(time.Minute),
		WarningApplyDuration:        Duration(100 * time.Millisecond),
		WatchProgressNotifyInterval: Duration(10 * time.Minute),
		AuthToken:                   "simple",
		AuthTokenTTL:                300,
		BcryptCost:                  10,
		LogLevel:                    "info",
		LogOutputs:                  []string{"default"},
		LogFormat:                   "json",
		Metrics:                     MetricsBasic,
		Backend: Backend{
			Engine: EngineBolt,
			Bolt: Bolt{
				FreelistType: "map",
			},
		},
		Tracing: Tracing{
			Protocol:      ProtocolGRPC,
			SamplingRatio: 1.0,
			ServiceName:   "kvd",
		},
	}
}

// Default returns a valid single-member configuration: member "default" with
// data in ./default.kvd, clients on 127.0.0.1:2379, peers on 127.0.0.1:2380,
// bolt backend, tracing off.
func Default() *Config {
	c := defaults()
	c.Complete()
	return c
}

// BoltInitialMmapSize is the size of bbolt's first memory map:
// backend.bolt.initial-mmap-size when it is set; else, as etcd, the backend
// quota plus 10% when quota-backend-bytes sets a quota other than the
// default; else 0, bbolt's backend default (10 GiB). A file that outgrows
// its first map is mapped again, and the new map reads the whole file in
// (MAP_POPULATE): sized from the quota, the map holds the file until the
// quota alarm, and only the pages read are resident.
func (c *Config) BoltInitialMmapSize() int64 {
	if n := c.Backend.Bolt.InitialMmapSize; n > 0 {
		return n
	}
	if q := c.QuotaBackendBytes; q > 0 && q != DefaultQuotaBackendBytes {
		return q + q/10
	}
	return 0
}

// Complete fills the fields whose defaults derive from other fields. It only
// fills empty fields, so calling it twice is harmless.
func (c *Config) Complete() {
	if c.DataDir == "" {
		c.DataDir = c.Name + ".kvd"
	}
	if c.WALDir == "" {
		c.WALDir = filepath.Join(c.MemberDir(), "wal")
	}
	if c.InitialCluster == "" {
		var b strings.Builder
		for i, u := range splitList(c.InitialAdvertisePeerURLs) {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "%s=%s", c.Name, u)
		}
		c.InitialCluster = b.String()
	}
	if c.ExperimentalInitialCorruptCheck || c.FeatureEnabled("InitialCorruptCheck") {
		c.InitialCorruptCheck = true
	}
	for i := range c.AuthPlugins {
		c.AuthPlugins[i] = c.AuthPlugins[i].withDefaults()
	}
}

// Duration is a time.Duration that reads from YAML and flags as a Go duration
// string ("100ms", "2h"). A bare YAML integer is nanoseconds, which is how
// etcd's config file spells durations.
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// Set implements flag.Value.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// UnmarshalYAML accepts "1s" style strings and integer nanoseconds.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("want a duration such as \"100ms\"")
	}
	if n.Tag == "!!int" {
		var ns int64
		if err := n.Decode(&ns); err != nil {
			return err
		}
		*d = Duration(ns)
		return nil
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("want a duration such as \"100ms\", got %q", n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as a string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }
