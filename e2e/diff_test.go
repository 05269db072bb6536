package e2e

import (
	"bytes"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// Environment knobs of the differential test.
const (
	diffSeedsEnv = "KVD_E2E_DIFF_SEEDS" // comma-separated seeds, default "1,2,3"
	diffOpsEnv   = "KVD_E2E_DIFF_OPS"   // ops per seed, default 1500
	// KVD_E2E_DIFF_VERBOSE=1 (with -v) logs every request and both answers.
	diffVerboseEnv = "KVD_E2E_DIFF_VERBOSE"
)

// TestDifferential runs one seeded random sequence of KV requests against the
// server under test and a reference etcd v3.7.3, side by side from a fresh
// store, and requires identical responses (headers' member_id, cluster_id
// and raft_term zeroed) or identical errors (gRPC code and message).
func TestDifferential(t *testing.T) {
	t.Parallel()
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
	refKV := diffClientsOf(ref.Client(t).ActiveConnection())
	sutKV := diffClientsOf(sut.Client(t).ActiveConnection())
	g := &opGen{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), rev: 1, wide: true}
	counts := map[string]int{}
	mismatches := 0
	verbose := os.Getenv(diffVerboseEnv) != ""
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
		// etcd v3.7.3 panics on some requests (Txn shapes among them): a
		// side that did not answer, or answered with a panic, may be on
		// its way out; give it the time to exit so that a crash is
		// reported as one. The reference crashing says nothing of the
		// server under test, and the sequence cannot go on without it.
		for _, side := range []struct {
			p   *harness.Process
			err error
		}{{ref, refErr}, {sut, s.err}} {
			if noAnswer(side.err) || isPanicErr(side.err) {
				side.p.WaitExit(5 * time.Second)
			}
		}
		if exited, how := ref.Exited(); exited || isPanicErr(refErr) {
			t.Fatalf("seed %d op %d: the reference crashed (etcd exited: %v, %v; answer: %s) on\nop:   %s\n%s: %s\n(this says nothing about %s; the sequence cannot go on without a reference)",
				seed, i, exited, how, fmtResult(refResp, refErr), op, sut.Label(), fmtResult(s.resp, s.err), sut.Label())
		}
		if exited, how := sut.Exited(); exited || isPanicErr(s.err) {
			t.Fatalf("seed %d op %d: %s crashed (exited: %v, %v) on\nop:   %s\netcd: %s\n%s: %s",
				seed, i, sut.Label(), exited, how, op, fmtResult(refResp, refErr), sut.Label(), fmtResult(s.resp, s.err))
		}
		// A timed-out op on both sides would compare equal and prove nothing.
		for _, err := range []error{refErr, s.err} {
			if code, _ := errCodeMsg(err); err != nil && (code == codes.DeadlineExceeded || code == codes.Canceled || code == codes.Unavailable) {
				_, refState := ref.Exited()
				_, sutState := sut.Exited()
				t.Fatalf("seed %d op %d: %s: no answer: %v (etcd error: %v; etcd process: %v, %s process: %v)",
					seed, i, op, err, refErr, orRunning(refState), sut.Label(), orRunning(sutState))
			}
		}
		if verbose {
			t.Logf("seed %d op %d: %s\netcd: %s\n%s: %s", seed, i, op, fmtResult(refResp, refErr), sut.Label(), fmtResult(s.resp, s.err))
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

// isPanicErr tells an answer that reports a server-side panic (a gRPC
// Internal or Unknown error naming one) from an ordinary error.
func isPanicErr(err error) bool {
	if err == nil {
		return false
	}
	code, msg := errCodeMsg(err)
	return (code == codes.Internal || code == codes.Unknown) && strings.Contains(strings.ToLower(msg), "panic")
}

// diffClients are the services the differential sequence calls.
type diffClients struct {
	kv    pb.KVClient
	lease pb.LeaseClient
}

func diffClientsOf(cc grpc.ClientConnInterface) diffClients {
	return diffClients{kv: pb.NewKVClient(cc), lease: pb.NewLeaseClient(cc)}
}

// kvOp is one request of the random sequence; exactly one field is set.
type kvOp struct {
	rng     *pb.RangeRequest
	stream  bool // send rng as RangeStream and merge the chunks
	put     *pb.PutRequest
	del     *pb.DeleteRangeRequest
	txn     *pb.TxnRequest
	compact *pb.CompactionRequest
	grant   *pb.LeaseGrantRequest
	revoke  *pb.LeaseRevokeRequest
	rePut   bool // txn may put a key it deleted
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
	case o.grant != nil:
		return "grant"
	case o.revoke != nil:
		return "revoke"
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
	case o.grant != nil:
		m = o.grant
	case o.revoke != nil:
		m = o.revoke
	default:
		m = o.compact
	}
	return fmt.Sprintf("%s %v", o.kind(), m)
}

func (o *kvOp) do(ctx context.Context, c diffClients) (proto.Message, error) {
	kv := c.kv
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
	case o.grant != nil:
		return c.lease.LeaseGrant(ctx, o.grant)
	case o.revoke != nil:
		return c.lease.LeaseRevoke(ctx, o.revoke)
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
	// wide widens the mix (TestDifferential's): leases granted and
	// revoked with explicit IDs and named by puts and compares, more
	// ignore_value/ignore_lease, keys_only and count_only with every sort
	// and filter. The auth test keeps the narrow one.
	wide bool
	// rePutRevs are the revisions of txns that may have deleted a key (with
	// a from-key delete) and put it again. etcd v3.7.3 compacting at
	// exactly such a revision keeps the new generation's revision in its
	// index but deletes it from its backend; the next read of the key
	// kills it ("range failed to find revision pair"). The wide mix
	// compacts elsewhere.
	rePutRevs map[int64]bool
}

// kvDiffLeaseIDs are the lease IDs the wide mix grants, revokes and names; 999
// is never granted.
var kvDiffLeaseIDs = []int64{1, 2, 3, 4, 5, 999}

func (g *opGen) leaseID() int64 { return kvDiffLeaseIDs[g.intn(len(kvDiffLeaseIDs))] }

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
		if op.rePut {
			if g.rePutRevs == nil {
				g.rePutRevs = map[int64]bool{}
			}
			g.rePutRevs[r.Header.Revision] = true
		}
	case *pb.CompactionResponse:
		g.compacted = op.compact.Revision
	case *pb.LeaseGrantResponse:
		g.rev = max(g.rev, r.Header.Revision)
	case *pb.LeaseRevokeResponse:
		g.rev = max(g.rev, r.Header.Revision)
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
	if g.wide {
		return g.wideRangeReq(forStream)
	}
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

// wideRangeReq: keys_only and count_only often, with every sort target and
// order, any mix of the four revision filters, limits, and revisions from
// compacted to future.
func (g *opGen) wideRangeReq(forStream bool) *pb.RangeRequest {
	r := &pb.RangeRequest{Key: g.key()}
	r.RangeEnd = g.rangeEnd(r.Key)
	if g.chance(0.45) {
		r.Limit = int64(g.intn(6))
	}
	r.Revision = g.revision()
	r.Serializable = g.chance(0.3)
	r.KeysOnly = g.chance(0.4)
	r.CountOnly = g.chance(0.15)
	custom, filter := 0.5, 0.15
	if forStream {
		custom, filter = 0.05, 0.03
	}
	if g.chance(custom) {
		r.SortTarget = pb.RangeRequest_SortTarget(g.intn(5))
		r.SortOrder = pb.RangeRequest_SortOrder(g.intn(3))
	}
	rev := func() int64 { return int64(g.intn(int(g.rev + 2))) }
	if g.chance(filter) {
		r.MinModRevision = rev()
	}
	if g.chance(filter) {
		r.MaxModRevision = rev()
	}
	if g.chance(filter) {
		r.MinCreateRevision = rev()
	}
	if g.chance(filter) {
		r.MaxCreateRevision = rev()
	}
	return r
}

// widePutReq: ignore_value and ignore_lease on keys that may or may not
// exist, leases that may or may not exist, now and then a request etcd
// refuses before it reaches raft (a value with ignore_value, a lease with
// ignore_lease).
func (g *opGen) widePutReq() *pb.PutRequest {
	r := &pb.PutRequest{Key: g.key(), Value: g.value(), PrevKv: g.chance(0.5)}
	if g.chance(0.3) {
		r.Lease = g.leaseID()
	}
	if g.chance(0.15) {
		r.IgnoreValue = true
		if !g.chance(0.05) {
			r.Value = nil
		}
	}
	if g.chance(0.12) {
		r.IgnoreLease = true
		if !g.chance(0.05) {
			r.Lease = 0
		}
	}
	return r
}

func (g *opGen) putReq() *pb.PutRequest {
	if g.wide {
		return g.widePutReq()
	}
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
	operand := c.Target
	if g.chance(0.05) {
		// An operand of another target: both servers then compare with
		// the zero value of the target's own field.
		operand = pb.Compare_CompareTarget(g.intn(5))
	}
	switch operand {
	case pb.Compare_VERSION:
		c.TargetUnion = &pb.Compare_Version{Version: int64(g.intn(5))}
	case pb.Compare_CREATE:
		c.TargetUnion = &pb.Compare_CreateRevision{CreateRevision: revOperand()}
	case pb.Compare_MOD:
		c.TargetUnion = &pb.Compare_ModRevision{ModRevision: revOperand()}
	case pb.Compare_VALUE:
		c.TargetUnion = &pb.Compare_Value{Value: g.value()}
	case pb.Compare_LEASE:
		lease := int64(g.intn(2))
		if g.wide && g.chance(0.6) {
			lease = g.leaseID()
		}
		c.TargetUnion = &pb.Compare_Lease{Lease: lease}
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
	if g.wide {
		return g.wideNext()
	}
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
		return g.compactOp()
	}
}

func (g *opGen) compactOp() *kvOp {
	rev := max(1, g.compacted-1) + int64(g.intn(int(g.rev-g.compacted)+3))
	for g.rePutRevs[rev] {
		rev++
	}
	return &kvOp{compact: &pb.CompactionRequest{Revision: rev, Physical: g.chance(0.5)}}
}

func (g *opGen) wideNext() *kvOp {
	switch n := g.intn(100); {
	case n < 26:
		return &kvOp{put: g.putReq()}
	case n < 48:
		return &kvOp{rng: g.rangeReq(false)}
	case n < 53:
		return &kvOp{rng: g.rangeReq(true), stream: true}
	case n < 63:
		return &kvOp{del: g.delReq()}
	case n < 88:
		r := g.txnReq(0)
		return &kvOp{txn: r, rePut: clearIgnoresAfterDelete(r)}
	case n < 91:
		return g.compactOp()
	case n < 96:
		// Long TTLs: no lease expires within the sequence, as expiry
		// timing differs between the two servers.
		return &kvOp{grant: &pb.LeaseGrantRequest{ID: g.leaseID(), TTL: 3600}}
	default:
		return &kvOp{revoke: &pb.LeaseRevokeRequest{ID: g.leaseID()}}
	}
}

// clearIgnoresAfterDelete drops ignore_value and ignore_lease from every put
// of r that may run after a delete of its key in the same txn. etcd v3.7.3
// checks those puts against the store before the txn, then finds the key
// gone when it executes them and panics its apply loop (on every restart
// too): see TestTxnDeleteFromKeyThenPutIgnoreValue. Only a from-key delete
// gets there (etcd's duplicate-key check misses its interval; a put under
// any other delete of the txn is refused as a duplicate key), but all are
// cleared: the walk is in execution order over both branches, so it clears
// more than it must, never less. It reports whether r may put a key it
// deleted (see opGen.rePutRevs).
func clearIgnoresAfterDelete(r *pb.TxnRequest) (rePut bool) {
	var dels []*pb.DeleteRangeRequest
	var walk func(r *pb.TxnRequest)
	walk = func(r *pb.TxnRequest) {
		for _, ops := range [][]*pb.RequestOp{r.Success, r.Failure} {
			for _, op := range ops {
				switch {
				case op.GetRequestDeleteRange() != nil:
					dels = append(dels, op.GetRequestDeleteRange())
				case op.GetRequestPut() != nil:
					p := op.GetRequestPut()
					for _, d := range dels {
						if deletes(d, p.Key) {
							p.IgnoreValue, p.IgnoreLease = false, false
							rePut = true
						}
					}
				case op.GetRequestTxn() != nil:
					walk(op.GetRequestTxn())
				}
			}
		}
	}
	walk(r)
	return rePut
}

// deletes tells whether d deletes key.
func deletes(d *pb.DeleteRangeRequest, key []byte) bool {
	switch {
	case len(d.RangeEnd) == 0:
		return bytes.Equal(key, d.Key)
	case len(d.RangeEnd) == 1 && d.RangeEnd[0] == 0:
		return bytes.Compare(key, d.Key) >= 0
	}
	return bytes.Compare(key, d.Key) >= 0 && bytes.Compare(key, d.RangeEnd) < 0
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

func TestClearIgnoresAfterDelete(t *testing.T) {
	put := func(k string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte(k), IgnoreValue: true, IgnoreLease: true}}}
	}
	del := func(k, end string) *pb.RequestOp {
		return &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte(k), RangeEnd: []byte(end)}}}
	}
	before, single, ranged, fromKey, outside := put("a"), put("a"), put("b/1"), put("z"), put("c")
	r := &pb.TxnRequest{
		Success: []*pb.RequestOp{before, del("a", ""), single, {Request: &pb.RequestOp_RequestTxn{RequestTxn: &pb.TxnRequest{
			Success: []*pb.RequestOp{del("b/", "b0")}, Failure: []*pb.RequestOp{ranged}}}}},
		Failure: []*pb.RequestOp{del("x", "\x00"), fromKey, outside},
	}
	if !clearIgnoresAfterDelete(r) {
		t.Errorf("re-put not reported")
	}
	for name, c := range map[string]struct {
		op      *pb.RequestOp
		cleared bool
	}{"before the delete": {before, false}, "single": {single, true}, "range": {ranged, true}, "from key": {fromKey, true}, "outside": {outside, false}} {
		if p := c.op.GetRequestPut(); (!p.IgnoreValue && !p.IgnoreLease) != c.cleared {
			t.Errorf("%s: %v, want cleared=%v", name, p, c.cleared)
		}
	}
	if clearIgnoresAfterDelete(&pb.TxnRequest{Success: []*pb.RequestOp{put("a"), del("a", "")}}) {
		t.Errorf("a put before the delete reported as a re-put")
	}
}
