package config

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// etcdFeatureGates are etcd v3.7's server feature gates and their defaults.
var etcdFeatureGates = map[string]bool{
	"StopGRPCServiceOnDefrag":      false,
	"InitialCorruptCheck":          false,
	"CompactHashCheck":             false,
	"TxnModeWriteWithSharedBuffer": true,
	"LeaseCheckpoint":              false,
	"LeaseCheckpointPersist":       false,
	"SetMemberLocalAddr":           false,
	"FastLeaseKeepAlive":           true,
	"PriorityRequest":              false,
}

// etcdFeatureStages are the gates' pre-release stages as etcd v3.7 names
// them (the stage label of etcd_server_feature_enabled).
var etcdFeatureStages = map[string]string{
	"StopGRPCServiceOnDefrag":      "ALPHA",
	"InitialCorruptCheck":          "ALPHA",
	"CompactHashCheck":             "ALPHA",
	"TxnModeWriteWithSharedBuffer": "BETA",
	"LeaseCheckpoint":              "ALPHA",
	"LeaseCheckpointPersist":       "ALPHA",
	"SetMemberLocalAddr":           "ALPHA",
	"FastLeaseKeepAlive":           "BETA",
	"PriorityRequest":              "ALPHA",
}

// FeatureStage returns a feature gate's pre-release stage as etcd names
// it: "ALPHA", "BETA" ("" for an unknown gate).
func FeatureStage(name string) string { return etcdFeatureStages[name] }

// unsupportedFeatureGates are the etcd gates kvd does not implement: each may
// only be given its etcd default, and any other value is refused naming the
// gate, rather than accepted and ignored. The gates kvd implements:
// LeaseCheckpoint (leader checkpoints of remaining TTLs), LeaseCheckpointPersist
// (kvd always persists the checkpointed TTL, as etcd v3.6+), InitialCorruptCheck
// (initial-corrupt-check; Complete folds it in), CompactHashCheck (the
// leader's check of compaction hashes every compact-hash-check-time),
// FastLeaseKeepAlive (on, its
// default: a renewal does not wait for the applied index).
var unsupportedFeatureGates = map[string]string{
	"StopGRPCServiceOnDefrag":      "kvd keeps serving during a defragmentation",
	"TxnModeWriteWithSharedBuffer": "kvd's write txns always read through the shared write buffer",
	"SetMemberLocalAddr":           "kvd does not bind a local address for peer connections",
	"FastLeaseKeepAlive":           "kvd's lease renewals never wait for the applied index",
	"PriorityRequest":              "kvd has no priority apply queue",
}

// Features parses feature-gates over etcd's defaults. An unknown gate or a
// value that is not a boolean is an error, as in etcd; so is a gate kvd does
// not implement set to another value than its default.
func (c *Config) Features() (map[string]bool, error) {
	f := make(map[string]bool, len(etcdFeatureGates))
	for k, v := range etcdFeatureGates {
		f[k] = v
	}
	if strings.TrimSpace(c.FeatureGates) == "" {
		return f, nil
	}
	for _, kv := range strings.Split(c.FeatureGates, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return nil, fmt.Errorf("%q: want Name=true or Name=false", kv)
		}
		name = strings.TrimSpace(name)
		if _, known := etcdFeatureGates[name]; !known {
			known := make([]string, 0, len(etcdFeatureGates))
			for k := range etcdFeatureGates {
				known = append(known, k)
			}
			sort.Strings(known)
			return nil, fmt.Errorf("unknown feature gate %q (known: %s)", name, strings.Join(known, ", "))
		}
		b, err := strconv.ParseBool(strings.TrimSpace(val))
		if err != nil {
			return nil, fmt.Errorf("%s=%q: not a boolean", name, val)
		}
		if why, no := unsupportedFeatureGates[name]; no && b != etcdFeatureGates[name] {
			return nil, fmt.Errorf("%s=%v: kvd does not support feature gate %s (only its default, %v: %s)", name, b, name, etcdFeatureGates[name], why)
		}
		f[name] = b
	}
	if f["LeaseCheckpointPersist"] && !f["LeaseCheckpoint"] {
		return nil, fmt.Errorf("enabling feature gate LeaseCheckpointPersist requires enabling feature gate LeaseCheckpoint")
	}
	return f, nil
}

// FeatureEnabled tells whether a (valid) feature gate is on.
func (c *Config) FeatureEnabled(name string) bool {
	f, err := c.Features()
	return err == nil && f[name]
}
