package config

import (
	"math"
	"testing"
)

// The keys of issue #13 refuse bad values at start, naming the key.
func TestValidateIssue13Keys(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(c *Config)
		want []string
	}{
		{"default with another output", func(c *Config) { c.LogOutputs = []string{"default", "/tmp/kvd.log"} }, []string{"log-outputs", "default"}},
		{"empty output", func(c *Config) { c.LogOutputs = []string{"stderr", ""} }, []string{"log-outputs", "empty"}},
		{"journal", func(c *Config) { c.LogOutputs = []string{"systemd/journal"} }, []string{"log-outputs", "systemd/journal"}},
		{"log level", func(c *Config) { c.LogLevel = "verbose" }, []string{"log-level", "verbose"}},
		{"streams above uint32", func(c *Config) { c.MaxConcurrentStreams = math.MaxUint32 + 1 }, []string{"max-concurrent-streams", "maximum"}},
		{"zero streams", func(c *Config) { c.MaxConcurrentStreams = 0 }, []string{"max-concurrent-streams"}},
		{"negative min time", func(c *Config) { c.GRPCKeepAliveMinTime = -1 }, []string{"grpc-keepalive-min-time"}},
		{"negative interval", func(c *Config) { c.GRPCKeepAliveInterval = -1 }, []string{"grpc-keepalive-interval"}},
		{"negative apply warning", func(c *Config) { c.WarningApplyDuration = -1 }, []string{"warning-apply-duration"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mod(c)
			wantErr(t, c.Validate(), tc.want...)
		})
	}
	for _, tc := range []struct {
		name string
		mod  func(c *Config)
	}{
		{"several outputs", func(c *Config) { c.LogOutputs = []string{"stderr", "stdout", "/tmp/kvd.log"} }},
		{"upper case level, as zap parses it", func(c *Config) { c.LogLevel = "WARN" }},
		{"max streams", func(c *Config) { c.MaxConcurrentStreams = math.MaxUint32 }},
		{"keepalive off", func(c *Config) { c.GRPCKeepAliveMinTime, c.GRPCKeepAliveInterval, c.GRPCKeepAliveTimeout = 0, 0, 0 }},
		{"keep all snapshots and WALs", func(c *Config) { c.MaxSnapshots, c.MaxWALs = 0, 0 }},
		{"no pre-vote, no strict check", func(c *Config) { c.PreVote, c.StrictReconfigCheck = false, false }},
		{"every apply logged", func(c *Config) { c.WarningApplyDuration = 0 }},
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

// The flags set the keys.
func TestIssue13Flags(t *testing.T) {
	c, err := Parse([]string{"--log-outputs", "stdout,/tmp/x.log", "--log-format", "console", "--log-level", "debug",
		"--warning-apply-duration", "250ms", "--grpc-keepalive-min-time", "1s", "--grpc-keepalive-interval", "1m", "--grpc-keepalive-timeout", "3s",
		"--max-concurrent-streams", "10", "--pre-vote=false", "--strict-reconfig-check=false", "--max-snapshots", "2", "--max-wals", "0",
		"--initial-election-tick-advance=false", "--snapshot-catchup-entries", "7"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.LogOutputs) != 2 || c.LogOutputs[1] != "/tmp/x.log" || c.LogFormat != "console" || c.LogLevel != "debug" ||
		c.WarningApplyDuration.String() != "250ms" || c.GRPCKeepAliveMinTime.String() != "1s" || c.GRPCKeepAliveInterval.String() != "1m0s" ||
		c.GRPCKeepAliveTimeout.String() != "3s" || c.MaxConcurrentStreams != 10 || c.PreVote || c.StrictReconfigCheck ||
		c.MaxSnapshots != 2 || c.MaxWALs != 0 || c.InitialElectionTickAdvance || c.SnapshotCatchupEntries != 7 {
		t.Fatalf("parsed %+v", c)
	}
}
