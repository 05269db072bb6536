package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// This file holds the Watch, Lease, Maintenance and Cluster requests of the
// auth differential test, the tokens other than a client's own, and what is
// compared of their answers.

// authTokenMode is how an action sends its client's identity.
type authTokenMode int

const (
	authTokenOwn           authTokenMode = iota // the client's current token in metadata "token" (none if it holds none)
	authTokenFixed                              // action.fixed in metadata "token", even when empty
	authTokenBearer                             // "Bearer " + the client's token in metadata "token"
	authTokenAuthorization                      // the client's token in metadata "authorization"
)

// Fixed tokens no server ever issued.
const (
	// authFutureToken is a well-formed simple token whose raft index is
	// far beyond the applied one: etcd v3.7.3 waits for that index before
	// it resolves the token, i.e. until the request's deadline (doc 1.6).
	authFutureToken = "abcdefghijklmnop.999999999"
	// authShortDeadline is the deadline of a request with authFutureToken.
	authShortDeadline = 500 * time.Millisecond
)

var authFixedTokens = []string{
	"bogus.1",            // well formed, index long applied, unknown
	"abc",                // no '.'
	"abc.def",            // index not a number
	"abc.1.2",            // two '.'
	"",                   // present but empty
	"Bearer ",            // empty once the Bearer prefix is stripped
	"Bearer bogus.1",     // unknown, with the Bearer prefix
	authFutureToken,      // waits for the deadline
	authJWTLikeToken,     // JWT-shaped garbage: three base64 parts, bad signature
	"abcdefghijklmnop.0", // index 0
}

// authJWTLikeToken looks like a JWT ({"alg":"RS256","typ":"JWT"},
// {"revision":1,"username":"root"}, "signature"): three parts for a simple
// token provider, a bad signature for a JWT one.
const authJWTLikeToken = "eyJhbGciOiJSUzI1NiIsInR5cCI6IkpXVCJ9.eyJyZXZpc2lvbiI6MSwidXNlcm5hbWUiOiJyb290In0.c2lnbmF0dXJl"

func (a authAction) short() bool {
	return a.tok == authTokenFixed && a.fixed == authFutureToken
}

// tokenFor is the metadata key and value a carries when its client holds
// own on that server; send reports whether any goes.
func (a authAction) tokenFor(own string) (key, value string, send bool) {
	switch a.tok {
	case authTokenFixed:
		return rpctypes.TokenFieldNameGRPC, a.fixed, true
	case authTokenBearer:
		return rpctypes.TokenFieldNameGRPC, "Bearer " + own, own != ""
	case authTokenAuthorization:
		return rpctypes.TokenFieldNameSwagger, own, own != ""
	}
	return rpctypes.TokenFieldNameGRPC, own, own != ""
}

// describeToken says, for failure messages, which token a sends.
func (a authAction) describeToken(own string) string {
	switch a.tok {
	case authTokenFixed:
		return fmt.Sprintf("with token %q", a.fixed)
	case authTokenBearer:
		if own != "" {
			return `with "Bearer " + its token`
		}
	case authTokenAuthorization:
		if own != "" {
			return `with its token under metadata key "authorization"`
		}
	default:
		if own != "" {
			return "with its token"
		}
	}
	return "without a token"
}

// overrideToken makes a send another token than its client's own.
func (g *authGen) overrideToken(a *authAction) {
	switch n := g.intn(100); {
	case n < 15:
		a.tok = authTokenBearer
	case n < 25:
		a.tok = authTokenAuthorization
	default:
		a.tok = authTokenFixed
		a.fixed = pick(g, authFixedTokens)
		if a.fixed == authFutureToken {
			// Each costs the short deadline on both sides: only now and
			// then, and never on a call whose success could take long.
			switch a.req.(type) {
			case *pb.DefragmentRequest, *pb.SnapshotRequest:
				a.fixed = "bogus.1"
			}
			if g.chance(0.6) {
				a.fixed = "bogus.1"
			}
		}
	}
}

