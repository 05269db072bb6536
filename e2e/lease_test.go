package e2e

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestLeaseDifferential runs a seeded random sequence of lease requests with
// explicit IDs (grant, put with a lease or ignore_lease, txn, delete, revoke,
// keep-alive, time-to-live with keys, leases) against the server under test
// and etcd v3.7.3 side by side, restarting both halfway, and requires equal
// responses. TTLs are long, so nothing expires during the run; the remaining
// TTL time-to-live reports is masked (it depends on timing), the granted
// TTL is not.
func TestLeaseDifferential(t *testing.T) {
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			runLeaseDifferential(t, engine, 7, 400)
		})
	}
}

type leaseClients struct {
	kv    pb.KVClient
	lease pb.LeaseClient
}

func newLeaseClients(t *testing.T, p *harness.Process) leaseClients {
	c := p.Client(t)
	return leaseClients{kv: pb.NewKVClient(c.ActiveConnection()), lease: pb.NewLeaseClient(c.ActiveConnection())}
}

// leaseOp is one request of the lease sequence.
type leaseOp struct {
	name string
	do   func(ctx context.Context, c leaseClients) (proto.Message, error)
}

var (
	diffLeaseIDs  = []int64{1, 2, 3, 4, 5, -3, 1 << 40}
	diffLeaseTTLs = []int64{300, 600, 1000, 9000000000, 9000000001}
	diffLeaseKeys = []string{"a", "b", "c", "d", "e", "f", "g", "h"}
)

func genLeaseOp(rng *rand.Rand) leaseOp {
	id := func() int64 {
		if rng.IntN(8) == 0 {
			return 0
		}
		return diffLeaseIDs[rng.IntN(len(diffLeaseIDs))]
	}
	key := func() []byte { return []byte(diffLeaseKeys[rng.IntN(len(diffLeaseKeys))]) }
	putReq := func() *pb.PutRequest {
		r := &pb.PutRequest{Key: key(), Value: []byte(fmt.Sprint(rng.IntN(100))), Lease: id(), PrevKv: rng.IntN(3) == 0}
		if rng.IntN(6) == 0 {
			r.Lease, r.IgnoreLease = 0, true
		}
		return r
	}
	switch n := rng.IntN(100); {
	case n < 20:
		r := &pb.LeaseGrantRequest{ID: id(), TTL: diffLeaseTTLs[rng.IntN(len(diffLeaseTTLs))]}
		if r.ID == 0 {
			r.ID = diffLeaseIDs[0]
		}
		return leaseOp{fmt.Sprintf("grant %v", r), func(ctx context.Context, c leaseClients) (proto.Message, error) {
			return c.lease.LeaseGrant(ctx, r)
		}}
	case n < 50:
		r := putReq()
		return leaseOp{fmt.Sprintf("put %v", r), func(ctx context.Context, c leaseClients) (proto.Message, error) {
			return c.kv.Put(ctx, r)
		}}
	case n < 58:
		r := &pb.TxnRequest{}
		for range 1 + rng.IntN(3) {
			if rng.IntN(4) == 0 {
				r.Success = append(r.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: key()}}})
				continue
			}
			p := putReq()
			p.IgnoreLease = false
			r.Success = append(r.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: p}})
		}
		return leaseOp{fmt.Sprintf("txn %v", r), func(ctx context.Context, c leaseClients) (proto.Message, error) {
			return c.kv.Txn(ctx, r)
		}}
	case n < 64:
		r := &pb.DeleteRangeRequest{Key: key(), PrevKv: true}
		return leaseOp{fmt.Sprintf("delete %v", r), func(ctx context.Context, c leaseClients) (proto.Message, error) {
			return c.kv.DeleteRange(ctx, r)
		}}
	case n < 74:
		r := &pb.LeaseRevokeRequest{ID: id()}
		return leaseOp{fmt.Sprintf("revoke %v", r), func(ctx context.Context, c leaseClients) (proto.Message, error) {
			return c.lease.LeaseRevoke(ctx, r)
		}}
	case n < 80:
		r := &pb.LeaseKeepAliveRequest{ID: id()}
		return leaseOp{fmt.Sprintf("keep-alive %v", r), func(ctx context.Context, c leaseClients) (proto.Message, error) {
			return keepAliveOnce(ctx, c.lease, r)
		}}
	case n < 90:
		r := &pb.LeaseTimeToLiveRequest{ID: id(), Keys: rng.IntN(2) == 0}
		return leaseOp{fmt.Sprintf("time-to-live %v", r), func(ctx context.Context, c leaseClients) (proto.Message, error) {
			return timeToLive(ctx, c.lease, r)
		}}
	case n < 95:
		return leaseOp{"leases", func(ctx context.Context, c leaseClients) (proto.Message, error) {
			return leases(ctx, c.lease)
		}}
	}
	return leaseOp{"range all", func(ctx context.Context, c leaseClients) (proto.Message, error) {
		return c.kv.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	}}
}

