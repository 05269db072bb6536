package config

import (
	"fmt"
	"slices"
	"strings"
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

func TestFeatureGateTxnModeWriteWithSharedBufferRefused(t *testing.T) {
	refusedGate(t, "TxnModeWriteWithSharedBuffer")
}

func TestFeatureGateSetMemberLocalAddrRefused(t *testing.T) { refusedGate(t, "SetMemberLocalAddr") }

func TestFeatureGateFastLeaseKeepAliveRefused(t *testing.T) { refusedGate(t, "FastLeaseKeepAlive") }

func TestFeatureGatePriorityRequestRefused(t *testing.T) { refusedGate(t, "PriorityRequest") }

// Every setting kvd does not support is refused at start naming it and
// saying so, and every etcd feature gate is implemented or refused: nothing is
// accepted and ignored.
func TestEveryUnsupportedSettingRefused(t *testing.T) {
	implemented := []string{"LeaseCheckpoint", "LeaseCheckpointPersist", "InitialCorruptCheck", "FastLeaseKeepAlive", "CompactHashCheck"}
	for gate := range etcdFeatureGates {
		_, refused := unsupportedFeatureGates[gate]
		if !refused && !slices.Contains(implemented, gate) {
			t.Errorf("feature gate %s is neither implemented nor refused", gate)
		}
	}
	type refusal struct {
		name string
		args []string
		env  []string
		want []string
	}
	cases := []refusal{
		{"log-outputs systemd/journal", []string{"--log-outputs", "systemd/journal"}, nil, []string{"log-outputs", "systemd/journal is not supported by kvd"}},
		{"ETCD_NAME", nil, []string{"ETCD_NAME=n1"}, []string{"ETCD_NAME", "kvd does not support", "--name"}},
		{"ETCD_FORCE_NEW_CLUSTER", nil, []string{"ETCD_FORCE_NEW_CLUSTER=true"}, []string{"ETCD_FORCE_NEW_CLUSTER", "kvd does not support", "--force-new-cluster"}},
	}
	var all []string
	for gate := range unsupportedFeatureGates {
		other := fmt.Sprintf("%s=%v", gate, !etcdFeatureGates[gate])
		all = append(all, other)
		cases = append(cases, refusal{"feature gate " + gate, []string{"--feature-gates", other}, nil,
			[]string{"feature-gates: ", other, "kvd does not support feature gate " + gate}})
	}
	slices.Sort(all)
	cases = append(cases, refusal{"every unsupported gate at once", []string{"--feature-gates", strings.Join(all, ",")}, nil,
		[]string{"feature-gates: ", "kvd does not support feature gate"}})
	defer func(e func() []string) { environ = e }(environ)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			environ = func() []string { return tc.env }
			_, err := Parse(tc.args)
			wantErr(t, err, tc.want...)
		})
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
