package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kvd.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func wantErr(t *testing.T, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if c.Name != "default" || c.DataDir != "default.kvd" {
		t.Errorf("name/data-dir = %q/%q, want default/default.kvd", c.Name, c.DataDir)
	}
	if want := filepath.Join("default.kvd", "member", "wal"); c.WALDir != want || c.WALPath() != want {
		t.Errorf("wal dir = %q/%q, want %q", c.WALDir, c.WALPath(), want)
	}
	if c.InitialCluster != "default=http://127.0.0.1:2380" {
		t.Errorf("initial-cluster = %q", c.InitialCluster)
	}
	us, err := c.ClientURLs()
	if err != nil || len(us) != 1 || us[0].Host != "127.0.0.1:2379" {
		t.Errorf("ClientURLs() = %v, %v; want 127.0.0.1:2379", us, err)
	}
	m, err := c.InitialClusterMap()
	if err != nil || len(m) != 1 || m["default"][0].Host != "127.0.0.1:2380" {
		t.Errorf("InitialClusterMap() = %v, %v", m, err)
	}
	if c.QuotaBytes() != 2<<30 || c.ElectionTicks() != 10 || c.HeartbeatDuration() != 100*time.Millisecond {
		t.Errorf("quota %d, election ticks %d, heartbeat %v", c.QuotaBytes(), c.ElectionTicks(), c.HeartbeatDuration())
	}
	if c.SnapshotCount != 10000 || c.MaxTxnOps != 128 || c.MaxRequestBytes != 1572864 ||
		c.InitialClusterToken != "etcd-cluster" || c.InitialClusterState != "new" {
		t.Errorf("etcd defaults changed: %+v", c)
	}
	if c.Backend.Engine != EngineBolt || c.Tracing.Enabled {
		t.Errorf("engine %q tracing %v, want bolt and off", c.Backend.Engine, c.Tracing.Enabled)
	}
	if want := filepath.Join("default.kvd", "member", "snap", "bolt"); c.BackendDir() != want {
		t.Errorf("BackendDir() = %q, want %q", c.BackendDir(), want)
	}
}

func TestLoadEmptyFileIsDefault(t *testing.T) {
	for _, body := range []string{"", "# only a comment\n", "---\n"} {
		c, err := Load(writeFile(t, body))
		if err != nil {
			t.Fatalf("Load(%q): %v", body, err)
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Load(%q) = %+v, want Default()", body, c)
		}
	}
}

