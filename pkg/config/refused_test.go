package config

import (
	"fmt"
	"slices"
	"testing"
)

// refusedGate checks that an etcd feature gate kvd does not implement is
// refused, by flag and by file, naming feature-gates, the gate and that kvd
// does not support it, while its etcd default is accepted.
func refusedGate(t *testing.T, gate string) {
	t.Helper()
	def, known := etcdFeatureGates[gate]
	if !known {
		t.Fatalf("%s is not an etcd v3.7 feature gate", gate)
	}
	other := fmt.Sprintf("%s=%v", gate, !def)
	_, err := Parse([]string{"--feature-gates", other})
	wantErr(t, err, "feature-gates: ", other, "kvd does not support feature gate "+gate)
	_, err = Parse([]string{"--config", writeFile(t, "feature-gates: LeaseCheckpoint=true,"+other+"\n")})
	wantErr(t, err, "feature-gates: ", other, "kvd does not support")
	if _, err := Parse([]string{"--feature-gates", fmt.Sprintf("%s=%v", gate, def)}); err != nil {
		t.Errorf("%s=%v (etcd's default) refused: %v", gate, def, err)
	}
}

func TestFeatureGateStopGRPCServiceOnDefragRefused(t *testing.T) {
	refusedGate(t, "StopGRPCServiceOnDefrag")
}

func TestFeatureGateCompactHashCheckRefused(t *testing.T) { refusedGate(t, "CompactHashCheck") }

func TestFeatureGateTxnModeWriteWithSharedBufferRefused(t *testing.T) {
	refusedGate(t, "TxnModeWriteWithSharedBuffer")
}

func TestFeatureGateSetMemberLocalAddrRefused(t *testing.T) { refusedGate(t, "SetMemberLocalAddr") }

func TestFeatureGateFastLeaseKeepAliveRefused(t *testing.T) { refusedGate(t, "FastLeaseKeepAlive") }

func TestFeatureGatePriorityRequestRefused(t *testing.T) { refusedGate(t, "PriorityRequest") }

// Every gate kvd does not implement is refused, and the gates it implements
// are not: no gate is accepted and ignored.
func TestEveryUnsupportedSettingRefused(t *testing.T) {
	implemented := []string{"LeaseCheckpoint", "LeaseCheckpointPersist", "InitialCorruptCheck", "FastLeaseKeepAlive"}
	for gate := range etcdFeatureGates {
		_, refused := unsupportedFeatureGates[gate]
		if !refused && !slices.Contains(implemented, gate) {
			t.Errorf("feature gate %s is neither implemented nor refused", gate)
		}
	}
	for gate := range unsupportedFeatureGates {
		t.Run(gate, func(t *testing.T) { refusedGate(t, gate) })
	}
	// Every gate on (or off) at once: each refused gate is named.
	var all string
	for gate, def := range etcdFeatureGates {
		if _, refused := unsupportedFeatureGates[gate]; refused {
			all += fmt.Sprintf("%s=%v,", gate, !def)
		}
	}
	c := Default()
	c.FeatureGates = all[:len(all)-1]
	if err := c.Validate(); err == nil {
		t.Fatalf("%s accepted", c.FeatureGates)
	}
}

// etcd v3.7's InitialCorruptCheck gate turns on initial-corrupt-check.
func TestFeatureGateInitialCorruptCheck(t *testing.T) {
	c, err := Parse([]string{"--feature-gates", "InitialCorruptCheck=true"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.InitialCorruptCheck {
		t.Fatal("InitialCorruptCheck=true left initial-corrupt-check off")
	}
	c, err = Parse([]string{"--config", writeFile(t, "feature-gates: InitialCorruptCheck=true\n")})
	if err != nil || !c.InitialCorruptCheck {
		t.Fatalf("from the file: %v, initial-corrupt-check %v", err, c != nil && c.InitialCorruptCheck)
	}
	c, err = Parse(nil)
	if err != nil || c.InitialCorruptCheck {
		t.Fatalf("default: %v, initial-corrupt-check on", err)
	}
}
