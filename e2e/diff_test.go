package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// Environment knobs of the differential test.
const (
	diffSeedsEnv = "KVD_E2E_DIFF_SEEDS" // comma-separated seeds, default "1,2,3"
	diffOpsEnv   = "KVD_E2E_DIFF_OPS"   // ops per seed, default 1500
)

// TestDifferential runs one seeded random sequence of KV requests against the
// server under test and a reference etcd v3.7.3, side by side from a fresh
// store, and requires identical responses (headers' member_id, cluster_id
// and raft_term zeroed) or identical errors (gRPC code and message).
func TestDifferential(t *testing.T) {
	seeds := []uint64{1, 2, 3}
	if s := os.Getenv(diffSeedsEnv); s != "" {
		seeds = nil
		for _, f := range strings.Split(s, ",") {
			v, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("%s=%q: %v", diffSeedsEnv, s, err)
			}
			seeds = append(seeds, v)
		}
	}
	nops := 1500
	if s := os.Getenv(diffOpsEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("%s=%q: %v", diffOpsEnv, s, err)
		}
		nops = v
	}
	for _, engine := range harness.Engines() {
		for _, seed := range seeds {
			t.Run(fmt.Sprintf("%s/seed=%d", engine, seed), func(t *testing.T) {
				runDifferential(t, engine, seed, nops)
			})
		}
	}
}

// maxDiffMismatches bounds the differences reported for one seed.
const maxDiffMismatches = 5

func runDifferential(t *testing.T, engine string, seed uint64, nops int) {
	ref := harness.StartEtcd(t, harness.Options{})
	sut := harness.StartKVD(t, harness.Options{Engine: engine})
	refKV := pb.NewKVClient(ref.Client(t).ActiveConnection())
	sutKV := pb.NewKVClient(sut.Client(t).ActiveConnection())
	g := &opGen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rev: 1}
	counts := map[string]int{}
	mismatches := 0
	for i := range nops {
		if i == nops/2 {
			// Halfway, both members restart: what follows also checks
			// that the store, its revision and its compaction point
			// survived.
			ref.Restart()
			sut.Restart()
		}
		op := g.next()
		counts[op.kind()]++
		type result struct {
			resp proto.Message
			err  error
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		sutc := make(chan result, 1)
		go func() {
			r, err := op.do(ctx, sutKV)
			sutc <- result{r, err}
		}()
		refResp, refErr := op.do(ctx, refKV)
		s := <-sutc
		cancel()
		// A timed-out op on both sides would compare equal and prove nothing.
		for _, err := range []error{refErr, s.err} {
			if code, _ := errCodeMsg(err); err != nil && (code == codes.DeadlineExceeded || code == codes.Canceled || code == codes.Unavailable) {
				_, refState := ref.Exited()
				_, sutState := sut.Exited()
				t.Fatalf("seed %d op %d: %s: no answer: %v (etcd error: %v; etcd process: %v, %s process: %v)",
					seed, i, op, err, refErr, orRunning(refState), sut.Label(), orRunning(sutState))
			}
		}
		if why := diffResults(refResp, refErr, s.resp, s.err); why != "" {
			mismatches++
			report := t.Errorf
			// After a write that may have diverged the stores, later
			// differences say nothing new.
			if !op.readOnly() && !(refErr != nil && s.err != nil) || mismatches >= maxDiffMismatches {
				report = t.Fatalf
			}
			report("seed %d op %d: responses differ (%s)\nop:   %s\netcd: %s\n%s: %s",
				seed, i, why, op, fmtResult(refResp, refErr), sut.Label(), fmtResult(s.resp, s.err))
		}
		if refErr != nil {
			_, msg := errCodeMsg(refErr)
			counts["error "+msg]++
		}
		g.observe(op, refResp, refErr)
	}
	// The whole store at the end, and at the oldest revision still kept.
	for _, rev := range []int64{0, g.compacted} {
		final := &kvOp{rng: &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Revision: rev}}
		refResp, refErr := final.do(testCtx(t), refKV)
		sutResp, sutErr := final.do(testCtx(t), sutKV)
		if why := diffResults(refResp, refErr, sutResp, sutErr); why != "" {
			t.Errorf("seed %d: final state at revision %d differs (%s)\netcd: %s\n%s: %s",
				seed, rev, why, fmtResult(refResp, refErr), sut.Label(), fmtResult(sutResp, sutErr))
		}
	}
	t.Logf("seed %d: %d ops %v, final revision %d, compacted at %d", seed, nops, counts, g.rev, g.compacted)
}