var (
	// authLeaseIDs are the leases of the sequence: the generator picks
	// the IDs so that both servers grant the same ones.
	authLeaseIDs = []int64{1, 2, 3, 1000, 1 << 40}
	// authLeaseTTLs are long enough that no lease expires during a run.
	authLeaseTTLs = []int64{120, 300, 3600}
)

// kvClient picks who sends a KV-like request: root 20%, anonymous 15%,
// else one of the three users.
func (g *authGen) kvClient() int {
	switch n := g.intn(100); {
	case n < 20:
		return authRootClient
	case n < 35:
		return authAnonClient
	}
	return 1 + g.intn(3)
}

// watchAction creates a watch, compares the create response, then cancels
// the watch (or, from a compacted revision, waits for the server to cancel
// it) and compares that answer too. Start revisions are never in the
// window where events would be sent: their interleaving with the cancel
// response is not fixed.
func (g *authGen) watchAction() authAction {
	creq := g.watchCreate()
	a := authAction{client: g.kvClient(), req: creq}
	switch n := g.intn(100); {
	case n < 8:
		creq.StartRevision = -1 - int64(g.intn(3))
	case n < 20:
		creq.StartRevision = g.kv.rev + 1 + int64(g.intn(3))
	case n < 30 && g.kv.compacted > 1:
		creq.StartRevision = 1 + int64(g.intn(int(g.kv.compacted-1)))
		a.watchCompacted = true
	}
	if !a.watchCompacted && g.chance(0.25) {
		// More creates on the same stream: refused ones take no ID,
		// requested IDs may clash. None from a compacted revision: the
		// order of its cancel against the other answers is not fixed.
		for range 1 + g.intn(2) {
			w := g.watchCreate()
			if g.chance(0.15) {
				w.StartRevision = -1
			}
			if w.WatchId == 0 && creq.WatchId != 0 && g.chance(0.3) {
				w.WatchId = creq.WatchId
			}
			a.watchMore = append(a.watchMore, w)
		}
	}
	// A progress request: answered at once when every watcher of the
	// stream is synced, which a compacted one is not.
	a.watchProgress = !a.watchCompacted && g.chance(0.15)
	return a
}

// watchCreate is a create request with start revision 0.
func (g *authGen) watchCreate() *pb.WatchCreateRequest {
	creq := &pb.WatchCreateRequest{}
	valid := authValidPerms
	switch n := g.intn(100); {
	case n < 30: // exactly a range permissions are granted on
		p := pick(g, valid)
		creq.Key, creq.RangeEnd = []byte(p.key), []byte(p.end)
	case n < 45: // from the key of a permission: a from-key watch
		p := pick(g, valid)
		creq.Key, creq.RangeEnd = []byte(p.key), []byte{0}
	case n < 52: // a prefix inside or around a permission
		p := pick(g, valid)
		creq.Key = []byte(p.key)
		creq.RangeEnd = prefixEnd(creq.Key)
	case n < 57: // all keys
		creq.Key, creq.RangeEnd = []byte{0}, []byte{0}
	case n < 60: // empty key: etcd watches "\x00" (alone, or from it)
		if g.chance(0.5) {
			creq.RangeEnd = []byte{0}
		}
	default: // the keys opGen writes: single, prefix, range, from-key
		creq.Key = g.kv.key()
		creq.RangeEnd = g.kv.rangeEnd(creq.Key)
	}
	creq.PrevKv = g.chance(0.2)
	creq.Fragment = g.chance(0.1)
	creq.ProgressNotify = g.chance(0.1)
	if g.chance(0.1) {
		creq.Filters = []pb.WatchCreateRequest_FilterType{pb.WatchCreateRequest_FilterType(g.intn(2))}
	}
	if g.chance(0.15) {
		creq.WatchId = int64(1 + g.intn(100))
	}
	return creq
}

func prefixEnd(key []byte) []byte {
	end := append([]byte(nil), key...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] < 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return []byte{0}
}

