package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ErrVersion is returned by Parse when --version is given; the caller prints
// the version and exits 0. Parse returns flag.ErrHelp for -h/--help; the
// caller prints Usage and exits 0.
var ErrVersion = errors.New("version requested")

// RegisterFlags binds etcd-named flags to c's fields. Each flag's default is
// the field's current value, so parsing leaves fields whose flag is absent
// untouched: that is what lets flags override only the file keys they name.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Name, "name", c.Name, "human-readable name for this member")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "path to the data directory (default \"<name>.kvd\")")
	fs.StringVar(&c.WALDir, "wal-dir", c.WALDir, "path to the WAL directory (default \"<data-dir>/member/wal\")")
	fs.Uint64Var(&c.SnapshotCount, "snapshot-count", c.SnapshotCount, "number of committed transactions to trigger a snapshot to disk")
	fs.Uint64Var(&c.SnapshotCatchupEntries, "snapshot-catchup-entries", c.SnapshotCatchupEntries, "number of requests whose entries are kept after a snapshot for slow followers")
	fs.UintVar(&c.MaxSnapshots, "max-snapshots", c.MaxSnapshots, "maximum number of snapshot files to retain (0 is unlimited)")
	fs.UintVar(&c.MaxWALs, "max-wals", c.MaxWALs, "maximum number of wal files to retain (0 is unlimited)")
	fs.UintVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "time (in milliseconds) of a heartbeat interval")
	fs.UintVar(&c.ElectionTimeout, "election-timeout", c.ElectionTimeout, "time (in milliseconds) for an election to timeout")
	fs.BoolVar(&c.InitialElectionTickAdvance, "initial-election-tick-advance", c.InitialElectionTickAdvance, "whether to fast-forward initial election ticks on boot for faster election")
	fs.BoolVar(&c.PreVote, "pre-vote", c.PreVote, "enable the raft pre-vote phase")

	fs.StringVar(&c.ListenClientURLs, "listen-client-urls", c.ListenClientURLs, "list of URLs to listen on for client traffic")
	fs.StringVar(&c.AdvertiseClientURLs, "advertise-client-urls", c.AdvertiseClientURLs, "list of this member's client URLs to advertise to the public")
	fs.StringVar(&c.ListenPeerURLs, "listen-peer-urls", c.ListenPeerURLs, "list of URLs to listen on for peer traffic")
	fs.StringVar(&c.InitialAdvertisePeerURLs, "initial-advertise-peer-urls", c.InitialAdvertisePeerURLs, "list of this member's peer URLs to advertise to the rest of the cluster")
	fs.StringVar(&c.ListenMetricsURLs, "listen-metrics-urls", c.ListenMetricsURLs, "list of URLs to listen on for the metrics and health endpoints")
	fs.StringVar(&c.InitialCluster, "initial-cluster", c.InitialCluster, "initial cluster configuration for bootstrapping (default \"<name>=<initial-advertise-peer-urls>\")")
	fs.StringVar(&c.InitialClusterState, "initial-cluster-state", c.InitialClusterState, "initial cluster state ('new' or 'existing')")
	fs.StringVar(&c.InitialClusterToken, "initial-cluster-token", c.InitialClusterToken, "initial cluster token for the cluster during bootstrap")
	fs.BoolVar(&c.StrictReconfigCheck, "strict-reconfig-check", c.StrictReconfigCheck, "reject reconfiguration requests that would cause quorum loss")
	fs.BoolVar(&c.ForceNewCluster, "force-new-cluster", c.ForceNewCluster, "force to create a new one member cluster")

	fs.Int64Var(&c.QuotaBackendBytes, "quota-backend-bytes", c.QuotaBackendBytes, "raise alarms when backend size exceeds the given quota (0 defaults to 2 GiB, negative disables the quota)")
	fs.Var(&c.BackendBatchInterval, "backend-batch-interval", "maximum time before committing the backend transaction (0 is the engine default)")
	fs.IntVar(&c.BackendBatchLimit, "backend-batch-limit", c.BackendBatchLimit, "maximum operations before committing the backend transaction (0 is the engine default)")
	fs.UintVar(&c.MaxTxnOps, "max-txn-ops", c.MaxTxnOps, "maximum number of operations permitted in a transaction")
	fs.UintVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "maximum client request size in bytes the server will accept")
	fs.UintVar(&c.MaxConcurrentStreams, "max-concurrent-streams", c.MaxConcurrentStreams, "maximum concurrent streams that each client can open at a time")
	fs.Var(&c.GRPCKeepAliveMinTime, "grpc-keepalive-min-time", "minimum interval duration that a client should wait before pinging server")
	fs.Var(&c.GRPCKeepAliveInterval, "grpc-keepalive-interval", "frequency duration of server-to-client ping to check if a connection is alive (0 to disable)")
	fs.Var(&c.GRPCKeepAliveTimeout, "grpc-keepalive-timeout", "additional duration of wait before closing a non-responsive connection (0 to disable)")

	fs.StringVar(&c.AutoCompactionMode, "auto-compaction-mode", c.AutoCompactionMode, "interpret 'auto-compaction-retention' one of: periodic|revision")
	fs.StringVar(&c.AutoCompactionRetention, "auto-compaction-retention", c.AutoCompactionRetention, "auto compaction retention for mvcc key value store (0 disables); hours or a duration for periodic, revisions for revision")
	fs.IntVar(&c.CompactionBatchLimit, "compaction-batch-limit", c.CompactionBatchLimit, "maximum number of keys deleted in each compaction batch")

	fs.BoolVar(&c.InitialCorruptCheck, "initial-corrupt-check", c.InitialCorruptCheck, "check data corruption against peers before serving client traffic")
	fs.BoolVar(&c.ExperimentalInitialCorruptCheck, "experimental-initial-corrupt-check", c.ExperimentalInitialCorruptCheck, "deprecated: use --initial-corrupt-check")
	fs.Var(&c.WatchProgressNotifyInterval, "watch-progress-notify-interval", "duration of periodic watch progress notifications")
	fs.Var(&c.CorruptCheckTime, "corrupt-check-time", "duration between cluster corruption check passes (0 disables)")
	fs.Var(&c.CompactHashCheckTime, "compact-hash-check-time", "duration between the leader's checks of followers' compaction hashes (feature gate CompactHashCheck)")
	fs.Var(&c.WarningApplyDuration, "warning-apply-duration", "time length of an apply after which a warning is logged")
	fs.BoolVar(&c.UnsafeNoFsync, "unsafe-no-fsync", c.UnsafeNoFsync, "disable fsync, unsafe, will cause data loss")

	fs.StringVar(&c.AuthToken, "auth-token", c.AuthToken, "specify auth token type and options (simple or jwt,...)")
	fs.UintVar(&c.AuthTokenTTL, "auth-token-ttl", c.AuthTokenTTL, "the lifetime in seconds of the auth token")
	fs.UintVar(&c.BcryptCost, "bcrypt-cost", c.BcryptCost, "bcrypt cost for hashing auth passwords, in [4, 31]")

	registerTLSFlags(fs, &c.ClientTLS, "")
	registerTLSFlags(fs, &c.PeerTLS, "peer-")

	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "log level: debug, info, warn, error, panic or fatal")
	fs.Var((*stringList)(&c.LogOutputs), "log-outputs", "comma-separated log outputs: stderr, stdout, default or file paths")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "log format: json or console")
	fs.BoolVar(&c.EnablePprof, "enable-pprof", c.EnablePprof, "enable runtime profiling data via HTTP server under /debug/pprof")
	fs.StringVar(&c.Metrics, "metrics", c.Metrics, "level of detail for exported metrics: basic, or extensive to include the server-side gRPC histogram")
	fs.StringVar(&c.FeatureGates, "feature-gates", c.FeatureGates, "etcd feature gates, e.g. LeaseCheckpoint=true,LeaseCheckpointPersist=true")

	fs.StringVar(&c.Backend.Engine, "backend", c.Backend.Engine, "storage engine: bolt or badger")
	fs.StringVar(&c.Backend.Bolt.FreelistType, "backend-bbolt-freelist-type", c.Backend.Bolt.FreelistType, "bbolt freelist type: map or array")

	fs.BoolVar(&c.Tracing.Enabled, "tracing-enabled", c.Tracing.Enabled, "export traces over OTLP")
	fs.StringVar(&c.Tracing.Endpoint, "tracing-endpoint", c.Tracing.Endpoint, "OTLP collector URL, e.g. http://127.0.0.1:4317")
	fs.StringVar(&c.Tracing.Protocol, "tracing-protocol", c.Tracing.Protocol, "OTLP protocol: grpc or http/protobuf")
	fs.Float64Var(&c.Tracing.SamplingRatio, "tracing-sampling-ratio", c.Tracing.SamplingRatio, "fraction of new traces sampled, in [0, 1]")
	fs.StringVar(&c.Tracing.ServiceName, "tracing-service-name", c.Tracing.ServiceName, "service.name of exported spans")
}

