package config

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"
)

// maxElectionTimeout is etcd's upper bound on election-timeout, in ms.
const maxElectionTimeout = 50000

// Validate checks the whole configuration and reports every problem found,
// one per line, each starting with the key at fault. Derived fields left empty
// are validated as Complete would fill them; c itself is not changed.
func (c *Config) Validate() error {
	v := *c
	// Complete sets plugin defaults in place: give it a copy of the list.
	v.AuthPlugins = slices.Clone(c.AuthPlugins)
	v.Complete()
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	addErr := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}

	if v.Name == "" {
		add("name", "must not be empty")
	} else if strings.ContainsAny(v.Name, ",= \t\n") {
		add("name", "%q must not contain ',', '=' or spaces", v.Name)
	}
	if v.SnapshotCount == 0 {
		add("snapshot-count", "must be positive")
	}
	if _, err := v.Features(); err != nil {
		add("feature-gates", "%v", err)
	}

	switch {
	case v.HeartbeatInterval == 0:
		add("heartbeat-interval", "must be positive")
	case v.ElectionTimeout == 0:
		add("election-timeout", "must be positive")
	case v.ElectionTimeout < 5*v.HeartbeatInterval:
		add("election-timeout", "%dms must be at least 5 times heartbeat-interval (%dms)", v.ElectionTimeout, v.HeartbeatInterval)
	case v.ElectionTimeout > maxElectionTimeout:
		add("election-timeout", "%dms is above the maximum of %dms", v.ElectionTimeout, maxElectionTimeout)
	}

	clientURLs, err := v.ClientURLs()
	addErr(err)
	_, err = v.AdvertiseClientURLsList()
	addErr(err)
	peerURLs, err := v.PeerURLs()
	addErr(err)
	advPeerURLs, err := v.AdvertisePeerURLs()
	addErr(err)
	metricsURLs, err := v.MetricsURLs()
	addErr(err)
	addErr(checkTLS("client-transport-security", v.ClientTLS))
	addErr(checkTLS("peer-transport-security", v.PeerTLS))
	if needsTLS(clientURLs) && !hasTLS(v.ClientTLS) {
		add("listen-client-urls", "https URL needs client-transport-security cert-file and key-file, or auto-tls")
	}
	if needsTLS(peerURLs) && !hasTLS(v.PeerTLS) {
		add("listen-peer-urls", "https URL needs peer-transport-security cert-file and key-file, or auto-tls")
	}
	if needsTLS(metricsURLs) && !hasTLS(v.ClientTLS) {
		add("listen-metrics-urls", "https URL needs client-transport-security cert-file and key-file, or auto-tls")
	}

	members, err := v.InitialClusterMap()
	addErr(err)
	if err == nil {
		mine, ok := members[v.Name]
		switch {
		case !ok:
			add("initial-cluster", "has no entry for this member's name %q", v.Name)
		case advPeerURLs != nil && !sameURLs(mine, advPeerURLs):
			add("initial-cluster", "member %q has peer URLs %s but initial-advertise-peer-urls is %s",
				v.Name, joinURLs(mine), joinURLs(advPeerURLs))
		}
	}
	if v.InitialClusterState != ClusterStateNew && v.InitialClusterState != ClusterStateExisting {
		add("initial-cluster-state", "%q is not new or existing", v.InitialClusterState)
	}
	if v.InitialClusterToken == "" {
		add("initial-cluster-token", "must not be empty")
	}

	// A negative quota-backend-bytes disables the quota, as etcd's.
	if v.BackendBatchInterval < 0 {
		add("backend-batch-interval", "%s is negative", v.BackendBatchInterval)
	}
	if v.BackendBatchLimit < 0 {
		add("backend-batch-limit", "%d is negative", v.BackendBatchLimit)
	}
	if v.Backend.Engine == EngineBadger {
		// A Badger update holds 15% of a memtable, at most one write per
		// 96 bytes of it (a skiplist node); a commit Badger refuses is
		// written in parts of backend-batch-limit writes, which must fit.
		memtable := v.Backend.Badger.MemTableBytes()
		if most := memtable * 15 / 100 / 96; int64(v.BackendBatchLimit) > most {
			add("backend-batch-limit", "%d is more writes than one Badger update holds with %d-byte memtables (%d); raise backend.badger.mem-table-size or lower the limit", v.BackendBatchLimit, memtable, most)
		}
	}
	if v.MaxTxnOps == 0 {
		add("max-txn-ops", "must be positive")
	}
	if v.MaxRequestBytes == 0 {
		add("max-request-bytes", "must be positive")
	}
	if v.MaxConcurrentStreams == 0 {
		add("max-concurrent-streams", "must be positive")
	} else if v.MaxConcurrentStreams > math.MaxUint32 {
		add("max-concurrent-streams", "%d is above the maximum of %d", v.MaxConcurrentStreams, uint32(math.MaxUint32))
	}
	for _, d := range []struct {
		key string
		d   Duration
	}{
		{"grpc-keepalive-min-time", v.GRPCKeepAliveMinTime},
		{"grpc-keepalive-interval", v.GRPCKeepAliveInterval},
		{"grpc-keepalive-timeout", v.GRPCKeepAliveTimeout},
		{"corrupt-check-time", v.CorruptCheckTime},
		{"warning-apply-duration", v.WarningApplyDuration},
	} {
		if d.d < 0 {
			add(d.key, "%s is negative", d.d)
		}
	}
	if _, _, err := v.AutoCompaction(); err != nil {
		addErr(err)
	}
	if v.CompactHashCheckTime <= 0 {
		add("compact-hash-check-time", "must be >0 (set to %s)", v.CompactHashCheckTime)
	}
	if v.CompactionBatchLimit <= 0 {
		add("compaction-batch-limit", "must be positive")
	}

	if v.AuthToken != "simple" && v.AuthToken != "jwt" && !strings.HasPrefix(v.AuthToken, "jwt,") {
		add("auth-token", "%q is not simple or jwt,...", v.AuthToken)
	}
	if v.AuthTokenTTL == 0 {
		add("auth-token-ttl", "must be positive")
	}
	if v.BcryptCost < 4 || v.BcryptCost > 31 {
		add("bcrypt-cost", "%d is outside [4, 31]", v.BcryptCost)
	}

	errs = append(errs, validateAuthPlugins(v.AuthPlugins)...)

	// etcd parses the level with zap: upper case, dpanic and "" (info)
	// pass too.
	if v.Metrics != MetricsBasic && v.Metrics != MetricsExtensive {
		add("metrics", "%q is not basic or extensive", v.Metrics)
	}
	if _, err := zapcore.ParseLevel(v.LogLevel); err != nil {
		add("log-level", "%q is not debug, info, warn, error, panic or fatal", v.LogLevel)
	}
	if v.LogFormat != "" && v.LogFormat != "json" && v.LogFormat != "console" {
		add("log-format", "%q is not json or console", v.LogFormat)
	}
	if len(v.LogOutputs) == 0 {
		add("log-outputs", "must not be empty")
	}
	for _, o := range v.LogOutputs {
		switch {
		case o == "":
			add("log-outputs", "empty entry in %q", v.LogOutputs)
		case o == "default" && len(v.LogOutputs) > 1:
			// etcd's refusal: "default" may only stand alone.
			add("log-outputs", "%q: multi logoutput for \"default\" is not supported; name stderr instead", v.LogOutputs)
		case o == "systemd/journal":
			add("log-outputs", "systemd/journal is not supported by kvd; use stderr, stdout or a file path")
		}
	}

	errs = append(errs, v.Backend.validate()...)
	errs = append(errs, v.Tracing.validate()...)
	return errors.Join(errs...)
}

