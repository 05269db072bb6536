package config

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// splitList splits a comma-separated list, dropping blanks around items and
// empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseURLs parses a comma-separated URL list. listen URLs must be bindable:
// an IP address or "localhost" for the host, and an explicit port.
func parseURLs(key, s string, schemes []string, listen bool) ([]url.URL, error) {
	items := splitList(s)
	if len(items) == 0 {
		return nil, fmt.Errorf("%s: no URL given", key)
	}
	out := make([]url.URL, 0, len(items))
	for _, it := range items {
		u, err := parseURL(it, schemes, listen)
		if err != nil {
			return nil, fmt.Errorf("%s: invalid URL %q: %w", key, it, err)
		}
		out = append(out, *u)
	}
	return out, nil
}

func parseURL(s string, schemes []string, listen bool) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, err
	}
	ok := false
	for _, sc := range schemes {
		ok = ok || u.Scheme == sc
	}
	if !ok {
		return nil, fmt.Errorf("scheme must be one of %s", strings.Join(schemes, ", "))
	}
	if u.Scheme == "unix" || u.Scheme == "unixs" {
		if u.Host == "" && u.Path == "" {
			return nil, fmt.Errorf("no socket path")
		}
		return u, nil
	}
	if u.Host == "" {
		return nil, fmt.Errorf("no host")
	}
	if u.Path != "" && u.Path != "/" {
		return nil, fmt.Errorf("must not have a path")
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return nil, fmt.Errorf("must not have user info, query or fragment")
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return nil, fmt.Errorf("want host:port: %w", err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return nil, fmt.Errorf("bad port %q", port)
	}
	if listen && host != "localhost" && net.ParseIP(host) == nil {
		return nil, fmt.Errorf("listen host must be an IP address or localhost, got %q", host)
	}
	return u, nil
}

var (
	clientSchemes = []string{"http", "https", "unix", "unixs"}
	peerSchemes   = []string{"http", "https"}
)

// ClientURLs parses listen-client-urls.
func (c *Config) ClientURLs() ([]url.URL, error) {
	return parseURLs("listen-client-urls", c.ListenClientURLs, clientSchemes, true)
}

// AdvertiseClientURLsList parses advertise-client-urls.
func (c *Config) AdvertiseClientURLsList() ([]url.URL, error) {
	return parseURLs("advertise-client-urls", c.AdvertiseClientURLs, clientSchemes, false)
}

// PeerURLs parses listen-peer-urls.
func (c *Config) PeerURLs() ([]url.URL, error) {
	return parseURLs("listen-peer-urls", c.ListenPeerURLs, peerSchemes, true)
}

// AdvertisePeerURLs parses initial-advertise-peer-urls.
func (c *Config) AdvertisePeerURLs() ([]url.URL, error) {
	return parseURLs("initial-advertise-peer-urls", c.InitialAdvertisePeerURLs, peerSchemes, false)
}

// MetricsURLs parses listen-metrics-urls; empty gives none.
func (c *Config) MetricsURLs() ([]url.URL, error) {
	if strings.TrimSpace(c.ListenMetricsURLs) == "" {
		return nil, nil
	}
	return parseURLs("listen-metrics-urls", c.ListenMetricsURLs, []string{"http", "https"}, true)
}

// InitialClusterMap parses initial-cluster into member name -> peer URLs. A
// name may repeat to give a member several URLs, as in etcd.
func (c *Config) InitialClusterMap() (map[string][]url.URL, error) {
	return parseCluster(c.InitialCluster)
}

func parseCluster(s string) (map[string][]url.URL, error) {
	items := splitList(s)
	if len(items) == 0 {
		return nil, fmt.Errorf("initial-cluster: no members")
	}
	m := make(map[string][]url.URL)
	for _, it := range items {
		name, raw, ok := strings.Cut(it, "=")
		name, raw = strings.TrimSpace(name), strings.TrimSpace(raw)
		if !ok || name == "" || raw == "" {
			return nil, fmt.Errorf("initial-cluster: entry %q is not name=URL", it)
		}
		u, err := parseURL(raw, peerSchemes, false)
		if err != nil {
			return nil, fmt.Errorf("initial-cluster: member %s: invalid URL %q: %w", name, raw, err)
		}
		m[name] = append(m[name], *u)
	}
	return m, nil
}