func registerTLSFlags(fs *flag.FlagSet, t *TLS, prefix string) {
	who := "client"
	if prefix != "" {
		who = "peer"
	}
	fs.StringVar(&t.CertFile, prefix+"cert-file", t.CertFile, "path to the "+who+" server TLS cert file")
	fs.StringVar(&t.KeyFile, prefix+"key-file", t.KeyFile, "path to the "+who+" server TLS key file")
	fs.BoolVar(&t.ClientCertAuth, prefix+"client-cert-auth", t.ClientCertAuth, "enable "+who+" cert authentication")
	fs.StringVar(&t.TrustedCAFile, prefix+"trusted-ca-file", t.TrustedCAFile, "path to the "+who+" server TLS trusted CA file")
	fs.BoolVar(&t.AutoTLS, prefix+"auto-tls", t.AutoTLS, who+" TLS using generated certificates")
	fs.StringVar(&t.ClientCertFile, prefix+"client-cert-file", t.ClientCertFile, "path to the TLS cert file this member presents when it connects to another member's "+who+" URL (default the "+who+" cert-file)")
	fs.StringVar(&t.ClientKeyFile, prefix+"client-key-file", t.ClientKeyFile, "path to the key file of the "+who+" client-cert-file")
	// etcd's names: --peer-cert-allowed-cn, --peer-cert-allowed-hostname,
	// --client-cert-allowed-hostname (the client block's allowed-cn is a
	// file key only, as in etcd).
	if prefix != "" {
		fs.Var((*stringList)(&t.AllowedCNs), prefix+"cert-allowed-cn", "comma-separated list of allowed CNs for inter-peer TLS authentication")
		fs.Var((*stringList)(&t.AllowedHostnames), prefix+"cert-allowed-hostname", "comma-separated list of allowed SAN hostnames for inter-peer TLS authentication")
	} else {
		fs.Var((*stringList)(&t.AllowedHostnames), "client-cert-allowed-hostname", "comma-separated list of allowed SAN hostnames for client cert authentication")
	}
}

