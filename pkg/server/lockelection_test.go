package server

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	epb "github.com/kvd-dev/kvd/pkg/lockelection/v3electionpb"
	"github.com/kvd-dev/kvd/pkg/lockelection/v3lockpb"
)

func grant(t testing.TB, m *member, ctx context.Context, ttl int64) int64 {
	t.Helper()
	r, err := pb.NewLeaseClient(m.conn).LeaseGrant(ctx, &pb.LeaseGrantRequest{TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// wantErr requires etcd's answer: the concurrency or client error's text
// under codes.Unknown (etcd's lock and election servers return the client's
// errors, which carry no gRPC status).
func wantErr(t testing.TB, what string, err error, msg string) {
	t.Helper()
	if st, _ := status.FromError(err); err == nil || st.Code() != codes.Unknown || st.Message() != msg {
		t.Fatalf("%s: got %v, want Unknown %q", what, err, msg)
	}
}

// Lock queues a second holder behind the first until Unlock; a revoked
// lease is refused; Unlock of nothing is a delete of nothing.
func TestLockService(t *testing.T) {
	m := startMember(t, testConfig(t, "bolt", t.TempDir()))
	put(t, m, "warm", "up")
	lk := v3lockpb.NewLockClient(m.conn)
	ctx := ctx5(t)
	l1, l2 := grant(t, m, ctx, 60), grant(t, m, ctx, 60)

	r1, err := lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("job"), Lease: l1})
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("job/%x", l1); string(r1.Key) != want {
		t.Fatalf("lock key %q, want %q", r1.Key, want)
	}
	got := make(chan *v3lockpb.LockResponse, 1)
	go func() {
		r, err := lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("job"), Lease: l2})
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	select {
	case <-got:
		t.Fatal("second Lock returned while the first holds the lock")
	case <-time.After(300 * time.Millisecond):
	}
	if _, err := lk.Unlock(ctx, &v3lockpb.UnlockRequest{Key: r1.Key}); err != nil {
		t.Fatal(err)
	}
	select {
	case r2 := <-got:
		if r2 == nil || string(r2.Key) != fmt.Sprintf("job/%x", l2) || r2.Header.Revision <= r1.Header.Revision {
			t.Fatalf("second Lock: %v (first %v)", r2, r1)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second Lock still waiting after Unlock")
	}

	if _, err := pb.NewLeaseClient(m.conn).LeaseRevoke(ctx, &pb.LeaseRevokeRequest{ID: l1}); err != nil {
		t.Fatal(err)
	}
	_, err = lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("other"), Lease: l1})
	wantErr(t, "Lock on a revoked lease", err, rpctypes.ErrLeaseNotFound.Error())
	_, err = lk.Unlock(ctx, &v3lockpb.UnlockRequest{})
	wantErr(t, "Unlock without a key", err, rpctypes.ErrEmptyKey.Error())
}

// Two candidates: the second waits for the first to resign; Observe sees
// each leader and proclaimed value; the errors are etcd's.
func TestElectionService(t *testing.T) {
	m := startMember(t, testConfig(t, "bolt", t.TempDir()))
	put(t, m, "warm", "up")
	el := epb.NewElectionClient(m.conn)
	ctx := ctx5(t)

	_, err := el.Leader(ctx, &epb.LeaderRequest{Name: []byte("e")})
	wantErr(t, "Leader of an empty election", err, "election: no leader")
	_, err = el.Proclaim(ctx, &epb.ProclaimRequest{Value: []byte("x")})
	wantErr(t, "Proclaim without a leader", err, `"leader" field must be provided`)
	_, err = el.Resign(ctx, &epb.ResignRequest{})
	wantErr(t, "Resign without a leader", err, `"leader" field must be provided`)

	l1, l2 := grant(t, m, ctx, 60), grant(t, m, ctx, 60)
	c1, err := el.Campaign(ctx, &epb.CampaignRequest{Name: []byte("e"), Lease: l1, Value: []byte("one")})
	if err != nil {
		t.Fatal(err)
	}
	if c1.Leader.Lease != l1 || string(c1.Leader.Key) != fmt.Sprintf("e/%x", l1) || c1.Leader.Rev != c1.Header.Revision {
		t.Fatalf("campaign: %v", c1)
	}
	obs, err := el.Observe(ctx, &epb.LeaderRequest{Name: []byte("e")})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want string) {
		t.Helper()
		r, err := obs.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if string(r.Kv.Value) != want {
			t.Fatalf("observed %q, want %q", r.Kv.Value, want)
		}
	}
	next("one")

	second := make(chan *epb.CampaignResponse, 1)
	go func() {
		r, err := el.Campaign(ctx, &epb.CampaignRequest{Name: []byte("e"), Lease: l2, Value: []byte("two")})
		if err != nil {
			t.Error(err)
		}
		second <- r
	}()
	if _, err := el.Proclaim(ctx, &epb.ProclaimRequest{Leader: c1.Leader, Value: []byte("uno")}); err != nil {
		t.Fatal(err)
	}
	next("uno")
	if r, err := el.Leader(ctx, &epb.LeaderRequest{Name: []byte("e")}); err != nil || string(r.Kv.Value) != "uno" {
		t.Fatalf("leader: %v %v", r, err)
	}
	notLeader := &epb.LeaderKey{Name: []byte("e"), Key: []byte(fmt.Sprintf("e/%x", l2)), Rev: 1, Lease: l2}
	_, err = el.Proclaim(ctx, &epb.ProclaimRequest{Leader: notLeader, Value: []byte("x")})
	wantErr(t, "Proclaim by a non-leader", err, "election: not leader")
	select {
	case <-second:
		t.Fatal("second candidate elected while the first leads")
	default:
	}
	if _, err := el.Resign(ctx, &epb.ResignRequest{Leader: c1.Leader}); err != nil {
		t.Fatal(err)
	}
	select {
	case c2 := <-second:
		if c2 == nil || c2.Leader.Lease != l2 {
			t.Fatalf("second campaign: %v", c2)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second candidate not elected after the first resigned")
	}
	next("two")
}