func (b Backend) validate() []error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("backend.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if b.Engine != EngineBolt && b.Engine != EngineBadger {
		add("engine", "%q is not bolt or badger", b.Engine)
	}
	if b.Bolt.InitialMmapSize < 0 {
		add("bolt.initial-mmap-size", "%d is negative", b.Bolt.InitialMmapSize)
	}
	if b.Bolt.FreelistType != "map" && b.Bolt.FreelistType != "array" {
		add("bolt.freelist-type", "%q is not map or array", b.Bolt.FreelistType)
	}
	for _, s := range []struct {
		key string
		n   int64
	}{
		{"badger.mem-table-size", b.Badger.MemTableSize},
		{"badger.value-log-file-size", b.Badger.ValueLogFileSize},
		{"badger.value-threshold", b.Badger.ValueThreshold},
		{"badger.block-cache-size", b.Badger.BlockCacheSize},
	} {
		if s.n < 0 {
			add(s.key, "%d is negative", s.n)
		}
	}
	if n := b.Badger.MemTableSize; n > 0 && n < BadgerMinMemTableSize {
		add("badger.mem-table-size", "%d is below %d: kvd commits up to 8 MiB in one Badger update, which holds 15%% of a memtable", n, int64(BadgerMinMemTableSize))
	}
	// Badger refuses exactly one compactor.
	if b.Badger.NumCompactors < 0 || b.Badger.NumCompactors == 1 {
		add("badger.num-compactors", "%d must be 0 (Badger's default) or at least 2", b.Badger.NumCompactors)
	}
	return errs
}

func (t Tracing) validate() []error {
	var errs []error
	add := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("tracing.%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if t.Protocol != ProtocolGRPC && t.Protocol != ProtocolHTTPProtobuf {
		add("protocol", "%q is not grpc or http/protobuf", t.Protocol)
	}
	if t.SamplingRatio < 0 || t.SamplingRatio > 1 || t.SamplingRatio != t.SamplingRatio {
		add("sampling-ratio", "%v is outside [0, 1]", t.SamplingRatio)
	}
	if t.Endpoint != "" {
		// An OTLP/HTTP endpoint may carry a path, so parseURL is too strict.
		u, err := url.Parse(t.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("endpoint", "invalid URL %q: want http://host:port or https://host:port", t.Endpoint)
		}
	}
	return errs
}

