package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.etcd.io/etcd/api/v3/authpb"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
)

func (m *member) auth() pb.AuthClient { return pb.NewAuthClient(m.conn) }

// as returns a context carrying a token of user, got from member m.
func as(t testing.TB, m *member, user, pw string) context.Context {
	t.Helper()
	r, err := m.auth().Authenticate(ctx5(t), &pb.AuthenticateRequest{Name: user, Password: pw})
	if err != nil {
		t.Fatalf("authenticate %s: %v", user, err)
	}
	return metadata.AppendToOutgoingContext(ctx5(t), rpctypes.TokenFieldNameGRPC, r.Token)
}

// setupAuth adds root and alice (role reader: read /app/), and enables auth.
func setupAuth(t testing.TB, m *member) {
	t.Helper()
	a, ctx := m.auth(), ctx5(t)
	for _, f := range []func() error{
		func() error {
			_, err := a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "root", Password: "rootpw"})
			return err
		},
		func() error {
			_, err := a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "root", Role: "root"})
			return err
		},
		func() error { _, err := a.RoleAdd(ctx, &pb.AuthRoleAddRequest{Name: "reader"}); return err },
		func() error {
			_, err := a.RoleGrantPermission(ctx, &pb.AuthRoleGrantPermissionRequest{Name: "reader", Perm: &authpb.Permission{
				PermType: authpb.Permission_READ, Key: []byte("/app/"), RangeEnd: []byte("/app0")}})
			return err
		},
		func() error {
			_, err := a.UserAdd(ctx, &pb.AuthUserAddRequest{Name: "alice", Password: "alicepw"})
			return err
		},
		func() error {
			_, err := a.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: "alice", Role: "reader"})
			return err
		},
		func() error { _, err := a.AuthEnable(ctx, &pb.AuthEnableRequest{}); return err },
	} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
}