func fmtResult(m proto.Message, err error) string {
	if err != nil {
		code, msg := errCodeMsg(err)
		return fmt.Sprintf("error code=%v msg=%q", code, msg)
	}
	return fmt.Sprint(m)
}

// diffResults returns "" when the two results are the same, or what differs.
func diffResults(refResp proto.Message, refErr error, sutResp proto.Message, sutErr error) string {
	switch {
	case refErr != nil && sutErr != nil:
		rc, rm := errCodeMsg(refErr)
		sc, sm := errCodeMsg(sutErr)
		if rc != sc || rm != sm {
			return "different errors"
		}
		return ""
	case refErr != nil:
		return "only etcd failed"
	case sutErr != nil:
		return "only the server under test failed"
	}
	a, b := proto.Clone(refResp), proto.Clone(sutResp)
	zeroMemberFields(a.ProtoReflect())
	zeroMemberFields(b.ProtoReflect())
	if !proto.Equal(a, b) {
		return "different responses"
	}
	return ""
}

func TestDiffResults(t *testing.T) {
	hdr := func(member uint64, rev int64) *pb.ResponseHeader {
		return &pb.ResponseHeader{ClusterId: member + 1, MemberId: member, Revision: rev, RaftTerm: member + 2}
	}
	txn := func(member uint64, rev int64, val string) *pb.TxnResponse {
		return &pb.TxnResponse{Header: hdr(member, rev), Succeeded: true, Responses: []*pb.ResponseOp{
			{Response: &pb.ResponseOp_ResponseRange{ResponseRange: &pb.RangeResponse{Header: hdr(member, rev), Count: 1,
				Kvs: []*mvccpb.KeyValue{{Key: []byte("k"), Value: []byte(val)}}}}},
		}}
	}
	if why := diffResults(txn(1, 5, "v"), nil, txn(2, 5, "v"), nil); why != "" {
		t.Errorf("member fields not ignored: %s", why)
	}
	if why := diffResults(txn(1, 5, "v"), nil, txn(1, 6, "v"), nil); why == "" {
		t.Errorf("revision difference not seen")
	}
	if why := diffResults(txn(1, 5, "v"), nil, txn(1, 5, "w"), nil); why == "" {
		t.Errorf("nested value difference not seen")
	}
	if why := diffResults(nil, rpctypes.ErrGRPCCompacted, nil, rpctypes.ErrGRPCFutureRev); why == "" {
		t.Errorf("error difference not seen")
	}
	if why := diffResults(nil, rpctypes.ErrGRPCCompacted, nil, rpctypes.ErrGRPCCompacted); why != "" {
		t.Errorf("same errors differ: %s", why)
	}
	if why := diffResults(txn(1, 5, "v"), nil, nil, rpctypes.ErrGRPCCompacted); why == "" {
		t.Errorf("error vs response not seen")
	}
}

// zeroMemberFields clears, in every ResponseHeader within m, the fields that
// name the member rather than describe the data.
func zeroMemberFields(m protoreflect.Message) {
	if h, ok := m.Interface().(*pb.ResponseHeader); ok {
		h.ClusterId, h.MemberId, h.RaftTerm = 0, 0, 0
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap() || fd.Message() == nil:
		case fd.IsList():
			for i := 0; i < v.List().Len(); i++ {
				zeroMemberFields(v.List().Get(i).Message())
			}
		default:
			zeroMemberFields(v.Message())
		}
		return true
	})
}

// kvOp is one request of the random sequence; exactly one field is set.
type kvOp struct {
	rng     *pb.RangeRequest
	stream  bool // send rng as RangeStream and merge the chunks
	put     *pb.PutRequest
	del     *pb.DeleteRangeRequest
	txn     *pb.TxnRequest
	compact *pb.CompactionRequest
}

func (o *kvOp) kind() string {
	switch {
	case o.rng != nil && o.stream:
		return "stream"
	case o.rng != nil:
		return "range"
	case o.put != nil:
		return "put"
	case o.del != nil:
		return "delete"
	case o.txn != nil:
		return "txn"
	default:
		return "compact"
	}
}

// readOnly reports whether the op cannot change the store.
func (o *kvOp) readOnly() bool { return o.rng != nil }

func (o *kvOp) String() string {
	var m proto.Message
	switch {
	case o.rng != nil:
		m = o.rng
	case o.put != nil:
		m = o.put
	case o.del != nil:
		m = o.del
	case o.txn != nil:
		m = o.txn
	default:
		m = o.compact
	}
	return fmt.Sprintf("%s %v", o.kind(), m)
}