// stringList is a comma-separated flag; each use replaces the list.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	*s = splitList(v)
	return nil
}

// cli holds the flags that steer Parse rather than configure the member.
type cli struct {
	configFile  string
	configFile2 string // etcd's --config-file
	version     bool
}

func newFlagSet(c *Config, x *cli) *flag.FlagSet {
	fs := flag.NewFlagSet("kvd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&x.configFile, "config", "", "path to the YAML configuration file; flags given on the command line override its keys")
	fs.StringVar(&x.configFile2, "config-file", "", "alias of --config")
	fs.BoolVar(&x.version, "version", false, "print the version and exit")
	c.RegisterFlags(fs)
	return fs
}

// Parse is kvd's command line: --config FILE (or --config-file FILE) loads
// the file over the defaults, then the flags present in args override the
// keys they name, then derived fields are completed and the result validated.
// It prints nothing: it returns flag.ErrHelp for -h/--help, ErrVersion for
// --version, and flag errors as errors.
func Parse(args []string) (*Config, error) {
	// First pass: learn which file to load (and whether the args parse at
	// all) without touching the config the file will fill.
	var x cli
	fs := newFlagSet(defaults(), &x)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if x.version {
		return nil, ErrVersion
	}
	if err := checkEtcdEnv(fs); err != nil {
		return nil, err
	}
	path := x.configFile
	if x.configFile2 != "" {
		if path != "" && path != x.configFile2 {
			return nil, fmt.Errorf("--config %q and --config-file %q disagree", path, x.configFile2)
		}
		path = x.configFile2
	}

	c := defaults()
	if path != "" {
		if err := c.loadFile(path); err != nil {
			return nil, err
		}
	}
	// Second pass over the loaded config: flag.Parse calls Set only for the
	// flags present in args, so every other field keeps the file's value.
	if err := newFlagSet(c, &cli{}).Parse(args); err != nil {
		return nil, err
	}
	c.Complete()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	return c, nil
}

// Usage writes the command-line help to w.
func Usage(w io.Writer) {
	fs := newFlagSet(defaults(), &cli{})
	fs.SetOutput(w)
	fmt.Fprintf(w, "Usage: kvd [--config FILE] [flags]\n"+
		"       kvd plugins check --config FILE\n"+
		"       kvd snapshot status FILE [-w simple|table|json|fields]\n"+
		"       kvd snapshot restore FILE --data-dir DIR [etcdutl's restore flags] [--backend bolt|badger]\n"+
		"       kvd migrate --data-dir DIR --to bolt|badger [--config FILE]\n\n"+
		"Flags given on the command line override the keys of the config file.\n"+
		"kvd plugins check starts the config's auth-plugins, checks their handshake and health, and stops them.\n"+
		"kvd snapshot and kvd migrate are the offline tools (see docs/data.md); each has --help.\n\n")
	fs.PrintDefaults()
}