// leaseAction is a Lease request, or a Put or Txn that attaches a key to a
// lease, on one of the generator's lease IDs.
func (g *authGen) leaseAction() authAction {
	id := pick(g, authLeaseIDs)
	key := func() []byte {
		if g.chance(0.3) {
			p := pick(g, authValidPerms)
			if p.end == "" {
				return []byte(p.key)
			}
		}
		return g.kv.key()
	}
	var req proto.Message
	switch n := g.intn(100); {
	case n < 18:
		req = &pb.LeaseGrantRequest{ID: id, TTL: pick(g, authLeaseTTLs)}
	case n < 36:
		req = &pb.PutRequest{Key: key(), Value: g.kv.value(), Lease: id, PrevKv: g.chance(0.3)}
	case n < 40:
		// Keeps whatever lease the key has.
		req = &pb.PutRequest{Key: key(), Value: g.kv.value(), IgnoreLease: true, PrevKv: g.chance(0.3)}
	case n < 46:
		r := &pb.TxnRequest{}
		for range 1 + g.intn(2) {
			r.Success = append(r.Success, &pb.RequestOp{Request: &pb.RequestOp_RequestPut{
				RequestPut: &pb.PutRequest{Key: key(), Value: g.kv.value(), Lease: pick(g, authLeaseIDs)}}})
		}
		req = r
	case n < 58:
		req = &pb.LeaseRevokeRequest{ID: id}
	case n < 78:
		req = &pb.LeaseTimeToLiveRequest{ID: id, Keys: g.chance(0.6)}
	case n < 90:
		req = &pb.LeaseLeasesRequest{}
	default:
		req = &pb.LeaseKeepAliveRequest{ID: id}
	}
	return authAction{client: g.kvClient(), req: req}
}

// authAlarmActivate lets the sequence raise NOSPACE on the server. Off: kvd
// raises no alarms yet (pkg/api/maintenance.go), so an ACTIVATE is not
// stored there and writes go on, where etcd refuses them with "database
// space exceeded" until the DEACTIVATE.
const authAlarmActivate = false

// authDowngrade lets the sequence send Downgrade VALIDATE and CANCEL. Off:
// kvd does not implement Downgrade (a caller who passes the root check gets
// Unimplemented "method Downgrade not implemented" where etcd answers
// {version: "3.7"}); its auth checks are the ones of the other root-only
// calls.
const authDowngrade = false

// maintAction is a Maintenance or Cluster request.
func (g *authGen) maintAction() authAction {
	client := authRootClient
	switch n := g.intn(100); {
	case n < 40:
		client = 1 + g.intn(3)
	case n < 55:
		client = authAnonClient
	}
	alarm := func() pb.AlarmType { return pb.AlarmType(g.intn(3)) }
	var req proto.Message
	switch n := g.intn(100); {
	case n < 18:
		req = &pb.StatusRequest{}
	case n < 32:
		req = &pb.AlarmRequest{Action: pb.AlarmRequest_GET, Alarm: alarm()}
	case n < 37:
		r := &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, Alarm: alarm()}
		if g.chance(0.5) {
			r.MemberID = uint64(1 + g.intn(3))
		}
		req = r
	case n < 45:
		// NOSPACE on the server itself (see authAlarmActivate): writes
		// and lease grants are refused until it is deactivated.
		action := pb.AlarmRequest_DEACTIVATE
		if authAlarmActivate && g.chance(0.35) {
			action = pb.AlarmRequest_ACTIVATE
		}
		req = &pb.AlarmRequest{Action: action, Alarm: pb.AlarmType_NOSPACE}
		if client == authAnonClient || client != authRootClient && g.chance(0.5) {
			client = authRootClient
		}
		return authAction{client: client, req: req, selfID: true}
	case n < 58:
		req = &pb.HashRequest{}
	case n < 72:
		req = &pb.HashKVRequest{Revision: g.kv.revision()}
	case n < 75:
		req = &pb.DefragmentRequest{}
	case n < 78:
		req = &pb.SnapshotRequest{}
	case n < 81:
		// To itself (the single member is the leader already) or to a
		// member that does not exist.
		if g.chance(0.5) {
			return authAction{client: client, req: &pb.MoveLeaderRequest{}, selfID: true}
		}
		req = &pb.MoveLeaderRequest{TargetID: uint64(1 + g.intn(3))}
	case n < 84:
		// Membership changes that cannot change the membership: a
		// removal, update or promotion of a member that does not exist,
		// the promotion of the voter itself, and the addition of a
		// learner that never starts, mostly by someone who may not.
		switch g.intn(4) {
		case 0:
			if client == authRootClient {
				client = 1 + g.intn(3)
			}
			// A learner, in case the caller may: it leaves the quorum as
			// it is.
			req = &pb.MemberAddRequest{PeerURLs: []string{"http://127.0.0.1:1"}, IsLearner: true}
		case 1:
			req = &pb.MemberRemoveRequest{ID: uint64(1 + g.intn(3))}
		case 2:
			req = &pb.MemberUpdateRequest{ID: uint64(1 + g.intn(3)), PeerURLs: []string{"http://127.0.0.1:1"}}
		default:
			if g.chance(0.5) {
				return authAction{client: client, req: &pb.MemberPromoteRequest{}, selfID: true}
			}
			req = &pb.MemberPromoteRequest{ID: uint64(1 + g.intn(3))}
		}
	case n < 86 && authDowngrade:
		// VALIDATE and CANCEL only: ENABLE would start a downgrade.
		action := pb.DowngradeRequest_VALIDATE
		if g.chance(0.5) {
			action = pb.DowngradeRequest_CANCEL
		}
		req = &pb.DowngradeRequest{Action: action, Version: pick(g, []string{"3.6", "3.6.0", "3.5", "3.7", "x"})}
	default:
		req = &pb.MemberListRequest{Linearizable: g.chance(0.5)}
	}
	return authAction{client: client, req: req}
}