func (o *kvOp) do(ctx context.Context, kv pb.KVClient) (proto.Message, error) {
	switch {
	case o.rng != nil && o.stream:
		st, err := kv.RangeStream(ctx, o.rng)
		if err != nil {
			return nil, err
		}
		merged := &pb.RangeResponse{}
		for {
			r, err := st.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) {
					return merged, nil
				}
				return nil, err
			}
			proto.Merge(merged, r.RangeResponse)
		}
	case o.rng != nil:
		return kv.Range(ctx, o.rng)
	case o.put != nil:
		return kv.Put(ctx, o.put)
	case o.del != nil:
		return kv.DeleteRange(ctx, o.del)
	case o.txn != nil:
		return kv.Txn(ctx, o.txn)
	default:
		return kv.Compact(ctx, o.compact)
	}
}

// opGen generates requests. It follows the store's revision and compaction
// point from etcd's responses so that revisions it picks land around both:
// some compacted, some current, some in the future.
type opGen struct {
	rng       *rand.Rand
	rev       int64
	compacted int64
}

func (g *opGen) observe(op *kvOp, resp proto.Message, err error) {
	if err != nil {
		return
	}
	switch r := resp.(type) {
	case *pb.RangeResponse:
		if r.Header != nil {
			g.rev = max(g.rev, r.Header.Revision)
		}
	case *pb.PutResponse:
		g.rev = max(g.rev, r.Header.Revision)
	case *pb.DeleteRangeResponse:
		g.rev = max(g.rev, r.Header.Revision)
	case *pb.TxnResponse:
		g.rev = max(g.rev, r.Header.Revision)
	case *pb.CompactionResponse:
		g.compacted = op.compact.Revision
	}
}

func (g *opGen) chance(p float64) bool { return g.rng.Float64() < p }

func (g *opGen) intn(n int) int { return g.rng.IntN(n) }

var (
	diffPrefixes = []string{"", "a/", "a/b/", "b/", "c"}
	diffValues   = []string{"", "x", "y", "z", "val", "val2", "\x00", "\xff\xfe"}
)

func (g *opGen) key() []byte {
	return []byte(fmt.Sprintf("%s%d", diffPrefixes[g.intn(len(diffPrefixes))], g.intn(6)))
}

func (g *opGen) value() []byte {
	if g.chance(0.8) {
		return []byte(diffValues[g.intn(len(diffValues))])
	}
	b := make([]byte, 1+g.intn(40))
	for i := range b {
		b[i] = byte('a' + g.intn(26))
	}
	return b
}

// rangeEnd picks the end of a range starting at key: none (single key), a
// prefix end, another key (possibly before key: an empty range) or "\x00"
// (from key).
func (g *opGen) rangeEnd(key []byte) []byte {
	switch g.intn(5) {
	case 0, 1:
		return nil
	case 2:
		end := append([]byte(nil), key...)
		end[len(end)-1]++
		if g.chance(0.5) && len(end) > 1 {
			end = end[:len(end)-1]
			end[len(end)-1]++
		}
		return end
	case 3:
		return g.key()
	default:
		return []byte{0}
	}
}

// revision picks a revision near the live window: 0 (latest) most often,
// else anything from below the compaction point to past the head.
func (g *opGen) revision() int64 {
	if g.chance(0.55) {
		return 0
	}
	lo := max(1, g.compacted-2)
	return lo + int64(g.intn(int(g.rev+3-lo)))
}

func (g *opGen) rangeReq(forStream bool) *pb.RangeRequest {
	r := &pb.RangeRequest{Key: g.key()}
	r.RangeEnd = g.rangeEnd(r.Key)
	if g.chance(0.4) {
		r.Limit = int64(g.intn(6))
	}
	r.Revision = g.revision()
	r.Serializable = g.chance(0.3)
	r.KeysOnly = g.chance(0.15)
	r.CountOnly = g.chance(0.1)
	// Streams reject custom orders and filters; mostly send what they accept.
	custom := 0.3
	if forStream {
		custom = 0.05
	}
	if g.chance(custom) {
		r.SortTarget = pb.RangeRequest_SortTarget(g.intn(5))
		r.SortOrder = pb.RangeRequest_SortOrder(g.intn(3))
	}
	if g.chance(custom / 2) {
		rev := func() int64 { return int64(g.intn(int(g.rev + 2))) }
		switch g.intn(4) {
		case 0:
			r.MinModRevision = rev()
		case 1:
			r.MaxModRevision = rev()
		case 2:
			r.MinCreateRevision = rev()
		default:
			r.MaxCreateRevision = rev()
		}
	}
	return r
}

