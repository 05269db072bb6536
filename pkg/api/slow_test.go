package api

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
	"github.com/kvd-dev/kvd/pkg/raftnode"
)

// readRaft is member 1's raft as far as reads go: a read index round
// answers 0 at once, or, if hang, fails after the request timeout as
// raftnode's rounds do (or when its context ends).
type readRaft struct {
	Raft
	hang    bool
	timeout time.Duration
}

func (r *readRaft) ID() uint64     { return 1 }
func (r *readRaft) Leader() uint64 { return 1 }
func (r *readRaft) Term() uint64   { return 2 }
func (r *readRaft) ReadIndex(ctx context.Context) (uint64, error) {
	if !r.hang {
		return 0, nil
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(r.timeout):
		return 0, raftnode.ErrReadIndexTimeout
	}
}

type slowFixture struct {
	s         *Server
	kv        *kvServer
	logs      *observer.ObservedLogs
	slowReads prometheus.Counter
	slowIdx   prometheus.Counter
}

func newSlowFixture(t *testing.T, limit, requestTimeout time.Duration, r *readRaft) slowFixture {
	t.Helper()
	st, err := mvcc.Open(enginetest.OpenT(t, enginetest.Names[0]), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Apply(func(b *mvcc.Batch) error {
		w := b.Write()
		w.Put([]byte("k"), []byte("secret"), 0)
		w.End()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r.timeout = requestTimeout
	core, logs := observer.New(zapcore.WarnLevel)
	f := slowFixture{
		logs:      logs,
		slowReads: prometheus.NewCounter(prometheus.CounterOpts{Name: "slow_apply_total"}),
		slowIdx:   prometheus.NewCounter(prometheus.CounterOpts{Name: "slow_read_indexes_total"}),
	}
	f.s = New(Config{WarningApplyDuration: limit, RequestTimeout: requestTimeout, MaxTxnOps: 128},
		Deps{Raft: r, Store: st, Registry: apply.NewRegistry(), Applied: apply.NewApplied(0), Cluster: membership.New(7, 1),
			Logger: zap.New(core), SlowReads: f.slowReads, SlowReadIndexes: f.slowIdx})
	f.kv = &kvServer{s: f.s}
	return f
}

func rangeOp(key string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte(key)}}}
}

// warning-apply-duration applies to Range and read-only Txn served from
// the member, as etcd's WarnOfExpensiveReadOnlyRangeRequest and
// WarnOfExpensiveReadOnlyTxnRequest: "apply request took too long" with
// prefix "read-only range " or "read-only txn ", each counted on
// etcd_server_slow_apply_total; faster reads are neither logged nor counted.
func TestSlowReadWarning(t *testing.T) {
	for _, tc := range []struct {
		limit time.Duration
		warn  bool
	}{{time.Nanosecond, true}, {time.Hour, false}} {
		t.Run(tc.limit.String(), func(t *testing.T) {
			f := newSlowFixture(t, tc.limit, time.Minute, &readRaft{})
			ctx := context.Background()
			rresp, err := f.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k")})
			if err != nil {
				t.Fatal(err)
			}
			if len(rresp.Kvs) != 1 || rresp.Header.MemberId != 1 || rresp.Header.ClusterId != 7 {
				t.Fatalf("range answered %v", rresp)
			}
			tresp, err := f.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{rangeOp("k"), rangeOp("none")}})
			if err != nil {
				t.Fatal(err)
			}
			if len(tresp.Responses) != 2 || tresp.Header.MemberId != 1 {
				t.Fatalf("txn answered %v", tresp)
			}
			// A serializable Range with an error is logged with it too.
			_, rangeErr := f.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k"), Revision: 100, Serializable: true})
			if !errors.Is(rangeErr, rpctypes.ErrGRPCFutureRev) {
				t.Fatalf("range at a future revision: %v", rangeErr)
			}

			got := f.logs.FilterMessage("apply request took too long").All()
			if !tc.warn {
				if len(got) != 0 || testutil.ToFloat64(f.slowReads) != 0 {
					t.Fatalf("logged %v, counted %v under a 1h limit", got, testutil.ToFloat64(f.slowReads))
				}
				return
			}
			if len(got) != 3 {
				t.Fatalf("%d warnings, want 3: %v", len(got), f.logs.All())
			}
			if n := testutil.ToFloat64(f.slowReads); n != 3 {
				t.Errorf("etcd_server_slow_apply_total %v, want 3", n)
			}
			for i, want := range []struct {
				prefix, request, response, err string
			}{
				{"read-only range ", `key:"k"`, "range_response_count:1 size:", ""},
				{"read-only txn ", `success:<request_range:{key:"k"} request_range:{key:"none"}>`,
					"responses:<range_response_count:1 range_response_count:0> size:", ""},
				{"read-only range ", `revision:100`, "", rangeErr.Error()},
			} {
				f := got[i].ContextMap()
				if took, ok := f["took"].(time.Duration); !ok || took <= 0 {
					t.Errorf("warning %d: took %v", i, f["took"])
				}
				if f["expected-duration"] != tc.limit || f["prefix"] != want.prefix {
					t.Errorf("warning %d: fields %v", i, f)
				}
				if req, _ := f["request"].(string); !strings.Contains(strings.Join(strings.Fields(req), ""), strings.ReplaceAll(want.request, " ", "")) {
					t.Errorf("warning %d: request %q, want it to hold %q", i, req, want.request)
				}
				resp, _ := f["response"].(string)
				if want.response == "" && resp != "" || !strings.HasPrefix(resp, want.response) {
					t.Errorf("warning %d: response %q, want %q…", i, resp, want.response)
				}
				if gotErr, _ := f["error"].(string); gotErr != want.err {
					t.Errorf("warning %d: error %q, want %q", i, gotErr, want.err)
				}
			}
		})
	}
}

// A linearizable read whose read index round outlives the request timeout
// is counted on etcd_server_slow_read_indexes_total, as etcd counts its
// timed out read index requests; a caller giving up first is not.
func TestSlowReadIndex(t *testing.T) {
	f := newSlowFixture(t, time.Hour, 20*time.Millisecond, &readRaft{hang: true})
	if _, err := f.kv.Range(context.Background(), &pb.RangeRequest{Key: []byte("k")}); !errors.Is(err, rpctypes.ErrGRPCTimeout) {
		t.Fatalf("range: %v, want %v", err, rpctypes.ErrGRPCTimeout)
	}
	if n := testutil.ToFloat64(f.slowIdx); n != 1 {
		t.Fatalf("etcd_server_slow_read_indexes_total %v after a timed out read index, want 1", n)
	}
	if len(f.logs.FilterMessage("timed out waiting for read index response (local node might have slow network)").All()) != 1 {
		t.Errorf("logs %v", f.logs.All())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := f.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{rangeOp("k")}}); err == nil {
		t.Fatal("txn answered with a hung read index")
	}
	if n := testutil.ToFloat64(f.slowIdx); n != 1 {
		t.Fatalf("etcd_server_slow_read_indexes_total %v after the caller's own deadline, want 1", n)
	}
	// Serializable reads do no read index round.
	if _, err := f.kv.Range(context.Background(), &pb.RangeRequest{Key: []byte("k"), Serializable: true}); err != nil {
		t.Fatal(err)
	}
}