func keepAliveOnce(ctx context.Context, lc pb.LeaseClient, r *pb.LeaseKeepAliveRequest) (*pb.LeaseKeepAliveResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := lc.LeaseKeepAlive(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Send(r); err != nil {
		return nil, err
	}
	resp, err := s.Recv()
	if err != nil {
		return nil, err
	}
	_ = s.CloseSend()
	return resp, nil
}

// timeToLive masks the remaining TTL of a lease that exists and sorts the
// keys (etcd lists them in map order).
func timeToLive(ctx context.Context, lc pb.LeaseClient, r *pb.LeaseTimeToLiveRequest) (*pb.LeaseTimeToLiveResponse, error) {
	resp, err := lc.LeaseTimeToLive(ctx, r)
	if err == nil {
		if resp.TTL > 0 && resp.TTL <= resp.GrantedTTL+10 {
			resp.TTL = 1
		}
		slices.SortFunc(resp.Keys, bytes.Compare)
	}
	return resp, err
}

// leases sorts the IDs: both list by expiry, which depends on timing.
func leases(ctx context.Context, lc pb.LeaseClient) (*pb.LeaseLeasesResponse, error) {
	resp, err := lc.LeaseLeases(ctx, &pb.LeaseLeasesRequest{})
	if err == nil {
		slices.SortFunc(resp.Leases, func(a, b *pb.LeaseStatus) int { return int(min(max(a.ID-b.ID, -1), 1)) })
	}
	return resp, err
}

func runLeaseDifferential(t *testing.T, engine string, seed uint64, nops int) {
	ref := harness.StartEtcd(t, harness.Options{})
	sut := harness.StartKVD(t, harness.Options{Engine: engine})
	refC, sutC := newLeaseClients(t, ref), newLeaseClients(t, sut)
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	counts := map[string]int{}
	compare := func(i int, op leaseOp) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		refResp, refErr := op.do(ctx, refC)
		sutResp, sutErr := op.do(ctx, sutC)
		for _, err := range []error{refErr, sutErr} {
			if code, _ := errCodeMsg(err); err != nil && (code == codes.DeadlineExceeded || code == codes.Canceled || code == codes.Unavailable) {
				t.Fatalf("seed %d op %d: %s: no answer: %v (etcd: %v, %s: %v)", seed, i, op.name, err, refErr, sut.Label(), sutErr)
			}
		}
		if refErr != nil {
			_, msg := errCodeMsg(refErr)
			counts["error "+msg]++
		}
		if why := diffResults(refResp, refErr, sutResp, sutErr); why != "" {
			t.Fatalf("seed %d op %d: responses differ (%s)\nop:   %s\netcd: %s\n%s: %s",
				seed, i, why, op.name, fmtResult(refResp, refErr), sut.Label(), fmtResult(sutResp, sutErr))
		}
	}
	for i := range nops {
		if i == nops/2 {
			ref.Restart()
			sut.Restart()
			refC, sutC = newLeaseClients(t, ref), newLeaseClients(t, sut)
		}
		op := genLeaseOp(rng)
		counts[op.name[:min(len(op.name), 5)]]++
		compare(i, op)
	}
	compare(nops, leaseOp{"range all", func(ctx context.Context, c leaseClients) (proto.Message, error) {
		return c.kv.Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}})
	}})
	for _, id := range diffLeaseIDs {
		r := &pb.LeaseTimeToLiveRequest{ID: id, Keys: true}
		compare(nops, leaseOp{fmt.Sprintf("final time-to-live %d", id), func(ctx context.Context, c leaseClients) (proto.Message, error) {
			return timeToLive(ctx, c.lease, r)
		}})
	}
	t.Logf("seed %d: %d ops %v", seed, nops, counts)
}
