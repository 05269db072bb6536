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

// Features parses feature-gates over etcd's defaults. An unknown gate or a
// value that is not a boolean is an error, as in etcd.
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