// With auth on, the calls run as their caller: alice, who may only read
// /app/, cannot take a lock there; root can; no token is no user.
func TestLockServiceAsCaller(t *testing.T) {
	m := startMember(t, testConfig(t, "bolt", t.TempDir()))
	put(t, m, "warm", "up")
	setupAuth(t, m)
	lk := v3lockpb.NewLockClient(m.conn)
	root, alice := as(t, m, "root", "rootpw"), as(t, m, "alice", "alicepw")

	_, err := lk.Lock(alice, &v3lockpb.LockRequest{Name: []byte("/app/l"), Lease: grant(t, m, root, 60)})
	wantErr(t, "Lock as alice", err, rpctypes.ErrPermissionDenied.Error())
	_, err = lk.Lock(ctx5(t), &v3lockpb.LockRequest{Name: []byte("/app/l"), Lease: grant(t, m, root, 60)})
	wantErr(t, "Lock without a token", err, rpctypes.ErrUserEmpty.Error())
	r, err := lk.Lock(root, &v3lockpb.LockRequest{Name: []byte("/app/l"), Lease: grant(t, m, root, 60)})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lk.Unlock(alice, &v3lockpb.UnlockRequest{Key: r.Key})
	wantErr(t, "Unlock as alice", err, rpctypes.ErrPermissionDenied.Error())
}

// A Lock waiting behind a holder ends when the member stops, and does not
// hold the stop up.
func TestLockWaiterEndsAtStop(t *testing.T) {
	m := startMember(t, testConfig(t, "bolt", t.TempDir()))
	put(t, m, "warm", "up")
	lk := v3lockpb.NewLockClient(m.conn)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("held"), Lease: grant(t, m, ctx, 60)}); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := lk.Lock(ctx, &v3lockpb.LockRequest{Name: []byte("held"), Lease: grant(t, m, ctx, 60)})
		errc <- err
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	stopCtx, stopCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer stopCancel()
	if err := m.app.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	m.app = nil
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stop took %v with a Lock waiting", d)
	}
	select {
	case err := <-errc:
		if err == nil || strings.Contains(err.Error(), "DeadlineExceeded") {
			t.Fatalf("waiting Lock: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiting Lock still waiting after the member stopped")
	}
}

// On a member with only an https client URL the services dial it over TLS
// with the member's own certificate (CN m1). A token's user acts; a caller
// known only by its certificate is anonymous there, and the member's
// certificate never stands in for it, even with a user m1 that may write.
func TestLockServiceOverTLS(t *testing.T) {
	p := newTLSPKI(t)
	c := testConfig(t, "bolt", t.TempDir())
	p.tlsConfig(t, c)
	c.ListenClientURLs = c.AdvertiseClientURLs // https only
	c.BcryptCost = 4
	m := startTLSMember(t, c, p)
	put(t, m, "warm", "up")
	lk := v3lockpb.NewLockClient(m.conn)
	r, err := lk.Lock(ctx5(t), &v3lockpb.LockRequest{Name: []byte("/app/l"), Lease: grant(t, m, ctx5(t), 60)})
	if err != nil {
		t.Fatalf("Lock over the TLS loopback: %v", err)
	}
	if _, err := lk.Unlock(ctx5(t), &v3lockpb.UnlockRequest{Key: r.Key}); err != nil {
		t.Fatal(err)
	}

	setupAuth(t, m) // the test connection's CN root is root
	a := m.auth()
	for _, f := range []func() error{
		func() error {
			_, err := a.UserAdd(ctx5(t), &pb.AuthUserAddRequest{Name: "m1", Options: &authpb.UserAddOptions{NoPassword: true}})
			return err
		},
		func() error {
			_, err := a.UserGrantRole(ctx5(t), &pb.AuthUserGrantRoleRequest{User: "m1", Role: "root"})
			return err
		},
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
	root := as(t, m, "root", "rootpw")
	lease := grant(t, m, root, 60)
	_, err = lk.Lock(ctx5(t), &v3lockpb.LockRequest{Name: []byte("/app/l"), Lease: lease})
	wantErr(t, "Lock as CN root without a token", err, rpctypes.ErrUserEmpty.Error())
	if _, err := lk.Lock(as(t, m, "root", "rootpw"), &v3lockpb.LockRequest{Name: []byte("/app/l"), Lease: lease}); err != nil {
		t.Fatalf("Lock with root's token over TLS: %v", err)
	}
}