// A role change made on the leader is enforced on every member's next
// linearizable request, the auth state reaches a member that catches up
// from a snapshot, and it survives a restart.
func TestAuthAcrossMembers(t *testing.T) {
	cs := clusterConfigs(t, "bolt", "badger", "bolt")
	for _, c := range cs {
		c.SnapshotCount = 100
		c.SnapshotCatchupEntries = 10
		c.BcryptCost = 4
	}
	ms := startCluster(t, cs)
	lead := leaderIndex(t, ms)
	setupAuth(t, ms[lead])
	rootCtx := as(t, ms[lead], "root", "rootpw")
	if _, err := ms[lead].kv.Put(rootCtx, &pb.PutRequest{Key: []byte("/app/x"), Value: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	// alice's token, minted on one member, works on every member.
	alice := as(t, ms[(lead+1)%3], "alice", "alicepw")
	for i, m := range ms {
		if _, err := m.kv.Range(alice, &pb.RangeRequest{Key: []byte("/app/x")}); err != nil {
			t.Fatalf("m%d: alice reads /app/x: %v", i+1, err)
		}
		if _, err := m.kv.Put(alice, &pb.PutRequest{Key: []byte("/app/x")}); !errors.Is(toEtcdErr(err), rpctypes.ErrPermissionDenied) {
			t.Fatalf("m%d: alice writes: %v, want permission denied", i+1, err)
		}
		if _, err := m.kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("/app/x")}); !errors.Is(toEtcdErr(err), rpctypes.ErrUserEmpty) {
			t.Fatalf("m%d: anonymous read: %v, want user name is empty", i+1, err)
		}
	}
	if _, err := ms[lead].auth().UserRevokeRole(rootCtx, &pb.AuthUserRevokeRoleRequest{Name: "alice", Role: "reader"}); err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		if _, err := m.kv.Range(alice, &pb.RangeRequest{Key: []byte("/app/x")}); !errors.Is(toEtcdErr(err), rpctypes.ErrPermissionDenied) {
			t.Fatalf("m%d: alice reads after the revoke: %v, want permission denied", i+1, err)
		}
	}

	// m3 misses a new user and enough writes to need a snapshot.
	lag := (lead + 2) % 3
	ms[lag].stop()
	live := ms[lead]
	rootCtx = as(t, live, "root", "rootpw")
	if _, err := live.auth().UserAdd(rootCtx, &pb.AuthUserAddRequest{Name: "bob", Password: "bobpw"}); err != nil {
		t.Fatal(err)
	}
	if _, err := live.auth().UserGrantRole(rootCtx, &pb.AuthUserGrantRoleRequest{User: "bob", Role: "reader"}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		if _, err := live.kv.Put(rootCtx, &pb.PutRequest{Key: []byte(fmt.Sprintf("/fill/%03d", i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}
	ms[lag] = startMember(t, cs[lag])
	eventually(t, "the lagging member caught up", func() error {
		r, err := ms[lag].kv.Range(as(t, live, "root", "rootpw"), &pb.RangeRequest{Key: []byte("/fill/"), RangeEnd: []byte("/fill0"), CountOnly: true, Serializable: true})
		if err == nil && r.Count != 300 {
			err = fmt.Errorf("%d keys", r.Count)
		}
		return err
	})
	if got := metric(t, cs[lag], "etcd_network_snapshot_receive_success"); got < 1 {
		t.Fatalf("the lagging member received %v snapshots, want at least 1", got)
	}
	bob := as(t, ms[lag], "bob", "bobpw")
	if _, err := ms[lag].kv.Range(bob, &pb.RangeRequest{Key: []byte("/app/x"), Serializable: true}); err != nil {
		t.Fatalf("bob, added while the member was down, reads there: %v", err)
	}

	// A restart keeps users, roles and the enabled flag.
	ms[lag].stop()
	ms[lag] = startMember(t, cs[lag])
	eventually(t, "auth status after restart", func() error {
		st, err := ms[lag].auth().AuthStatus(ctx5(t), &pb.AuthStatusRequest{})
		if err == nil && !st.Enabled {
			t.Fatal("after restart: auth is disabled")
		}
		return err
	})
	bob = as(t, ms[lag], "bob", "bobpw")
	if _, err := ms[lag].kv.Range(bob, &pb.RangeRequest{Key: []byte("/app/x")}); err != nil {
		t.Fatalf("after restart: bob reads: %v", err)
	}
	if _, err := ms[lag].kv.Range(bob, &pb.RangeRequest{Key: []byte("/fill/000")}); !errors.Is(toEtcdErr(err), rpctypes.ErrPermissionDenied) {
		t.Fatalf("after restart: bob reads outside his role: %v", err)
	}
}

// With --auth-token jwt, a token signed by one member is accepted by every
// member without Authenticate (etcdctl --auth-jwt-token), and it carries
// the auth revision it was signed at: after a role change it is stale.
func TestAuthJWTTokens(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	priv, pub := filepath.Join(dir, "jwt.key"), filepath.Join(dir, "jwt.pub")
	if err := os.WriteFile(priv, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	cs := clusterConfigs(t, "bolt", "badger")
	for _, c := range cs {
		c.AuthToken = "jwt,pub-key=" + pub + ",priv-key=" + priv + ",sign-method=ES256,ttl=1m"
		c.BcryptCost = 4
	}
	ms := startCluster(t, cs)
	setupAuth(t, ms[0])
	r, err := ms[0].auth().Authenticate(ctx5(t), &pb.AuthenticateRequest{Name: "alice", Password: "alicepw"})
	if err != nil {
		t.Fatal(err)
	}
	alice := metadata.AppendToOutgoingContext(ctx5(t), rpctypes.TokenFieldNameGRPC, r.Token)
	for i, m := range ms {
		if _, err := m.kv.Range(alice, &pb.RangeRequest{Key: []byte("/app/x")}); err != nil {
			t.Fatalf("m%d: alice's JWT: %v", i+1, err)
		}
	}
	forged := metadata.AppendToOutgoingContext(ctx5(t), rpctypes.TokenFieldNameGRPC, r.Token+"x")
	if _, err := ms[1].kv.Range(forged, &pb.RangeRequest{Key: []byte("/app/x")}); !errors.Is(toEtcdErr(err), rpctypes.ErrInvalidAuthToken) {
		t.Fatalf("a tampered JWT: %v, want invalid auth token", err)
	}
	root := as(t, ms[0], "root", "rootpw")
	if _, err := ms[0].auth().RoleAdd(root, &pb.AuthRoleAddRequest{Name: "other"}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the old JWT is stale on m2", func() error {
		_, err := ms[1].kv.Range(alice, &pb.RangeRequest{Key: []byte("/app/x")})
		if errors.Is(toEtcdErr(err), rpctypes.ErrAuthOldRevision) {
			return nil
		}
		return fmt.Errorf("got %v, want revision of auth store is old", err)
	})
}

// A token configuration that cannot work stops the start with an error that
// names auth-token.
func TestAuthTokenConfigRefused(t *testing.T) {
	for _, spec := range []string{
		"jwt,pub-key=/nonexistent.pub,priv-key=/nonexistent.key,sign-method=RS256",
		"jwt,sign-method=ES256",
		"jwt,bogus=1",
	} {
		c := testConfig(t, "bolt", t.TempDir())
		c.AuthToken = spec
		err := startErr(t, c)
		if err == nil || !strings.Contains(err.Error(), "auth-token") {
			t.Errorf("auth-token %q: start error %v, want one naming auth-token", spec, err)
		}
	}
}

// With client-cert-auth, a verified client certificate's CommonName is the
// user when the request carries no token; over TLS, a follower relays the
// calls only the leader answers to the leader's https client URL.
func TestAuthClientCertCN(t *testing.T) {
	p := newTLSPKI(t)
	cs := clusterConfigs(t, "bolt", "bolt", "badger")
	for _, c := range cs {
		p.tlsConfig(t, c)
		c.BcryptCost = 4
	}
	ms := make([]*member, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); ms[i] = startTLSMember(t, c, p) }()
	}
	wg.Wait()
	lead := leaderIndex(t, ms)
	follower := ms[(lead+1)%3]

	// A lease granted on the leader, asked about on a follower (relayed
	// over TLS) before auth is on.
	lg, err := pb.NewLeaseClient(ms[lead].conn).LeaseGrant(ctx5(t), &pb.LeaseGrantRequest{TTL: 60})
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := pb.NewLeaseClient(follower.conn).LeaseTimeToLive(ctx5(t), &pb.LeaseTimeToLiveRequest{ID: lg.ID})
	if err != nil || ttl.TTL <= 0 {
		t.Fatalf("TimeToLive on a follower over TLS: %v %v", ttl, err)
	}

	// The test connections present CN root; alice and mallory have their own.
	setupAuth(t, follower)
	// The leader may apply the enable after the follower did; until then it
	// takes the put as anonymous (auth off), which the apply refuses with
	// "user name is empty", as etcd would.
	eventually(t, "CN root writes through the leader", func() error {
		_, err := ms[lead].kv.Put(ctx5(t), &pb.PutRequest{Key: []byte("/app/x"), Value: []byte("1")})
		return err
	})
	dial := func(m int, cn string) pb.KVClient {
		u, _ := cs[m].ClientURLs()
		conn, err := grpc.NewClient(u[0].Host, grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS(t, cn))))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewKVClient(conn)
	}
	for m := range ms {
		alice, mallory := dial(m, "alice"), dial(m, "mallory")
		if _, err := alice.Range(ctx5(t), &pb.RangeRequest{Key: []byte("/app/x")}); err != nil {
			t.Fatalf("m%d: CN alice reads /app/x: %v", m+1, err)
		}
		if _, err := alice.Put(ctx5(t), &pb.PutRequest{Key: []byte("/app/x")}); !errors.Is(toEtcdErr(err), rpctypes.ErrPermissionDenied) {
			t.Fatalf("m%d: CN alice writes: %v, want permission denied", m+1, err)
		}
		if _, err := mallory.Range(ctx5(t), &pb.RangeRequest{Key: []byte("/app/x")}); !errors.Is(toEtcdErr(err), rpctypes.ErrPermissionDenied) {
			t.Fatalf("m%d: CN of no user reads: %v, want permission denied", m+1, err)
		}
	}
	// A token wins over the certificate: alice's token on root's connection.
	aliceTok := as(t, ms[lead], "alice", "alicepw")
	if _, err := ms[lead].kv.Put(aliceTok, &pb.PutRequest{Key: []byte("/app/x")}); !errors.Is(toEtcdErr(err), rpctypes.ErrPermissionDenied) {
		t.Fatalf("alice's token over CN root's connection writes: %v, want permission denied", err)
	}
}