// validateAuthPlugins checks the auth-plugins list once Complete has filled
// its defaults. Each error names the plugin by index and, when it has one, by
// name. Whether the command exists is left to the plugin host, which says so
// when it starts the plugin.
func validateAuthPlugins(ps []AuthPlugin) []error {
	var errs []error
	first := make(map[string]int, len(ps))
	for i, p := range ps {
		who := fmt.Sprintf("auth-plugins[%d]", i)
		if p.Name != "" {
			who += fmt.Sprintf(" %q", p.Name)
		}
		add := func(format string, args ...any) {
			errs = append(errs, fmt.Errorf("%s: %s", who, fmt.Sprintf(format, args...)))
		}
		if p.Name == "" {
			add("name: must not be empty")
		} else if j, dup := first[p.Name]; dup {
			add("name: duplicate, auth-plugins[%d] has it too", j)
		} else {
			first[p.Name] = i
		}
		switch p.Kind {
		case AuthPluginAuthenticator, AuthPluginAuthorizer:
		case "":
			add("kind: missing: want %s or %s", AuthPluginAuthenticator, AuthPluginAuthorizer)
		default:
			add("kind %q: want %s or %s", p.Kind, AuthPluginAuthenticator, AuthPluginAuthorizer)
		}
		if p.Command == "" {
			add("command: must not be empty")
		}
		// A bare number is nanoseconds (as in etcd's duration keys):
		// "timeout: 2" would time out every call.
		if p.Timeout <= 0 {
			add("timeout %s: must be positive", p.Timeout)
		} else if p.Timeout.Std() < time.Millisecond {
			add("timeout %s: under 1ms, every call would time out (write a unit: 200ms)", p.Timeout)
		}
		if p.OnFailure != OnFailureDeny && p.OnFailure != OnFailureSkip {
			add("on-failure %q: want %s or %s", p.OnFailure, OnFailureDeny, OnFailureSkip)
		}
		if p.CacheTTL != nil && *p.CacheTTL < 0 {
			add("cache-ttl %s: must not be negative (0 disables caching)", *p.CacheTTL)
		} else if p.CacheTTL != nil && *p.CacheTTL > 0 && p.CacheTTL.Std() < time.Millisecond {
			add("cache-ttl %s: under 1ms, nothing would stay cached (write a unit: 5s; 0 disables caching)", *p.CacheTTL)
		}
		keys := make([]string, 0, len(p.Env))
		for k := range p.Env {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if k == "" {
				add("env: empty variable name")
			} else if strings.Contains(k, "=") {
				add("env %q: a variable name must not contain '='", k)
			}
		}
	}
	return errs
}

func checkTLS(key string, t TLS) error {
	var errs []error
	add := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s", key, fmt.Sprintf(format, args...)))
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		add("cert-file: cert-file and key-file must be set together")
	}
	if (t.ClientCertFile == "") != (t.ClientKeyFile == "") {
		add("client-cert-file: client-cert-file and client-key-file must be set together")
	}
	if t.ClientCertAuth && t.TrustedCAFile == "" && !t.AutoTLS {
		add("client-cert-auth: needs trusted-ca-file")
	}
	if len(t.AllowedCNs) > 0 && len(t.AllowedHostnames) > 0 {
		add("allowed-cn: allowed-cn and allowed-hostname are mutually exclusive")
	}
	for _, l := range []struct {
		key  string
		vals []string
	}{{"allowed-cn", t.AllowedCNs}, {"allowed-hostname", t.AllowedHostnames}} {
		if len(l.vals) == 0 {
			continue
		}
		if slices.Contains(l.vals, "") {
			add("%s: empty entry in %q", l.key, l.vals)
		}
		// Without client certificates there is nothing to check the
		// connecting side against: refuse rather than let anyone in.
		if !t.ClientCertAuth && t.TrustedCAFile == "" {
			add("%s: needs client-cert-auth (and trusted-ca-file): without client certificates no %s can be checked", l.key, strings.TrimPrefix(l.key, "allowed-"))
		}
	}
	return errors.Join(errs...)
}

func hasTLS(t TLS) bool { return t.AutoTLS || (t.CertFile != "" && t.KeyFile != "") }

func needsTLS(us []url.URL) bool {
	for _, u := range us {
		if u.Scheme == "https" || u.Scheme == "unixs" {
			return true
		}
	}
	return false
}

func sameURLs(a, b []url.URL) bool {
	as, bs := urlStrings(a), urlStrings(b)
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(slices.Compact(as), slices.Compact(bs))
}

func urlStrings(us []url.URL) []string {
	out := make([]string, len(us))
	for i, u := range us {
		u.Path = strings.TrimSuffix(u.Path, "/")
		out[i] = u.String()
	}
	return out
}

func joinURLs(us []url.URL) string { return strings.Join(urlStrings(us), ",") }