// authDo sends a's request on s and collects the answer.
func authDo(ctx context.Context, s authStubs, a authAction) authResult {
	o := waitForReady
	var (
		m   proto.Message
		err error
	)
	switch r := a.req.(type) {
	case *pb.WatchCreateRequest:
		return watchSeq(ctx, s.watch, a)
	case *pb.RangeRequest:
		if a.rangeStream {
			m, err = rangeStreamAll(ctx, s.kv, r)
		} else {
			m, err = authCall(ctx, s, r)
		}
	case *pb.LeaseGrantRequest:
		m, err = s.lease.LeaseGrant(ctx, r, o)
	case *pb.LeaseRevokeRequest:
		m, err = s.lease.LeaseRevoke(ctx, r, o)
	case *pb.LeaseTimeToLiveRequest:
		m, err = s.lease.LeaseTimeToLive(ctx, r, o)
	case *pb.LeaseLeasesRequest:
		m, err = s.lease.LeaseLeases(ctx, r, o)
	case *pb.LeaseKeepAliveRequest:
		m, err = leaseKeepAliveOnce(ctx, s.lease, r)
	case *pb.StatusRequest:
		m, err = s.maint.Status(ctx, r, o)
	case *pb.AlarmRequest:
		if a.selfID {
			r = proto.Clone(r).(*pb.AlarmRequest)
			r.MemberID = s.memberID
		}
		m, err = s.maint.Alarm(ctx, r, o)
	case *pb.MoveLeaderRequest:
		if a.selfID {
			r = &pb.MoveLeaderRequest{TargetID: s.memberID}
		}
		m, err = s.maint.MoveLeader(ctx, r, o)
	case *pb.DowngradeRequest:
		m, err = s.maint.Downgrade(ctx, r, o)
	case *pb.SnapshotRequest:
		m, err = snapshotFirst(ctx, s.maint)
	case *pb.MemberAddRequest:
		m, err = s.cluster.MemberAdd(ctx, r, o)
	case *pb.MemberRemoveRequest:
		m, err = s.cluster.MemberRemove(ctx, r, o)
	case *pb.MemberUpdateRequest:
		m, err = s.cluster.MemberUpdate(ctx, r, o)
	case *pb.MemberPromoteRequest:
		if a.selfID {
			r = &pb.MemberPromoteRequest{ID: s.memberID}
		}
		m, err = s.cluster.MemberPromote(ctx, r, o)
	case *pb.HashRequest:
		m, err = s.maint.Hash(ctx, r, o)
	case *pb.HashKVRequest:
		m, err = s.maint.HashKV(ctx, r, o)
	case *pb.DefragmentRequest:
		m, err = s.maint.Defragment(ctx, r, o)
	case *pb.MemberListRequest:
		m, err = s.cluster.MemberList(ctx, r, o)
	default:
		m, err = authCall(ctx, s, a.req)
	}
	if err != nil {
		return authResult{err: err}
	}
	return authResult{resp: m}
}

