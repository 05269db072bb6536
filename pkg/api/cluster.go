package api

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/membershippb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/kvd-dev/kvd/pkg/apply"
	"github.com/kvd-dev/kvd/pkg/membership"
)

// learnerReadyPercent is how close a learner's log must be to the leader's
// before it may be promoted (etcd's readyPercentThreshold).
const learnerReadyPercent = 0.9

type clusterServer struct {
	pb.UnimplementedClusterServer
	s *Server
}

func toPBMembers(ms []membership.Member) []*pb.Member {
	out := make([]*pb.Member, 0, len(ms))
	for _, m := range ms {
		out = append(out, toPBMember(m))
	}
	return out
}

func toPBMember(m membership.Member) *pb.Member {
	return &pb.Member{ID: m.ID, Name: m.Name, PeerURLs: m.PeerURLs, ClientURLs: m.ClientURLs, IsLearner: m.IsLearner}
}

// memberHeader is the header etcd puts on member calls: no revision.
func (s *Server) memberHeader() *pb.ResponseHeader { return s.header(0) }

func (c *clusterServer) MemberList(ctx context.Context, r *pb.MemberListRequest) (*pb.MemberListResponse, error) {
	s := c.s
	if r.Linearizable {
		if err := s.linearize(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.requireUser(ctx); err != nil {
		return nil, err
	}
	return &pb.MemberListResponse{Header: s.memberHeader(), Members: toPBMembers(s.Cluster.Members())}, nil
}

func (c *clusterServer) MemberAdd(ctx context.Context, r *pb.MemberAddRequest) (*pb.MemberAddResponse, error) {
	s := c.s
	if err := membership.ValidatePeerURLs(r.PeerURLs); err != nil {
		return nil, rpctypes.ErrGRPCMemberBadURLs
	}
	now := time.Now()
	m := membership.Member{ID: membership.MemberID(r.PeerURLs, "", &now), PeerURLs: r.PeerURLs, IsLearner: r.IsLearner}
	typ := raftpb.ConfChangeAddNode
	if r.IsLearner {
		typ = raftpb.ConfChangeAddLearnerNode
	}
	if err := s.mayAddMember(r.IsLearner); err != nil {
		return nil, err
	}
	if err := s.proposeConfChange(ctx, typ, m.ID, apply.ConfChangeContext{Member: m}); err != nil {
		return nil, err
	}
	added, _ := s.Cluster.Member(m.ID)
	return &pb.MemberAddResponse{Header: s.memberHeader(), Member: toPBMember(added), Members: toPBMembers(s.Cluster.Members())}, nil
}

func (c *clusterServer) MemberRemove(ctx context.Context, r *pb.MemberRemoveRequest) (*pb.MemberRemoveResponse, error) {
	s := c.s
	// etcd runs the strict check before it looks the member up.
	if err := s.mayRemoveMember(r.ID); err != nil {
		return nil, err
	}
	if _, ok := s.Cluster.Member(r.ID); !ok {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	if err := s.proposeConfChange(ctx, raftpb.ConfChangeRemoveNode, r.ID, apply.ConfChangeContext{Member: membership.Member{ID: r.ID}}); err != nil {
		return nil, err
	}
	return &pb.MemberRemoveResponse{Header: s.memberHeader(), Members: toPBMembers(s.Cluster.Members())}, nil
}

func (c *clusterServer) MemberUpdate(ctx context.Context, r *pb.MemberUpdateRequest) (*pb.MemberUpdateResponse, error) {
	s := c.s
	if err := membership.ValidatePeerURLs(r.PeerURLs); err != nil {
		return nil, rpctypes.ErrGRPCMemberBadURLs
	}
	m, ok := s.Cluster.Member(r.ID)
	if !ok {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	m.PeerURLs = r.PeerURLs
	if err := s.proposeConfChange(ctx, raftpb.ConfChangeUpdateNode, r.ID, apply.ConfChangeContext{Member: m}); err != nil {
		return nil, err
	}
	return &pb.MemberUpdateResponse{Header: s.memberHeader(), Members: toPBMembers(s.Cluster.Members())}, nil
}

func (c *clusterServer) MemberPromote(ctx context.Context, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	s := c.s
	m, ok := s.Cluster.Member(r.ID)
	if !ok {
		return nil, rpctypes.ErrGRPCMemberNotFound
	}
	if !m.IsLearner {
		return nil, rpctypes.ErrGRPCMemberNotLearner
	}
	// Only the leader knows how far the learner's log is.
	if lead := s.Raft.Leader(); lead != s.Raft.ID() {
		if lead == raft.None {
			return nil, rpctypes.ErrGRPCNoLeader
		}
		return s.forwardPromote(ctx, lead, r)
	}
	if err := s.learnerReady(ctx, r.ID); err != nil {
		return nil, err
	}
	if err := s.mayPromoteMember(); err != nil {
		return nil, err
	}
	m.IsLearner = false
	if err := s.proposeConfChange(ctx, raftpb.ConfChangeAddNode, r.ID, apply.ConfChangeContext{Member: m, IsPromote: true}); err != nil {
		return nil, err
	}
	s.count(s.LearnerPromotions)
	return &pb.MemberPromoteResponse{Header: s.memberHeader(), Members: toPBMembers(s.Cluster.Members())}, nil
}

// learnerReady refuses a promotion while the learner's log is behind the
// leader's by more than etcd's threshold.
func (s *Server) learnerReady(ctx context.Context, id uint64) error {
	st, err := s.Raft.Status(ctx)
	if err != nil {
		return s.raftErr(ctx, err)
	}
	pr, ok := st.Progress[id]
	if !ok {
		return rpctypes.ErrGRPCMemberNotFound
	}
	leaderMatch := st.Progress[st.ID].Match
	if float64(pr.Match) < float64(leaderMatch)*learnerReadyPercent {
		return rpctypes.ErrGRPCLearnerNotReady
	}
	return nil
}

// HealthInterval is how long this member must have been connected to a
// voting peer for the strict reconfiguration check to count it as active
// (etcd's etcdserver.HealthInterval).
const HealthInterval = 5 * time.Second

// votingMembers returns the members that are not learners.
func (s *Server) votingMembers() []membership.Member {
	var out []membership.Member
	for _, m := range s.Cluster.Members() {
		if !m.IsLearner {
			out = append(out, m)
		}
	}
	return out
}

// started reports whether m has published its name, which an added member
// does once it runs (etcd's Member.IsStarted; the members of the initial
// cluster are named from the start).
func started(m membership.Member) bool { return m.Name != "" }

func quorum(n int) int { return n/2 + 1 }

// connectedSince reports whether this member has been connected to peer id
// continuously since t (etcd's isConnectedSince).
func (s *Server) connectedSince(id uint64, t time.Time) bool {
	if s.PeerActiveSince == nil {
		return false
	}
	at := s.PeerActiveSince(id)
	return !at.IsZero() && at.Before(t)
}

// numConnectedSince counts the members of ms this member has been connected
// to continuously since t, itself included (etcd's numConnectedSince).
func (s *Server) numConnectedSince(ms []membership.Member, t time.Time) int {
	n := 0
	for _, m := range ms {
		if m.ID == s.Raft.ID() || s.connectedSince(m.ID, t) {
			n++
		}
	}
	return n
}

// healthSince is the time since which a peer must have been connected to
// count as active.
func (s *Server) healthSince() time.Time {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	d := s.cfg.HealthInterval
	if d == 0 {
		d = HealthInterval
	}
	return now().Add(-d)
}

// mayAddMember is etcd's strict reconfiguration check of a member add: a
// voter is refused with "not enough started members" unless the started
// voters would still be a quorum with it (a voter added to a one-member
// cluster whose member is started passes, as in etcd: restoring a cluster
// from one member); any add is refused as "unhealthy cluster" unless this
// member has been connected for HealthInterval to a quorum of the voters
// counted with the new member (always allowed in a one-voter cluster).
func (s *Server) mayAddMember(learner bool) error {
	if !s.cfg.StrictReconfigCheck {
		return nil
	}
	voters := s.votingMembers()
	if !learner {
		members, up := len(voters)+1, 0
		for _, m := range voters {
			if started(m) {
				up++
			}
		}
		if !(up == 1 && members == 2) && up < quorum(members) {
			return rpctypes.ErrGRPCMemberNotEnoughStarted
		}
	}
	if len(voters) == 1 {
		return nil
	}
	if s.numConnectedSince(voters, s.healthSince()) < quorum(len(voters)+1) {
		return rpctypes.ErrGRPCUnhealthy
	}
	return nil
}

// mayRemoveMember is etcd's strict reconfiguration check of a member
// remove: a learner may always go; a voter is refused with "not enough
// started members" unless the other started voters are a quorum of the
// others. A voter this member has no stream to now may go (it is not in the
// active quorum); else it is refused as "unhealthy cluster" unless the
// voters this member has been connected to for HealthInterval, less one,
// are a quorum of the voters less one.
func (s *Server) mayRemoveMember(id uint64) error {
	if !s.cfg.StrictReconfigCheck {
		return nil
	}
	if m, ok := s.Cluster.Member(id); ok && m.IsLearner {
		return nil
	}
	voters := s.votingMembers()
	others, up := 0, 0
	for _, m := range voters {
		if m.ID == id {
			continue
		}
		others++
		if started(m) {
			up++
		}
	}
	if up < quorum(others) {
		return rpctypes.ErrGRPCMemberNotEnoughStarted
	}
	if id != s.Raft.ID() && (s.PeerActiveSince == nil || s.PeerActiveSince(id).IsZero()) {
		return nil
	}
	if active := s.numConnectedSince(voters, s.healthSince()); active-1 < 1+(len(voters)-1)/2 {
		return rpctypes.ErrGRPCUnhealthy
	}
	return nil
}

// mayPromoteMember is etcd's strict reconfiguration check of a promotion
// (after the learner's log was found close enough to the leader's): it is
// refused with "not enough started members" unless the started voters and
// the learner are a quorum of the voters with the learner. Connections are
// not checked, as in etcd.
func (s *Server) mayPromoteMember() error {
	if !s.cfg.StrictReconfigCheck {
		return nil
	}
	members, up := 1, 1
	for _, m := range s.votingMembers() {
		members++
		if started(m) {
			up++
		}
	}
	if up < quorum(members) {
		return rpctypes.ErrGRPCMemberNotEnoughStarted
	}
	return nil
}

// proposeConfChange proposes a membership change and waits until it is
// applied; the applier's verdict (etcd's membership rules) is the answer.
func (s *Server) proposeConfChange(ctx context.Context, typ raftpb.ConfChangeType, node uint64, cctx apply.ConfChangeContext) error {
	id := s.ids.next()
	cc := &raftpb.ConfChange{Type: typ.Enum(), NodeId: new(node), Context: cctx.Marshal(), Id: new(id)}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	ch := s.Registry.Register(ctx, id)
	if err := s.Raft.ProposeConfChange(ctx, cc); err != nil {
		s.Registry.Cancel(id)
		return s.raftErr(ctx, err)
	}
	select {
	case res := <-ch:
		if res.Err != nil {
			return apply.MemberErrToGRPC(res.Err)
		}
		return nil
	case <-ctx.Done():
		s.Registry.Cancel(id)
		return s.raftErr(ctx, ctx.Err())
	}
}

// PublishAttributes records this member's name and client URLs in the
// replicated member list (etcd publishes the same at start), so MemberList
// on every member shows where to reach it.
func (s *Server) PublishAttributes(ctx context.Context, name string, clientURLs []string) error {
	_, err := s.propose(ctx, &pb.InternalRaftRequest{ClusterMemberAttrSet: &membershippb.ClusterMemberAttrSetRequest{
		Member_ID:        s.Raft.ID(),
		MemberAttributes: &membershippb.Attributes{Name: name, ClientUrls: clientURLs},
	}})
	return err
}

// leaderConns caches a client connection to the leader's client URL, for
// the calls only the leader can answer.
type leaderConns struct {
	// creds chooses the credentials for a client URL (TLS for https); nil
	// dials without TLS.
	creds func(url string) (credentials.TransportCredentials, error)
	mu    sync.Mutex
	url   string
	conn  *grpc.ClientConn
}

func (l *leaderConns) get(url string) (*grpc.ClientConn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil && l.url == url {
		return l.conn, nil
	}
	if l.conn != nil {
		l.conn.Close()
	}
	creds := insecure.NewCredentials()
	if l.creds != nil {
		c, err := l.creds(url)
		if err != nil {
			return nil, err
		}
		creds = c
	}
	conn, err := dialClientURL(url, creds)
	if err != nil {
		return nil, err
	}
	l.url, l.conn = url, conn
	return conn, nil
}

func (l *leaderConns) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		l.conn.Close()
		l.conn = nil
	}
}

// DialClientURL connects to a member's client URL (http://host:port)
// without TLS.
func DialClientURL(url string) (*grpc.ClientConn, error) {
	return dialClientURL(url, insecure.NewCredentials())
}

func dialClientURL(url string, creds credentials.TransportCredentials) (*grpc.ClientConn, error) {
	target := url
	if i := strings.Index(target, "://"); i >= 0 {
		target = target[i+3:]
	}
	return grpc.NewClient("passthrough:///"+target, grpc.WithTransportCredentials(creds))
}

// leaderConn returns a connection to the leader's first client URL.
func (s *Server) leaderConn(lead uint64) (*grpc.ClientConn, error) {
	m, ok := s.Cluster.Member(lead)
	if !ok || len(m.ClientURLs) == 0 {
		return nil, rpctypes.ErrGRPCNoLeader
	}
	return s.leader.get(m.ClientURLs[0])
}

func (s *Server) forwardPromote(ctx context.Context, lead uint64, r *pb.MemberPromoteRequest) (*pb.MemberPromoteResponse, error) {
	conn, err := s.leaderConn(lead)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	resp, err := pb.NewClusterClient(conn).MemberPromote(ctx, r)
	if err != nil {
		return nil, err
	}
	s.fill(resp.Header)
	return resp, nil
}

// MoveLeader hands leadership to another voting member; only the leader
// can.
func (m *maintenanceServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	s := m.s
	if s.Raft.Leader() != s.Raft.ID() {
		return nil, rpctypes.ErrGRPCNotLeader
	}
	if r.TargetID == s.Raft.ID() {
		return &pb.MoveLeaderResponse{}, nil // etcd answers with no header
	}
	target, ok := s.Cluster.Member(r.TargetID)
	if !ok || target.IsLearner {
		return nil, rpctypes.ErrGRPCBadLeaderTransferee
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	defer cancel()
	if err := s.Raft.TransferLeadership(ctx, r.TargetID); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return nil, rpctypes.ErrGRPCTimeoutDueToLeaderFail
		}
		return nil, s.raftErr(ctx, err)
	}
	return &pb.MoveLeaderResponse{}, nil // etcd answers with no header
}

// learnerAllowed is etcd's rule: a learner serves endpoint status and
// serializable reads only.
func learnerAllowed(req any) bool {
	switch r := req.(type) {
	case *pb.StatusRequest:
		return true
	case *pb.RangeRequest:
		return r.Serializable
	}
	return false
}

func etcdMethod(full string) bool {
	return strings.HasPrefix(full, "/etcdserverpb.") || strings.HasPrefix(full, "/v3lockpb.") || strings.HasPrefix(full, "/v3electionpb.")
}

// requireLeader reports whether the client asked to be refused when this
// member has no leader (clientv3.WithRequireLeader).
func requireLeader(ctx context.Context) bool {
	// Not FromIncomingContext: that copies the whole metadata, per request.
	v := metadata.ValueFromIncomingContext(ctx, rpctypes.MetadataRequireLeaderKey)
	return len(v) > 0 && v[0] == rpctypes.MetadataHasLeader
}

// clientRequest counts a call by the client's API version, the
// "client-api-version" metadata clientv3 sends ("unknown" without it), and
// refuses a version that is not UTF-8, as etcd's interceptors do (after the
// learner check, before the leader check).
func (s *Server) clientRequest(ctx context.Context, stream bool) error {
	ver := "unknown"
	if vs := metadata.ValueFromIncomingContext(ctx, rpctypes.MetadataClientAPIVersionKey); len(vs) > 0 {
		ver = vs[0]
	}
	if !utf8.ValidString(ver) {
		return rpctypes.ErrGRPCInvalidClientAPIVersion
	}
	if s.ClientRequests != nil {
		s.ClientRequests(stream, ver)
	}
	return nil
}

// UnaryInterceptor refuses what a learner must not serve, and requests that
// require a leader while there is none.
func (s *Server) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		etcd := etcdMethod(info.FullMethod)
		if etcd && s.Cluster.IsLearner(s.Raft.ID()) && !learnerAllowed(req) {
			return nil, rpctypes.ErrGRPCNotSupportedForLearner
		}
		if err := s.clientRequest(ctx, false); err != nil {
			return nil, err
		}
		if etcd {
			if requireLeader(ctx) && s.Raft.Leader() == raft.None {
				return nil, rpctypes.ErrGRPCNoLeader
			}
			if err := s.checkMethod(ctx, info.FullMethod, req); err != nil {
				return nil, err
			}
		}
		return h(ctx, req)
	}
}

