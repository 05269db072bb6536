package config

import (
	"testing"
	"time"
)

// CompactHashCheck is implemented: the gate is accepted, and
// compact-hash-check-time (default 1m, as etcd) must be positive.
func TestCompactHashCheck(t *testing.T) {
	c, err := Parse([]string{"--feature-gates", "CompactHashCheck=true", "--compact-hash-check-time", "2s"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.FeatureEnabled("CompactHashCheck") || c.CompactHashCheckTime.Std() != 2*time.Second {
		t.Fatalf("gate %v, compact-hash-check-time %s", c.FeatureEnabled("CompactHashCheck"), c.CompactHashCheckTime)
	}
	c, err = Parse([]string{"--config", writeFile(t, "compact-hash-check-time: 30s\n")})
	if err != nil || c.CompactHashCheckTime.Std() != 30*time.Second {
		t.Fatalf("from the file: %v %v", c, err)
	}
	if d := Default().CompactHashCheckTime.Std(); d != time.Minute {
		t.Fatalf("default compact-hash-check-time %s, want 1m", d)
	}
	for _, bad := range []string{"0s", "-1s"} {
		_, err := Parse([]string{"--compact-hash-check-time", bad})
		wantErr(t, err, "compact-hash-check-time", "must be >0")
	}
}