// watchSeq opens a watch stream, sends a's creates one by one and reads
// each create response; the first is the result's resp, the others go to
// "more", as do the answer to a progress request and, for every watch that
// was created, the answer to its cancel. From a compacted start revision
// the server cancels the watch itself, so no cancel is sent: its
// compaction cancel is read instead.
func watchSeq(ctx context.Context, wc pb.WatchClient, a authAction) authResult {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := wc.Watch(ctx, waitForReady)
	if err != nil {
		return authResult{err: err}
	}
	var res authResult
	var created []int64
	for i, creq := range append([]*pb.WatchCreateRequest{a.req.(*pb.WatchCreateRequest)}, a.watchMore...) {
		if err := st.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: creq}}); err != nil {
			if i == 0 {
				return authResult{err: err}
			}
			res.moreErr = err
			return res
		}
		r, err := st.Recv()
		switch {
		case err != nil && i == 0:
			return authResult{err: err}
		case err != nil:
			res.moreErr = err
			return res
		case i == 0:
			res.resp = r
		default:
			res.more = append(res.more, r)
		}
		if r.Created && !r.Canceled {
			created = append(created, r.WatchId)
		}
	}
	recv := func() bool {
		r, err := st.Recv()
		if err != nil {
			res.moreErr = err
			return false
		}
		res.more = append(res.more, r)
		return true
	}
	// etcd answers a progress request at once only when the stream has
	// a watcher and all are synced and not waiting for a future start
	// revision; else it defers it, or (no watcher) sends nothing at all.
	if a.watchProgress && len(created) > 0 && !a.watchCompacted && allFromNow(a) {
		if err := st.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}); err != nil {
			res.moreErr = err
			return res
		}
		if !recv() {
			return res
		}
	}
	for _, id := range created {
		if !a.watchCompacted {
			if err := st.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{
				CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}); err != nil {
				res.moreErr = err
				return res
			}
		}
		for {
			if !recv() {
				return res
			}
			if res.more[len(res.more)-1].(*pb.WatchResponse).Canceled {
				break
			}
		}
	}
	_ = st.CloseSend()
	return res
}

// allFromNow reports whether every create of a that is answered created
// watches from the current revision on (start_revision 0), the only
// watchers a progress request is answered for at once.
func allFromNow(a authAction) bool {
	for _, c := range append([]*pb.WatchCreateRequest{a.req.(*pb.WatchCreateRequest)}, a.watchMore...) {
		if c.StartRevision > 0 {
			return false
		}
	}
	return true
}

// rangeStreamAll sends r as RangeStream and merges the chunks, as
// TestDifferential does.
func rangeStreamAll(ctx context.Context, kv pb.KVClient, r *pb.RangeRequest) (proto.Message, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := kv.RangeStream(ctx, r, waitForReady)
	if err != nil {
		return nil, err
	}
	merged := &pb.RangeResponse{}
	for {
		c, err := st.Recv()
		if errors.Is(err, io.EOF) {
			return merged, nil
		}
		if err != nil {
			return nil, err
		}
		proto.Merge(merged, c.RangeResponse)
	}
}

// snapshotFirst opens a snapshot stream and reads its first message (an
// error arrives there). Only success or the error is compared: the
// snapshot is the engine's.
func snapshotFirst(ctx context.Context, mc pb.MaintenanceClient) (proto.Message, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := mc.Snapshot(ctx, &pb.SnapshotRequest{}, waitForReady)
	if err != nil {
		return nil, err
	}
	if _, err := st.Recv(); err != nil {
		return nil, err
	}
	return &pb.SnapshotResponse{}, nil
}