// StreamInterceptor refuses every stream on a learner, as etcd does. A
// stream that requires a leader is refused without one, and ended with
// etcd's "no leader" once the member has been without a leader for three
// election timeouts (etcd's monitorLeader), so watchers of a partitioned
// member move to another.
func (s *Server) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		etcd := etcdMethod(info.FullMethod)
		if etcd && s.Cluster.IsLearner(s.Raft.ID()) {
			return rpctypes.ErrGRPCNotSupportedForLearner
		}
		if err := s.clientRequest(ss.Context(), true); err != nil {
			return err
		}
		if !etcd {
			return h(srv, ss)
		}
		if err := s.checkMethod(ss.Context(), info.FullMethod, nil); err != nil {
			return err
		}
		if !requireLeader(ss.Context()) {
			return h(srv, ss)
		}
		if s.Raft.Leader() == raft.None {
			return rpctypes.ErrGRPCNoLeader
		}
		ctx, cancel := context.WithCancelCause(ss.Context())
		defer cancel(nil)
		go s.monitorLeader(ctx, cancel)
		err := h(srv, &ctxStream{ServerStream: ss, ctx: ctx})
		if errors.Is(context.Cause(ctx), errLeaderLost) {
			return rpctypes.ErrGRPCNoLeader
		}
		return err
	}
}

var errLeaderLost = errors.New("leader lost")

func (s *Server) monitorLeader(ctx context.Context, cancel context.CancelCauseFunc) {
	t := time.NewTicker(s.cfg.ElectionTimeout)
	defer t.Stop()
	missed := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s.Raft.Leader() != raft.None {
			missed = 0
			continue
		}
		if missed++; missed >= 3 {
			cancel(errLeaderLost)
			return
		}
	}
}

// ctxStream is a server stream with another context.
type ctxStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (c *ctxStream) Context() context.Context { return c.ctx }