// MemberNames returns the names in initial-cluster, sorted.
func (c *Config) MemberNames() ([]string, error) {
	m, err := c.InitialClusterMap()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// MemberDir is <data-dir>/member, the root of a member's durable state.
func (c *Config) MemberDir() string { return filepath.Join(c.DataDir, "member") }

// WALPath is the WAL directory: wal-dir, or <data-dir>/member/wal if unset.
func (c *Config) WALPath() string {
	if c.WALDir != "" {
		return c.WALDir
	}
	return filepath.Join(c.MemberDir(), "wal")
}

// SnapDir is <data-dir>/member/snap, where raft snapshots are kept.
func (c *Config) SnapDir() string { return filepath.Join(c.MemberDir(), "snap") }

// BackendDir is the directory the storage engine keeps its files in,
// <data-dir>/member/snap/<engine> (bolt: its db file; badger: its tree), so
// switching engines on a data dir never reads the other engine's files.
func (c *Config) BackendDir() string { return filepath.Join(c.SnapDir(), c.Backend.Engine) }

// QuotaBytes is the effective backend quota: quota-backend-bytes, or
// DefaultQuotaBackendBytes when it is 0.
func (c *Config) QuotaBytes() int64 {
	if c.QuotaBackendBytes == 0 {
		return DefaultQuotaBackendBytes
	}
	return c.QuotaBackendBytes
}

// HeartbeatDuration is heartbeat-interval as a duration (the raft tick).
func (c *Config) HeartbeatDuration() time.Duration {
	return time.Duration(c.HeartbeatInterval) * time.Millisecond
}

// ElectionTicks is election-timeout in heartbeat ticks, raft's ElectionTick.
func (c *Config) ElectionTicks() int {
	if c.HeartbeatInterval == 0 {
		return 0
	}
	return int(c.ElectionTimeout / c.HeartbeatInterval)
}

// minCompactionPeriod is the shortest periodic retention.
const minCompactionPeriod = 10 * time.Nanosecond

// AutoCompaction returns the periodic retention (mode periodic) or the
// revisions kept (mode revision); both zero means auto compaction is off.
func (c *Config) AutoCompaction() (period time.Duration, revisions int64, err error) {
	r := strings.TrimSpace(c.AutoCompactionRetention)
	if r == "" {
		r = "0"
	}
	switch c.AutoCompactionMode {
	case CompactionPeriodic:
		if h, err := strconv.ParseInt(r, 10, 64); err == nil {
			if h < 0 {
				return 0, 0, fmt.Errorf("auto-compaction-retention: negative %q", r)
			}
			if h > int64(math.MaxInt64/time.Hour) {
				return 0, 0, fmt.Errorf("auto-compaction-retention: %q hours is too long", r)
			}
			return time.Duration(h) * time.Hour, 0, nil
		}
		d, err := time.ParseDuration(r)
		if err != nil || d < 0 {
			return 0, 0, fmt.Errorf("auto-compaction-retention: %q is neither hours nor a duration such as \"30m\"", r)
		}
		// The compactor samples every tenth of it (etcd divides by zero
		// below 10ns).
		if d > 0 && d < minCompactionPeriod {
			return 0, 0, fmt.Errorf("auto-compaction-retention: %q is below %s", r, minCompactionPeriod)
		}
		return d, 0, nil
	case CompactionRevision:
		n, err := strconv.ParseInt(r, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("auto-compaction-retention: %q is not a revision count", r)
		}
		return 0, n, nil
	default:
		return 0, 0, fmt.Errorf("auto-compaction-mode: %q is not periodic or revision", c.AutoCompactionMode)
	}
}