func (g *opGen) putReq() *pb.PutRequest {
	r := &pb.PutRequest{Key: g.key(), Value: g.value(), PrevKv: g.chance(0.5)}
	switch {
	case g.chance(0.06):
		r.IgnoreValue, r.Value = true, nil
	case g.chance(0.03):
		r.IgnoreLease = true
	case g.chance(0.01):
		r.Lease = int64(1 + g.intn(1000))
	}
	return r
}

func (g *opGen) delReq() *pb.DeleteRangeRequest {
	r := &pb.DeleteRangeRequest{Key: g.key(), PrevKv: g.chance(0.5)}
	if g.chance(0.6) {
		r.RangeEnd = g.rangeEnd(r.Key)
	}
	return r
}

func (g *opGen) compare() *pb.Compare {
	c := &pb.Compare{
		Key:    g.key(),
		Result: pb.Compare_CompareResult(g.intn(4)),
		Target: pb.Compare_CompareTarget(g.intn(5)),
	}
	if g.chance(0.2) {
		c.RangeEnd = g.rangeEnd(c.Key)
	}
	revOperand := func() int64 { return int64(g.intn(int(g.rev + 2))) }
	switch c.Target {
	case pb.Compare_VERSION:
		c.TargetUnion = &pb.Compare_Version{Version: int64(g.intn(5))}
	case pb.Compare_CREATE:
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: revOperand()}
	case pb.Compare_MOD:
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: revOperand()}
	case pb.Compare_VALUE:
		c.TargetUnion = &pb.Compare_Value{Value: g.value()}
	case pb.Compare_LEASE:
		c.TargetUnion = &pb.Compare_Lease{Lease: int64(g.intn(2))}
	}
	return c
}

func (g *opGen) txnReq(depth int) *pb.TxnRequest {
	r := &pb.TxnRequest{}
	for range g.intn(4) {
		r.Compare = append(r.Compare, g.compare())
	}
	ops := func() []*pb.RequestOp {
		var out []*pb.RequestOp
		for range g.intn(5) {
			switch n := g.intn(10); {
			case n < 3:
				out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: g.rangeReq(false)}})
			case n < 6:
				out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: g.putReq()}})
			case n < 8 || depth >= 2:
				out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: g.delReq()}})
			default:
				out = append(out, &pb.RequestOp{Request: &pb.RequestOp_RequestTxn{RequestTxn: g.txnReq(depth + 1)}})
			}
		}
		return out
	}
	r.Success = ops()
	r.Failure = ops()
	return r
}

func (g *opGen) next() *kvOp {
	switch n := g.intn(100); {
	case n < 30:
		return &kvOp{put: g.putReq()}
	case n < 55:
		return &kvOp{rng: g.rangeReq(false)}
	case n < 60:
		return &kvOp{rng: g.rangeReq(true), stream: true}
	case n < 72:
		return &kvOp{del: g.delReq()}
	case n < 97:
		r := g.txnReq(0)
		if txnHas(r, isFromKeyDelete) {
			txnHas(r, clearIgnoreFlags)
		}
		return &kvOp{txn: r}
	default:
		rev := max(1, g.compacted-1) + int64(g.intn(int(g.rev-g.compacted)+3))
		return &kvOp{compact: &pb.CompactionRequest{Revision: rev, Physical: g.chance(0.5)}}
	}
}

// txnHas reports whether pred holds for some op in the txn or its nested
// txns; pred may also modify the op.
func txnHas(r *pb.TxnRequest, pred func(*pb.RequestOp) bool) bool {
	found := false
	for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
		for _, op := range ops {
			if pred(op) {
				found = true
			}
			if t := op.GetRequestTxn(); t != nil && txnHas(t, pred) {
				found = true
			}
		}
	}
	return found
}

func isFromKeyDelete(op *pb.RequestOp) bool {
	d := op.GetRequestDeleteRange()
	return d != nil && len(d.RangeEnd) == 1 && d.RangeEnd[0] == 0
}

// clearIgnoreFlags drops ignore_value and ignore_lease from a put. etcd
// v3.7.3 panics when a from-key delete is followed in the same txn by such a
// put of a key it deleted (see TestTxnDeleteFromKeyThenPutIgnoreValue), so
// the generator never sends that mix to the reference.
func clearIgnoreFlags(op *pb.RequestOp) bool {
	if p := op.GetRequestPut(); p != nil {
		p.IgnoreValue, p.IgnoreLease = false, false
	}
	return false
}

func orRunning(exit error) any {
	if exit == nil {
		return "running"
	}
	return exit
}
