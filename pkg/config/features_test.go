package config

import (
	"strings"
	"testing"
)

func TestFeatureGates(t *testing.T) {
	cases := []struct {
		gates   string
		wantErr string
		on      []string
	}{
		{"", "", []string{"FastLeaseKeepAlive"}},
		{"LeaseCheckpoint=true", "", []string{"LeaseCheckpoint"}},
		{"LeaseCheckpoint=true, LeaseCheckpointPersist=true", "", []string{"LeaseCheckpoint", "LeaseCheckpointPersist"}},
		{"LeaseCheckpointPersist=true", "requires enabling feature gate LeaseCheckpoint", nil},
		{"NoSuchGate=true", `unknown feature gate "NoSuchGate"`, nil},
		{"LeaseCheckpoint=yes", "not a boolean", nil},
		{"LeaseCheckpoint", "want Name=true", nil},
	}
	for _, tc := range cases {
		c := Default()
		c.FeatureGates = tc.gates
		err := c.Validate()
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), "feature-gates: ") || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%q: error %v, want feature-gates: ...%s", tc.gates, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.gates, err)
			continue
		}
		for _, name := range tc.on {
			if !c.FeatureEnabled(name) {
				t.Errorf("%q: %s is off", tc.gates, name)
			}
		}
	}
}