func TestLoadDerivesFromName(t *testing.T) {
	c, err := Load(writeFile(t, "name: n1\ninitial-advertise-peer-urls: http://10.0.0.1:2380\nlisten-peer-urls: http://10.0.0.1:2380\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "n1.kvd" || c.InitialCluster != "n1=http://10.0.0.1:2380" {
		t.Errorf("data-dir %q initial-cluster %q", c.DataDir, c.InitialCluster)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}

func TestLoadValues(t *testing.T) {
	c, err := Load(writeFile(t, `
name: a
backend-batch-interval: 50ms
grpc-keepalive-timeout: 1000000   # etcd style: nanoseconds
experimental-initial-corrupt-check: true
log-outputs: [stderr, /tmp/kvd.log]
pre-vote: false
backend:
  engine: badger
  badger:
    num-compactors: 3
  bolt: ~
tracing:
  enabled: true
  sampling-ratio: 0.25
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.BackendBatchInterval.Std() != 50*time.Millisecond || c.GRPCKeepAliveTimeout.Std() != time.Millisecond {
		t.Errorf("durations %v %v", c.BackendBatchInterval, c.GRPCKeepAliveTimeout)
	}
	if !c.InitialCorruptCheck {
		t.Error("experimental-initial-corrupt-check did not set initial-corrupt-check")
	}
	if !reflect.DeepEqual(c.LogOutputs, []string{"stderr", "/tmp/kvd.log"}) || c.PreVote {
		t.Errorf("log-outputs %q pre-vote %v", c.LogOutputs, c.PreVote)
	}
	if c.Backend.Engine != "badger" || c.Backend.Badger.NumCompactors != 3 || c.Backend.Bolt.FreelistType != "map" {
		t.Errorf("backend %+v", c.Backend)
	}
	if !c.Tracing.Enabled || c.Tracing.SamplingRatio != 0.25 || c.Tracing.ServiceName != "kvd" {
		t.Errorf("tracing %+v", c.Tracing)
	}
}

func TestLoadErrorsNameKeyAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown key", "name: a\nsnapshot-cont: 5\n", []string{"line 2", "snapshot-cont", "unknown key", `"snapshot-count"`}},
		{"unknown nested key", "backend:\n  engine: bolt\n  bolt:\n    mmap: 1\n", []string{"line 4", "backend.bolt.mmap", "unknown key"}},
		{"unknown tracing key", "tracing:\n  sampler: x\n", []string{"line 2", "tracing.sampler", "unknown key"}},
		{"type error", "snapshot-count: lots\n", []string{"line 1", "snapshot-count", "non-negative integer", `"lots"`}},
		{"negative unsigned", "\nheartbeat-interval: -1\n", []string{"line 2", "heartbeat-interval", `"-1"`}},
		{"bool", "pre-vote: maybe\n", []string{"pre-vote", "true or false"}},
		{"nested type error", "backend:\n  badger:\n    mem-table-size: big\n", []string{"line 3", "backend.badger.mem-table-size"}},
		{"section not a mapping", "backend: bolt\n", []string{"line 1", "backend", "want a mapping"}},
		{"list for string", "name: [a, b]\n", []string{"name", "a list"}},
		{"bad duration", "backend-batch-interval: soon\n", []string{"line 1", "backend-batch-interval", "duration"}},
		{"duplicate key", "name: a\nname: b\n", []string{"line 2", "name", "duplicate"}},
		{"not a mapping", "- a\n- b\n", []string{"want a mapping"}},
		{"two documents", "name: a\n---\nname: b\n", []string{"more than one"}},
		{"syntax", "name: [a\n", []string{"kvd.yaml"}},
		{"several at once", "nme: a\nsnapshot-count: x\n", []string{"nme", "snapshot-count"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, tc.body))
			wantErr(t, err, tc.want...)
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	wantErr(t, err, "nope.yaml")
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error %v does not wrap os.ErrNotExist", err)
	}
}

func TestValidateErrorsNameKey(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(c *Config)
		want []string
	}{
		{"bad client URL", func(c *Config) { c.ListenClientURLs = "http//127.0.0.1:2379" }, []string{"listen-client-urls", `"http//127.0.0.1:2379"`}},
		{"bad scheme", func(c *Config) { c.AdvertiseClientURLs = "ftp://127.0.0.1:2379" }, []string{"advertise-client-urls", "ftp://", "scheme"}},
		{"no port", func(c *Config) { c.ListenPeerURLs = "http://127.0.0.1" }, []string{"listen-peer-urls", "http://127.0.0.1"}},
		{"listen on hostname", func(c *Config) { c.ListenClientURLs = "http://example.com:2379" }, []string{"listen-client-urls", "IP address"}},
		{"URL with path", func(c *Config) { c.AdvertiseClientURLs = "http://127.0.0.1:2379/v3" }, []string{"advertise-client-urls", "path"}},
		{"empty URL list", func(c *Config) { c.ListenClientURLs = " , " }, []string{"listen-client-urls", "no URL"}},
		{"bad metrics URL", func(c *Config) { c.ListenMetricsURLs = "tcp://x" }, []string{"listen-metrics-urls", "tcp://x"}},
		{"https without certs", func(c *Config) {
			c.ListenClientURLs, c.AdvertiseClientURLs = "https://127.0.0.1:2379", "https://127.0.0.1:2379"
		}, []string{"listen-client-urls", "client-transport-security"}},
		{"key without cert", func(c *Config) { c.PeerTLS.KeyFile = "k.pem" }, []string{"peer-transport-security", "cert-file"}},
		{"bad engine", func(c *Config) { c.Backend.Engine = "rocksdb" }, []string{"backend.engine", `"rocksdb"`}},
		{"bad freelist", func(c *Config) { c.Backend.Bolt.FreelistType = "list" }, []string{"backend.bolt.freelist-type"}},
		{"negative mmap", func(c *Config) { c.Backend.Bolt.InitialMmapSize = -1 }, []string{"backend.bolt.initial-mmap-size", "negative"}},
		{"negative badger size", func(c *Config) { c.Backend.Badger.ValueLogFileSize = -5 }, []string{"backend.badger.value-log-file-size", "negative"}},
		{"one compactor", func(c *Config) { c.Backend.Badger.NumCompactors = 1 }, []string{"backend.badger.num-compactors"}},
		{"small memtable", func(c *Config) { c.Backend.Badger.MemTableSize = 32 << 20 }, []string{"backend.badger.mem-table-size", "33554432", "8 MiB"}},
		{"batch limit over a Badger update", func(c *Config) {
			c.Backend.Engine, c.BackendBatchLimit = EngineBadger, 300000
		}, []string{"backend-batch-limit", "300000", "262144"}},
		{"bad cluster state", func(c *Config) { c.InitialClusterState = "old" }, []string{"initial-cluster-state", `"old"`}},
		{"heartbeat >= election", func(c *Config) { c.HeartbeatInterval, c.ElectionTimeout = 1000, 1000 }, []string{"election-timeout", "heartbeat-interval"}},
		{"election under 5 heartbeats", func(c *Config) { c.ElectionTimeout = 400 }, []string{"election-timeout", "5 times", "heartbeat-interval"}},
		{"election too long", func(c *Config) { c.ElectionTimeout = 60000 }, []string{"election-timeout", "maximum"}},
		{"zero heartbeat", func(c *Config) { c.HeartbeatInterval = 0 }, []string{"heartbeat-interval"}},
		{"cluster entry without =", func(c *Config) { c.InitialCluster = "default" }, []string{"initial-cluster", `"default"`, "name=URL"}},
		{"cluster bad URL", func(c *Config) { c.InitialCluster = "default=127.0.0.1:2380" }, []string{"initial-cluster", "default", "127.0.0.1:2380"}},
		{"name not in cluster", func(c *Config) { c.InitialCluster = "other=http://127.0.0.1:2380" }, []string{"initial-cluster", `"default"`}},
		{"advertised peer mismatch", func(c *Config) { c.InitialCluster = "default=http://127.0.0.1:9999" }, []string{"initial-cluster", "initial-advertise-peer-urls", "9999"}},
		{"empty name", func(c *Config) { c.Name = "" }, []string{"name"}},
		{"name with =", func(c *Config) { c.Name = "a=b" }, []string{"name", "a=b"}},
		{"empty token", func(c *Config) { c.InitialClusterToken = "" }, []string{"initial-cluster-token"}},
		{"zero snapshot count", func(c *Config) { c.SnapshotCount = 0 }, []string{"snapshot-count"}},
		{"negative batch limit", func(c *Config) { c.BackendBatchLimit = -1 }, []string{"backend-batch-limit"}},
		{"negative duration", func(c *Config) { c.GRPCKeepAliveTimeout = -1 }, []string{"grpc-keepalive-timeout"}},
		{"zero txn ops", func(c *Config) { c.MaxTxnOps = 0 }, []string{"max-txn-ops"}},
		{"zero request bytes", func(c *Config) { c.MaxRequestBytes = 0 }, []string{"max-request-bytes"}},
		{"compaction mode", func(c *Config) { c.AutoCompactionMode = "daily" }, []string{"auto-compaction-mode", "daily"}},
		{"compaction retention", func(c *Config) { c.AutoCompactionRetention = "a while" }, []string{"auto-compaction-retention", "a while"}},
		{"revision retention", func(c *Config) { c.AutoCompactionMode, c.AutoCompactionRetention = "revision", "1h" }, []string{"auto-compaction-retention", "1h"}},
		{"negative hours", func(c *Config) { c.AutoCompactionRetention = "-1" }, []string{"auto-compaction-retention", "-1"}},
		{"negative retention duration", func(c *Config) { c.AutoCompactionRetention = "-5m" }, []string{"auto-compaction-retention", "-5m"}},
		{"hours overflow", func(c *Config) { c.AutoCompactionRetention = "9999999999" }, []string{"auto-compaction-retention", "too long"}},
		{"period below 10ns", func(c *Config) { c.AutoCompactionRetention = "9ns" }, []string{"auto-compaction-retention", "9ns"}},
		{"negative revisions", func(c *Config) { c.AutoCompactionMode, c.AutoCompactionRetention = "revision", "-10" }, []string{"auto-compaction-retention", "-10"}},
		{"empty mode", func(c *Config) { c.AutoCompactionMode = "" }, []string{"auto-compaction-mode"}},
		{"auth token", func(c *Config) { c.AuthToken = "oauth" }, []string{"auth-token", "oauth"}},
		{"bcrypt cost", func(c *Config) { c.BcryptCost = 2 }, []string{"bcrypt-cost"}},
		{"log level", func(c *Config) { c.LogLevel = "loud" }, []string{"log-level", "loud"}},
		{"log format", func(c *Config) { c.LogFormat = "xml" }, []string{"log-format"}},
		{"metrics level", func(c *Config) { c.Metrics = "full" }, []string{"metrics", "full"}},
		{"tracing protocol", func(c *Config) { c.Tracing.Protocol = "thrift" }, []string{"tracing.protocol", "thrift"}},
		{"tracing ratio", func(c *Config) { c.Tracing.SamplingRatio = 1.5 }, []string{"tracing.sampling-ratio", "1.5"}},
		{"tracing endpoint", func(c *Config) { c.Tracing.Endpoint = "127.0.0.1:4317" }, []string{"tracing.endpoint", "127.0.0.1:4317"}},
		{"several at once", func(c *Config) { c.Backend.Engine, c.LogLevel = "x", "y" }, []string{"backend.engine", "log-level"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(c)
			wantErr(t, c.Validate(), tc.want...)
		})
	}
}

func TestValidateAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(c *Config)
	}{
		{"https with auto-tls", func(c *Config) {
			c.ListenClientURLs, c.AdvertiseClientURLs = "https://127.0.0.1:2379", "https://127.0.0.1:2379"
			c.ClientTLS.AutoTLS = true
		}},
		{"several client URLs", func(c *Config) {
			c.ListenClientURLs = "http://127.0.0.1:2379, http://[::1]:2379,unix://kvd.sock"
		}},
		{"advertise a hostname", func(c *Config) { c.AdvertiseClientURLs = "http://kvd.example:2379" }},
		{"member with two peer URLs", func(c *Config) {
			c.InitialAdvertisePeerURLs = "http://127.0.0.1:2380,http://10.0.0.1:2380"
			c.InitialCluster = "default=http://10.0.0.1:2380,default=http://127.0.0.1:2380,b=http://127.0.0.2:2380"
		}},
		{"revision compaction", func(c *Config) { c.AutoCompactionMode, c.AutoCompactionRetention = "revision", "1000" }},
		{"jwt", func(c *Config) { c.AuthToken = "jwt,pub-key=a.pub,priv-key=a.key,sign-method=RS256" }},
		{"tracing http endpoint with path", func(c *Config) {
			c.Tracing.Endpoint, c.Tracing.Protocol = "http://127.0.0.1:4318/v1/traces", "http/protobuf"
		}},
		{"derived fields left empty", func(c *Config) { c.DataDir, c.WALDir, c.InitialCluster = "", "", "" }},
		{"big batch limit on bolt", func(c *Config) { c.BackendBatchLimit = 300000 }},
		{"big batch limit on Badger with big memtables", func(c *Config) {
			c.Backend.Engine, c.BackendBatchLimit, c.Backend.Badger.MemTableSize = EngineBadger, 300000, 256<<20
		}},
		{"Badger at the default batch limit with the least memtable", func(c *Config) {
			c.Backend.Engine, c.Backend.Badger.MemTableSize = EngineBadger, BadgerMinMemTableSize
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(c)
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestAutoCompaction(t *testing.T) {
	for _, tc := range []struct {
		mode, retention string
		period          time.Duration
		revs            int64
	}{
		{"periodic", "0", 0, 0},
		{"periodic", "1", time.Hour, 0},
		{"periodic", "30m", 30 * time.Minute, 0},
		{"revision", "1000", 0, 1000},
		{"revision", "0", 0, 0},
		{"periodic", "2s", 2 * time.Second, 0},
		{"periodic", " 10ns ", 10 * time.Nanosecond, 0},
		{"periodic", "0s", 0, 0},
		{"periodic", "", 0, 0},
	} {
		c := Default()
		c.AutoCompactionMode, c.AutoCompactionRetention = tc.mode, tc.retention
		p, r, err := c.AutoCompaction()
		if err != nil || p != tc.period || r != tc.revs {
			t.Errorf("%s %s: got %v, %d, %v; want %v, %d", tc.mode, tc.retention, p, r, err, tc.period, tc.revs)
		}
	}
}

// TestConfigsDir loads and validates every YAML file shipped in configs/.
func TestConfigsDir(t *testing.T) {
	root := filepath.Join("..", "..", "configs")
	loaded := map[string]*Config{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || (filepath.Ext(p) != ".yaml" && filepath.Ext(p) != ".yml") {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		c, err := Load(p)
		if err != nil {
			t.Errorf("%s: %v", rel, err)
			return nil
		}
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", rel, err)
		}
		loaded[filepath.ToSlash(rel)] = c
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"kvd.yaml", "kvd-badger.yaml", "tracing.yaml", "cluster/node1.yaml", "cluster/node2.yaml", "cluster/node3.yaml"} {
		if loaded[name] == nil {
			t.Fatalf("configs/%s missing or invalid", name)
		}
	}
	if !reflect.DeepEqual(loaded["kvd.yaml"], Default()) {
		t.Errorf("configs/kvd.yaml should spell out the defaults; got %+v", loaded["kvd.yaml"])
	}
	if e := loaded["kvd-badger.yaml"].Backend.Engine; e != EngineBadger {
		t.Errorf("kvd-badger.yaml engine = %q", e)
	}
	if tr := loaded["tracing.yaml"].Tracing; !tr.Enabled || tr.Endpoint != "http://127.0.0.1:4317" {
		t.Errorf("tracing.yaml tracing = %+v", tr)
	}
	ports := map[string]bool{}
	var cluster string
	for i := 1; i <= 3; i++ {
		c := loaded["cluster/node"+string(rune('0'+i))+".yaml"]
		if cluster == "" {
			cluster = c.InitialCluster
		}
		if c.InitialCluster != cluster || c.InitialClusterState != ClusterStateNew {
			t.Errorf("%s: initial-cluster %q state %q differ", c.Name, c.InitialCluster, c.InitialClusterState)
		}
		names, _ := c.MemberNames()
		if len(names) != 3 {
			t.Errorf("%s: members %v, want 3", c.Name, names)
		}
		for _, s := range []string{c.ListenClientURLs, c.ListenPeerURLs, c.DataDir} {
			if ports[s] {
				t.Errorf("%s: %s shared with another member", c.Name, s)
			}
			ports[s] = true
		}
	}
}

func TestParse(t *testing.T) {
	file := writeFile(t, `
name: infra1
heartbeat-interval: 50
election-timeout: 500
snapshot-count: 5
pre-vote: false
listen-peer-urls: http://127.0.0.1:12380
initial-advertise-peer-urls: http://127.0.0.1:12380
tracing:
  protocol: http/protobuf
`)
	t.Run("file only", func(t *testing.T) {
		c, err := Parse([]string{"--config", file})
		if err != nil {
			t.Fatal(err)
		}
		if c.Name != "infra1" || c.SnapshotCount != 5 || c.HeartbeatInterval != 50 || c.PreVote {
			t.Errorf("file not applied: %+v", c)
		}
		if c.DataDir != "infra1.kvd" || c.InitialCluster != "infra1=http://127.0.0.1:12380" {
			t.Errorf("derived: data-dir %q initial-cluster %q", c.DataDir, c.InitialCluster)
		}
	})
	t.Run("flags override file", func(t *testing.T) {
		c, err := Parse([]string{"--snapshot-count=7", "--config", file, "--tracing-endpoint", "http://127.0.0.1:4318", "--pre-vote"})
		if err != nil {
			t.Fatal(err)
		}
		if c.SnapshotCount != 7 || !c.PreVote || c.Tracing.Endpoint != "http://127.0.0.1:4318" {
			t.Errorf("flags did not override: %+v", c)
		}
		// Keys no flag named keep the file's values, not the flag defaults.
		if c.Name != "infra1" || c.HeartbeatInterval != 50 || c.ElectionTimeout != 500 || c.Tracing.Protocol != "http/protobuf" {
			t.Errorf("unset flags clobbered the file: %+v", c)
		}
	})
	t.Run("config-file alias", func(t *testing.T) {
		c, err := Parse([]string{"--config-file=" + file, "--name", "other", "--initial-cluster", "other=http://127.0.0.1:12380"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Name != "other" || c.SnapshotCount != 5 || c.DataDir != "other.kvd" {
			t.Errorf("config-file not applied: %+v", c)
		}
	})
	t.Run("no file", func(t *testing.T) {
		c, err := Parse([]string{"--backend", "badger", "--log-outputs", "stdout,stderr"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Backend.Engine != "badger" || !reflect.DeepEqual(c.LogOutputs, []string{"stdout", "stderr"}) {
			t.Errorf("%+v", c)
		}
		c.Backend.Engine, c.LogOutputs = EngineBolt, []string{"default"}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Parse without file differs from Default: %+v", c)
		}
	})
	t.Run("errors", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			want []string
			is   error
		}{
			{[]string{"--version"}, nil, ErrVersion},
			{[]string{"--help"}, nil, flag.ErrHelp},
			{[]string{"-h"}, nil, flag.ErrHelp},
			{[]string{"--no-such-flag"}, []string{"no-such-flag"}, nil},
			{[]string{"--snapshot-count", "many"}, []string{"snapshot-count"}, nil},
			{[]string{"serve"}, []string{`"serve"`}, nil},
			{[]string{"--backend", "rocksdb"}, []string{"backend.engine", "rocksdb"}, nil},
			{[]string{"--config", file, "--election-timeout", "100"}, []string{"election-timeout", "heartbeat-interval"}, nil},
			{[]string{"--config", filepath.Join(t.TempDir(), "missing.yaml")}, []string{"missing.yaml"}, os.ErrNotExist},
			{[]string{"--config", file, "--config-file", file + ".x"}, []string{"--config", "--config-file"}, nil},
			{[]string{"--config", writeFile(t, "bogus: 1\n")}, []string{"bogus", "line 1"}, nil},
		} {
			_, err := Parse(tc.args)
			if err == nil {
				t.Errorf("Parse(%q) succeeded", tc.args)
				continue
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("Parse(%q) = %v, want %v", tc.args, err, tc.is)
			}
			wantErr(t, err, tc.want...)
		}
	})
}

func TestRegisterFlagsBindsFields(t *testing.T) {
	c := Default()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if c.Name != "default" || c.SnapshotCount != 10000 {
		t.Fatalf("RegisterFlags changed fields: %+v", c)
	}
	err := fs.Parse([]string{
		"--data-dir", "/d", "--wal-dir", "/w", "--quota-backend-bytes", "8589934592",
		"--backend-batch-interval", "10ms", "--peer-cert-file", "p.crt", "--tracing-sampling-ratio", "0.5",
		"--auto-compaction-mode", "revision", "--auto-compaction-retention", "100", "--max-txn-ops", "1000",
		"--watch-progress-notify-interval", "2s",
	})
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != "/d" || c.WALDir != "/w" || c.QuotaBackendBytes != 8<<30 || c.BackendBatchInterval.Std() != 10*time.Millisecond ||
		c.PeerTLS.CertFile != "p.crt" || c.Tracing.SamplingRatio != 0.5 || c.AutoCompactionMode != "revision" ||
		c.AutoCompactionRetention != "100" || c.MaxTxnOps != 1000 || c.WatchProgressNotifyInterval.Std() != 2*time.Second {
		t.Errorf("flags not bound: %+v", c)
	}
}

func TestUsage(t *testing.T) {
	var b strings.Builder
	Usage(&b)
	for _, s := range []string{"-config", "-config-file", "-listen-client-urls", "-initial-cluster", "-backend", "-tracing-endpoint"} {
		if !strings.Contains(b.String(), s) {
			t.Errorf("usage lacks %s", s)
		}
	}
}

// bbolt's first map follows etcd's rule: the configured size, else the
// quota plus 10% when a quota other than the default is set, else bbolt's
// default (0 here).
func TestBoltInitialMmapSize(t *testing.T) {
	for _, tc := range []struct {
		name        string
		mmap, quota int64
		want        int64
	}{
		{"defaults", 0, 0, 0},
		{"default quota", 0, DefaultQuotaBackendBytes, 0},
		{"no quota", 0, -1, 0},
		{"quota of 17 GiB", 0, 17 << 30, 17<<30 + 17<<30/10},
		{"set, with a quota", 1 << 30, 17 << 30, 1 << 30},
	} {
		c := Default()
		c.Backend.Bolt.InitialMmapSize, c.QuotaBackendBytes = tc.mmap, tc.quota
		if got := c.BoltInitialMmapSize(); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}
