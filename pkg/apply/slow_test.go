package apply

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// warning-apply-duration: an apply slower than it is logged as etcd logs
// it; faster ones are not.
func TestWarningApplyDuration(t *testing.T) {
	for _, tc := range []struct {
		limit time.Duration
		warn  bool
	}{{time.Nanosecond, true}, {time.Hour, false}} {
		t.Run(tc.limit.String(), func(t *testing.T) {
			st, err := mvcc.Open(enginetest.OpenT(t, enginetest.Names[0]), zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() })
			core, logs := observer.New(zapcore.WarnLevel)
			slow := prometheus.NewCounter(prometheus.CounterOpts{Name: "slow_apply_total"})
			a := New(Config{Store: st, Registry: NewRegistry(), Applied: NewApplied(0), Logger: zap.New(core), WarningApplyDuration: tc.limit, SlowApplies: slow})
			do(t, a, st, &pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("k"), Value: []byte("secret")}})

			got := logs.FilterMessage("apply request took too long").All()
			if !tc.warn {
				if len(got) != 0 {
					t.Fatalf("logged %v under a 1h limit", got)
				}
				if n := testutil.ToFloat64(slow); n != 0 {
					t.Fatalf("etcd_server_slow_apply_total %v under a 1h limit", n)
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("%d warnings, want 1: %v", len(got), logs.All())
			}
			if n := testutil.ToFloat64(slow); n != 1 {
				t.Errorf("etcd_server_slow_apply_total %v, want 1", n)
			}
			f := got[0].ContextMap()
			if f["took"] == nil || f["expected-duration"] != tc.limit || f["prefix"] != "" {
				t.Errorf("fields %v", f)
			}
			req, _ := f["request"].(string)
			if !strings.Contains(req, `key:"k"`) || strings.Contains(req, "secret") || !strings.Contains(req, "value_size:6") {
				t.Errorf("request field %q: want etcd's loggable form (key, value size, no value)", req)
			}
			if resp, _ := f["response"].(string); !strings.HasPrefix(resp, "size:") {
				t.Errorf("response field %q, want size:N", resp)
			}
		})
	}
}

// A request that is not slow costs no allocation.
func TestSlowLogFastReadsDoNotAllocate(t *testing.T) {
	l := SlowLog{Logger: zap.NewNop(), Limit: time.Hour}
	rreq := &pb.RangeRequest{Key: []byte("k")}
	rresp := &pb.RangeResponse{Header: &pb.ResponseHeader{Revision: 1}}
	treq := &pb.TxnRequest{}
	tresp := &pb.TxnResponse{Header: &pb.ResponseHeader{Revision: 1}}
	areq, ares := &pb.InternalRaftRequest{}, &Result{}
	if n := testing.AllocsPerRun(100, func() {
		start := time.Now()
		l.ReadOnlyRange(start, rreq, rresp, nil)
		l.ReadOnlyTxn(start, treq, tresp, nil)
		l.Apply(start, areq, ares)
	}); n != 0 {
		t.Errorf("%v allocations per fast request, want 0", n)
	}
}