// leaseKeepAliveOnce sends one keep-alive on a stream of its own and reads
// its answer (errors arrive on the first Recv).
func leaseKeepAliveOnce(ctx context.Context, lc pb.LeaseClient, r *pb.LeaseKeepAliveRequest) (*pb.LeaseKeepAliveResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := lc.LeaseKeepAlive(ctx, waitForReady)
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

// normAuthResp returns m, or a copy of it reduced to what etcd's semantics
// fix; the rest legitimately differs between two servers (or two runs):
//
//   - Status: only the header (revision), whether the member is its own
//     leader, is_learner and errors (alarms). Version, raft indexes and
//     term, DB sizes and quota, storage version are the implementation's.
//   - Hash: the hash is of the engine's backend file. HashKV: the hash too
//     (kvd computes etcd's, and they agree for most revisions, but not for
//     all: see docs/etcd-auth-behaviour.md, section 5), and
//     compact_revision: for a revision it compacted at, etcd answers with
//     the hash its compaction job stored, whose compact_revision is the
//     previous compaction's (-1 for the first), or computes a fresh one
//     (compact_revision the latest) when asked before that job is done; a
//     race in etcd itself. The header revision and hash_revision are kept.
//   - MemberList, MemberAdd, MemberPromote: member IDs, names and URLs are
//     the process's: only how many members and which are learners (and the
//     added member's peer URLs).
//   - Snapshot: only whether the first message came (snapshotFirst).
//   - LeaseTimeToLive: keys sorted (etcd lists them in map order); the
//     remaining TTL is compared within a few seconds (alignTTL), and masked
//     for the digest.
//   - LeaseLeases: sorted by ID (both list them by expiry).
//
// The token of an AuthenticateResponse is masked too.
func normAuthResp(m proto.Message, forDigest bool) proto.Message {
	if m == nil {
		return nil
	}
	switch r := m.(type) {
	case *pb.AuthenticateResponse:
		return maskToken(r)
	case *pb.AlarmResponse:
		// The member's own ID is the process's.
		c := proto.Clone(r).(*pb.AlarmResponse)
		for _, am := range c.Alarms {
			if c.Header != nil && am.MemberID == c.Header.MemberId {
				am.MemberID = 1
			}
		}
		return c
	case *pb.StatusResponse:
		out := &pb.StatusResponse{Header: r.Header, IsLearner: r.IsLearner}
		for _, e := range r.Errors {
			if r.Header != nil {
				e = strings.ReplaceAll(e, strconv.FormatUint(r.Header.MemberId, 10), "<self>")
			}
			out.Errors = append(out.Errors, e)
		}
		if r.Header != nil && r.Leader == r.Header.MemberId {
			out.Leader = 1 // itself
		} else if r.Leader != 0 {
			out.Leader = 2 // another member
		}
		return out
	case *pb.HashResponse:
		c := proto.Clone(r).(*pb.HashResponse)
		c.Hash = 0
		return c
	case *pb.HashKVResponse:
		c := proto.Clone(r).(*pb.HashKVResponse)
		c.Hash, c.CompactRevision = 0, 0
		return c
	case *pb.MemberListResponse:
		out := &pb.MemberListResponse{Header: r.Header}
		for _, mem := range r.Members {
			out.Members = append(out.Members, &pb.Member{IsLearner: mem.IsLearner})
		}
		sortMembers(out.Members)
		return out
	case *pb.MemberAddResponse:
		out := &pb.MemberAddResponse{Header: r.Header}
		if r.Member != nil {
			out.Member = &pb.Member{IsLearner: r.Member.IsLearner, PeerURLs: r.Member.PeerURLs}
		}
		for _, mem := range r.Members {
			out.Members = append(out.Members, &pb.Member{IsLearner: mem.IsLearner})
		}
		sortMembers(out.Members)
		return out
	case *pb.MemberPromoteResponse:
		out := &pb.MemberPromoteResponse{Header: r.Header}
		for _, mem := range r.Members {
			out.Members = append(out.Members, &pb.Member{IsLearner: mem.IsLearner})
		}
		sortMembers(out.Members)
		return out
	case *pb.LeaseTimeToLiveResponse:
		c := proto.Clone(r).(*pb.LeaseTimeToLiveResponse)
		slices.SortFunc(c.Keys, bytes.Compare)
		if forDigest && c.TTL > 0 {
			c.TTL = 1
		}
		return c
	case *pb.LeaseLeasesResponse:
		c := proto.Clone(r).(*pb.LeaseLeasesResponse)
		slices.SortFunc(c.Leases, func(a, b *pb.LeaseStatus) int {
			switch {
			case a.ID < b.ID:
				return -1
			case a.ID > b.ID:
				return 1
			}
			return 0
		})
		return c
	}
	return m
}

// sortMembers orders reduced members voters first: both list members by
// ID, and the IDs differ.
func sortMembers(ms []*pb.Member) {
	slices.SortStableFunc(ms, func(a, b *pb.Member) int {
		switch {
		case a.IsLearner == b.IsLearner:
			return 0
		case b.IsLearner:
			return -1
		}
		return 1
	})
}

// alignTTL lets the remaining TTLs of two time-to-live answers differ by a
// few seconds: they are read at slightly different instants and truncated
// to seconds (±1), and after the restart each server extends every lease by
// its election timeout when it becomes leader, which the two do up to a
// couple of seconds apart (etcd 300 against kvd 298 seen, granted 300).
func alignTTL(ref, sut proto.Message) {
	const slack = 3
	a, ok1 := ref.(*pb.LeaseTimeToLiveResponse)
	b, ok2 := sut.(*pb.LeaseTimeToLiveResponse)
	if ok1 && ok2 && a != nil && b != nil && a.TTL > 0 && b.TTL > 0 && b.TTL-a.TTL <= slack && a.TTL-b.TTL <= slack {
		b.TTL = a.TTL
	}
}

// timedOut maps an error of a short-deadline request that came at or after
// the deadline to the client's own deadline error: whether the server gave
// up on its side first (with whatever error its wait ends in: etcd answers
// "invalid auth token", or Unknown "context deadline exceeded" from a
// write; kvd "request timed out") or the client did is a race.
func timedOut(res authResult, a authAction) authResult {
	if !a.short() || res.err == nil || res.took < authShortDeadline*9/10 {
		return res
	}
	res.err = status.Error(codes.DeadlineExceeded, context.DeadlineExceeded.Error())
	res.resp, res.more, res.moreErr = nil, nil, nil
	return res
}

// authFeatures names what a request exercises, for the coverage counts.
func authFeatures(req proto.Message) []string {
	var out []string
	switch r := req.(type) {
	case *pb.RangeRequest:
		if r.Revision != 0 {
			out = append(out, "Range revision")
		}
		if r.Limit != 0 {
			out = append(out, "Range limit")
		}
		if r.CountOnly {
			out = append(out, "Range count_only")
		}
	case *pb.TxnRequest:
		if txnHas(r, func(op *pb.RequestOp) bool { return op.GetRequestTxn() != nil }) {
			out = append(out, "Txn nested")
		}
		if txnHas(r, func(op *pb.RequestOp) bool { return op.GetRequestDeleteRange().GetPrevKv() }) {
			out = append(out, "Txn delete prev_kv")
		}
		if txnHas(r, func(op *pb.RequestOp) bool { return op.GetRequestPut().GetLease() != 0 }) {
			out = append(out, "Txn put lease")
		}
	case *pb.PutRequest:
		if r.Lease != 0 {
			out = append(out, "Put lease")
		}
	case *pb.WatchCreateRequest:
		switch {
		case bytes.Equal(r.RangeEnd, []byte{0}):
			out = append(out, "Watch from-key")
		case len(r.RangeEnd) == 0:
			out = append(out, "Watch key")
		default:
			out = append(out, "Watch range")
		}
		if r.StartRevision != 0 {
			out = append(out, "Watch start_revision")
		}
	case *pb.LeaseTimeToLiveRequest:
		if r.Keys {
			out = append(out, "LeaseTimeToLive keys")
		}
	}
	return out
}

// fmtAuthRes prints a result for a failure message.
func fmtAuthRes(res authResult) string {
	s := fmtAuthResult(res.resp, res.err)
	if res.err != nil {
		return s
	}
	var b strings.Builder
	b.WriteString(s)
	for _, m := range res.more {
		fmt.Fprintf(&b, "\n    then: %v", m)
	}
	if res.moreErr != nil {
		fmt.Fprintf(&b, "\n    then: %s", fmtResult(nil, res.moreErr))
	}
	return b.String()
}

// authKnownEnv, set to "ignore", turns the differences authKnownDiff
// recognises into counts: the way to look for further differences before
// kvd is fixed. By default they fail the test like any other.
const authKnownEnv = "KVD_E2E_AUTH_DIFF_KNOWN"

// authKnownDiff names the known difference between kvd and etcd v3.7.3
// that ref and sut show for a, or returns "". Each is reported (see
// docs/etcd-auth-behaviour.md, section 5); remove it here once kvd is fixed.
func authKnownDiff(a authAction, jwt bool, ref, sut authResult) string {
	refCode, refMsg := errCodeMsg(ref.err)
	sutCode, sutMsg := errCodeMsg(sut.err)
	if jwt && a.short() && sutCode == codes.DeadlineExceeded {
		// A simple token's shape ("<letters>.<raft index>") sent to a
		// server that uses JWTs: etcd refuses it at once (it does not
		// parse as a JWT); kvd waits for the raft index first.
		if refCode == codes.Unauthenticated {
			return "simple-token index awaited under JWT"
		}
		if w, ok := ref.resp.(*pb.WatchResponse); ok && ref.err == nil && strings.Contains(w.CancelReason, "invalid auth token") {
			return "simple-token index awaited under JWT"
		}
	}
	switch r := a.req.(type) {
	case *pb.HashKVRequest:
		// etcd keeps the hashes its last 10 compactions computed and
		// answers HashKV of such a revision from them, before it checks
		// the revision against the compaction point: a hash of a
		// compacted revision. kvd answers "compacted".
		if ref.err == nil && sutCode == codes.OutOfRange && sutMsg == "etcdserver: mvcc: required revision has been compacted" {
			return "HashKV of an old compaction revision"
		}
	case *pb.PutRequest, *pb.TxnRequest:
		// A put with ignore_value and a lease that does not exist, of a
		// key that does not exist: etcd looks the lease up first.
		if ref.err != nil && sut.err != nil && refCode == codes.NotFound && refMsg == "etcdserver: requested lease not found" &&
			sutCode == codes.InvalidArgument && sutMsg == "etcdserver: key not found" && hasLeasedIgnoreValue(a.req) {
			return "ignore_value put: lease looked up after the key"
		}
	case *pb.WatchCreateRequest:
		if ref.err != nil || sut.err != nil {
			break
		}
		// etcd v3.7.3 checks a from-key watch (range_end "\x00") as the
		// range [key, +inf), as it checks a from-key Range; kvd checks the
		// key alone (as etcd up to v3.5 did: it turned "\x00" into an
		// empty range_end before the check).
		creates := append([]*pb.WatchCreateRequest{r}, a.watchMore...)
		all := func(res authResult) []proto.Message { return append([]proto.Message{res.resp}, res.more...) }
		x, y := all(ref), all(sut)
		for i, c := range creates {
			if i >= len(x) || i >= len(y) {
				break
			}
			w1, w2 := x[i].(*pb.WatchResponse), y[i].(*pb.WatchResponse)
			if bytes.Equal(c.RangeEnd, []byte{0}) && w1.Canceled && strings.Contains(w1.CancelReason, "permission denied") && !w2.Canceled {
				return "from-key watch checked as its key alone"
			}
		}
	}
	return ""
}

func hasLeasedIgnoreValue(req proto.Message) bool {
	is := func(p *pb.PutRequest) bool { return p != nil && p.IgnoreValue && p.Lease != 0 }
	switch r := req.(type) {
	case *pb.PutRequest:
		return is(r)
	case *pb.TxnRequest:
		return txnHas(r, func(op *pb.RequestOp) bool { return is(op.GetRequestPut()) })
	}
	return false
}
