package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

func TestParseUser(t *testing.T) {
	for _, tc := range []struct {
		in, name, password string
		ok                 bool
	}{
		{"bench:secret", "bench", "secret", true},
		{"bench:a:b", "bench", "a:b", true}, // split at the first colon, as etcdctl
		{"bench:", "bench", "", true},
		{"bench", "", "", false},
		{":secret", "", "", false},
		{"", "", "", false},
	} {
		u, err := parseUser(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("parseUser(%q) error %v, want ok %v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && (u.name != tc.name || u.password != tc.password) {
			t.Errorf("parseUser(%q) = %q, %q; want %q, %q", tc.in, u.name, u.password, tc.name, tc.password)
		}
	}
}

func TestGRPCTarget(t *testing.T) {
	for _, tc := range []struct {
		ep       string
		tlsFlags bool
		target   string
		useTLS   bool
		ok       bool
	}{
		{"127.0.0.1:2379", false, "127.0.0.1:2379", false, true},
		{"127.0.0.1:2379", true, "127.0.0.1:2379", true, true},
		{"http://127.0.0.1:2379", false, "127.0.0.1:2379", false, true},
		{"http://127.0.0.1:2379", true, "", false, false}, // TLS flags never go unused
		{"https://127.0.0.1:2379", false, "127.0.0.1:2379", true, true},
		{"https://127.0.0.1:2379", true, "127.0.0.1:2379", true, true},
		{"unix:///tmp/s", false, "unix:///tmp/s", false, true},
		{"unixs:///tmp/s", false, "unix:///tmp/s", true, true},
	} {
		target, useTLS, err := grpcTarget(tc.ep, tc.tlsFlags)
		if (err == nil) != tc.ok || target != tc.target || useTLS != tc.useTLS {
			t.Errorf("grpcTarget(%q, %v) = %q, %v, %v; want %q, %v, ok %v", tc.ep, tc.tlsFlags, target, useTLS, err, tc.target, tc.useTLS, tc.ok)
		}
	}
}

func TestParseSecurity(t *testing.T) {
	pki := newTestPKI(t)
	sec, err := parseSecurity("", "", "", "")
	if err != nil || sec.tls != nil || sec.user != nil || sec.tlsMode() != "" || sec.userName() != "" {
		t.Fatalf("no flags: %+v, %v; want the zero security", sec, err)
	}
	sec, err = parseSecurity("", pki.ca, "", "")
	if err != nil || sec.tls == nil || sec.tls.RootCAs == nil || len(sec.tls.Certificates) != 0 || sec.tlsMode() != "tls" {
		t.Fatalf("--cacert: %+v, %v; want server-verified TLS without a client certificate", sec, err)
	}
	sec, err = parseSecurity("bench:pw", pki.ca, pki.cert, pki.key)
	if err != nil || len(sec.tls.Certificates) != 1 || sec.tlsMode() != "mutual" || sec.userName() != "bench" || sec.reauths == nil {
		t.Fatalf("--user --cacert --cert --key: %+v, %v; want mutual TLS as bench", sec, err)
	}
	for _, bad := range [][4]string{
		{"", pki.ca, pki.cert, ""},
		{"", pki.ca, "", pki.key},
		{"", pki.key, "", ""},          // a key is no CA certificate
		{"", pki.ca, pki.key, pki.key}, // nor a certificate
		{"", "/nonexistent/ca.pem", "", ""},
		{"nocolon", "", "", ""},
	} {
		if _, err := parseSecurity(bad[0], bad[1], bad[2], bad[3]); err == nil {
			t.Errorf("parseSecurity%q: no error", bad)
		}
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--cacert", pki.ca, "--endpoints", "http://127.0.0.1:1", "--total", "1", "put"}, &out, &errOut); code != 1 || !strings.Contains(errOut.String(), "http://") {
		t.Errorf("http:// endpoint with --cacert: exit %d, %q; want exit 1 naming the endpoint", code, errOut.String())
	}
}

// fakeAuth is an Auth service and a token check in front of fakeKV: tokens
// are "tok-N"; with refuseAfter > 0 a token is refused (alternating etcd's
// two errors) and forgotten once refuseAfter KV requests have used it, as
// a server does whose tokens expire or whose auth store moved on.
type fakeAuth struct {
	pb.UnimplementedAuthServer
	refuseAfter int

	logins  atomic.Int64
	mu      sync.Mutex
	uses    map[string]int // live token -> KV requests it was used for
	refused int
	noToken int // KV requests without a token
	authTok int // Authenticate calls that carried a token
	cns     map[string]bool
}

func newFakeAuth() *fakeAuth {
	return &fakeAuth{uses: map[string]int{}, cns: map[string]bool{}}
}

func (a *fakeAuth) Authenticate(ctx context.Context, r *pb.AuthenticateRequest) (*pb.AuthenticateResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("token")) > 0 {
		a.authTok++
	}
	if r.Name != "bench" || r.Password != "pw:x" {
		return nil, rpctypes.ErrGRPCAuthFailed
	}
	tok := fmt.Sprintf("tok-%d", a.logins.Add(1))
	a.uses[tok] = 0
	return &pb.AuthenticateResponse{Header: &pb.ResponseHeader{}, Token: tok}, nil
}

func (a *fakeAuth) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if p, ok := peer.FromContext(ctx); ok {
		if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
			a.mu.Lock()
			a.cns[ti.State.VerifiedChains[0][0].Subject.CommonName] = true
			a.mu.Unlock()
		}
	}
	if !strings.HasPrefix(info.FullMethod, "/etcdserverpb.KV/") {
		return handler(ctx, req)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	tok := md.Get("token")
	a.mu.Lock()
	if len(tok) != 1 || tok[0] == "" {
		a.noToken++
		a.mu.Unlock()
		return nil, rpctypes.ErrGRPCUserEmpty
	}
	n, ok := a.uses[tok[0]]
	if !ok || a.refuseAfter > 0 && n == a.refuseAfter {
		delete(a.uses, tok[0])
		a.refused++
		even := a.refused%2 == 0
		a.mu.Unlock()
		if even {
			return nil, rpctypes.ErrGRPCAuthOldRevision
		}
		return nil, rpctypes.ErrGRPCInvalidAuthToken
	}
	a.uses[tok[0]] = n + 1
	a.mu.Unlock()
	return handler(ctx, req)
}

// startSecureFake serves f behind a's token check, over TLS when cfg is set.
func startSecureFake(t *testing.T, f *fakeKV, a *fakeAuth, cfg *tls.Config) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	opts := []grpc.ServerOption{grpc.UnaryInterceptor(a.intercept)}
	if cfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	srv := grpc.NewServer(opts...)
	pb.RegisterKVServer(srv, f)
	pb.RegisterWatchServer(srv, f)
	pb.RegisterAuthServer(srv, a)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func TestUserSendsTokenAndReauthenticates(t *testing.T) {
	f, a := newFakeKV(), newFakeAuth()
	a.refuseAfter = 50
	addr := startSecureFake(t, f, a, nil)
	s, code := runJSON(t, addr, "--user", "bench:pw:x", "--clients", "8", "--conns", "3", "--total", "400", "put", "--key-space-size", "10")
	if code != 0 || s.Errors != 0 || s.Requests != 400 {
		t.Fatalf("exit %d, %d requests, %d errors (%s); want 400 without errors: a refused token is renewed and the request retried", code, s.Requests, s.Errors, s.FirstError)
	}
	if s.User != "bench" || s.TLS != "" {
		t.Errorf("summary user %q, tls %q; want bench and none", s.User, s.TLS)
	}
	// Each token serves 50 requests, so 400 need at least 8 logins; a
	// refusal costs one new login at most (concurrent refusals of one
	// token share one).
	a.mu.Lock()
	refused := a.refused
	a.mu.Unlock()
	if s.Reauths < 5 || s.Reauths > int64(refused) {
		t.Errorf("%d re-authentications for %d refused requests; want at least 5, at most one per refusal", s.Reauths, refused)
	}
	if got := a.logins.Load(); got != 3+s.Reauths {
		t.Errorf("%d logins; want one per connection (3) plus the %d re-authentications", got, s.Reauths)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.noToken != 0 || a.authTok != 0 {
		t.Errorf("%d KV requests without a token, %d logins carrying a token; want none", a.noToken, a.authTok)
	}
}

func TestWrongPasswordIsASetupError(t *testing.T) {
	f, a := newFakeKV(), newFakeAuth()
	addr := startSecureFake(t, f, a, nil)
	var out, errOut bytes.Buffer
	code := run(context.Background(), []string{"--endpoints", addr, "--user", "bench:wrong", "--total", "1", "put"}, &out, &errOut)
	if code != 1 || !strings.Contains(errOut.String(), "authenticate as bench") || !strings.Contains(errOut.String(), "authentication failed") {
		t.Errorf("exit %d, stderr %q; want exit 1 with the server's refusal", code, errOut.String())
	}
}

func TestAuthWorkloadLogsIn(t *testing.T) {
	f, a := newFakeKV(), newFakeAuth()
	addr := startSecureFake(t, f, a, nil)
	s, code := runJSON(t, addr, "--user", "bench:pw:x", "--clients", "4", "--conns", "2", "--total", "50", "auth")
	if code != 0 || s.Requests != 50 || s.Workload != "auth" {
		t.Fatalf("exit %d, %d requests, workload %q; want 50 auth requests", code, s.Requests, s.Workload)
	}
	if got := a.logins.Load(); got != 52 {
		t.Errorf("%d logins; want 2 (one per connection) + 50 measured", got)
	}
	if f.calls.Load() != 0 {
		t.Errorf("%d KV requests; the auth workload sends none", f.calls.Load())
	}
}

func TestNoUserSendsNoToken(t *testing.T) {
	f, a := newFakeKV(), newFakeAuth()
	addr := startSecureFake(t, f, a, nil)
	s, code := runJSON(t, addr, "--clients", "2", "--conns", "1", "--total", "10", "put")
	if code != 2 || s.Errors != 10 || !strings.Contains(s.FirstError, "user name is empty") {
		t.Errorf("exit %d, %d errors (%s); want every put refused without a token", code, s.Errors, s.FirstError)
	}
	if a.logins.Load() != 0 || s.User != "" || s.Reauths != 0 {
		t.Errorf("%d logins, user %q, %d re-authentications; want none", a.logins.Load(), s.User, s.Reauths)
	}
}

func TestMutualTLS(t *testing.T) {
	pki := newTestPKI(t)
	f, a := newFakeKV(), newFakeAuth()
	addr := startSecureFake(t, f, a, pki.serverConfig(t))
	s, code := runJSON(t, addr, "--cacert", pki.ca, "--cert", pki.cert, "--key", pki.key, "--user", "bench:pw:x",
		"--clients", "4", "--conns", "2", "--total", "40", "range", "--key", "k", "--preload", "1")
	if code != 0 || s.Requests != 40 || s.TLS != "mutual" {
		t.Fatalf("exit %d, %d requests, tls %q; want 40 over mutual TLS", code, s.Requests, s.TLS)
	}
	a.mu.Lock()
	if !a.cns["bench"] {
		t.Errorf("server saw client certificates %v, want CN bench", a.cns)
	}
	a.mu.Unlock()

	// https:// takes the same flags; without a client certificate the
	// server refuses the handshake, which is a setup error.
	var out, errOut bytes.Buffer
	code = run(context.Background(), []string{"--endpoints", "https://" + addr, "--cacert", pki.ca, "--dial-timeout", "500ms", "--total", "1", "put"}, &out, &errOut)
	if code != 1 {
		t.Errorf("TLS without a client certificate: exit %d, want 1; stderr %q", code, errOut.String())
	}
	// Without the CA the server's certificate does not verify.
	code = run(context.Background(), []string{"--endpoints", "https://" + addr, "--dial-timeout", "500ms", "--total", "1", "put"}, &out, &errOut)
	if code != 1 {
		t.Errorf("TLS without --cacert: exit %d, want 1", code)
	}
}

// testPKI is a CA and, signed by it, a server certificate for 127.0.0.1
// and a client certificate with CN bench, as PEM files.
type testPKI struct {
	ca, cert, key         string
	serverCert, serverKey string
	caCert                *x509.Certificate
	caKey                 *ecdsa.PrivateKey
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
	p := &testPKI{}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	p.caCert, _ = x509.ParseCertificate(caDER)
	p.caKey = caKey
	p.ca = writePEM(t, dir, "ca.pem", "CERTIFICATE", caDER)
	issue := func(name string, serial int64, tmpl *x509.Certificate) (string, string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.SerialNumber = big.NewInt(serial)
		tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &k.PublicKey, p.caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return writePEM(t, dir, name+".pem", "CERTIFICATE", der), writePEM(t, dir, name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p.serverCert, p.serverKey = issue("server", 2, &x509.Certificate{
		Subject: pkix.Name{CommonName: "server"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	p.cert, p.key = issue("client", 3, &x509.Certificate{
		Subject: pkix.Name{CommonName: "bench"}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	return p
}

// serverConfig asks for and verifies client certificates.
func (p *testPKI) serverConfig(t *testing.T) *tls.Config {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(p.serverCert, p.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(p.caCert)
	return &tls.Config{Certificates: []tls.Certificate{pair}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert}
}

func writePEM(t *testing.T, dir, name, typ string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestProcessCPU(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	pid := os.Getpid()
	c0, err := processCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(300 * time.Millisecond); time.Now().Before(deadline); {
	}
	c1, err := processCPU(pid)
	if err != nil || c1-c0 < 100*time.Millisecond {
		t.Errorf("CPU %v after 300ms of spinning (from %v), err %v; want at least 100ms more", c1, c0, err)
	}
	if _, err := processCPU(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}

func TestCPUPIDReported(t *testing.T) {
	f := newFakeKV()
	addr := startFake(t, f)
	// The fake server runs in this process.
	s, code := runJSON(t, addr, "--cpu-pid", fmt.Sprint(os.Getpid()), "--clients", "4", "--conns", "2", "--duration", "300ms", "put")
	if code != 0 || s.CPUSec <= 0 || s.CPUPerReqUs <= 0 {
		t.Errorf("exit %d, server CPU %vs, %vµs/request; want both positive", code, s.CPUSec, s.CPUPerReqUs)
	}
	s, _ = runJSON(t, addr, "--clients", "1", "--conns", "1", "--total", "5", "put")
	if s.CPUSec != 0 || s.CPUPerReqUs != 0 {
		t.Errorf("without --cpu-pid: %+v; want no CPU figures", s)
	}
}

func TestTokenSentAsIs(t *testing.T) {
	f, a := newFakeKV(), newFakeAuth()
	a.uses["external-jwt"] = 0
	addr := startSecureFake(t, f, a, nil)
	s, code := runJSON(t, addr, "--token", "external-jwt", "--clients", "4", "--conns", "2", "--total", "100", "put", "--key-space-size", "10")
	if code != 0 || s.Errors != 0 || s.Requests != 100 {
		t.Fatalf("exit %d, %d requests, %d errors (%s); want 100 puts with the token", code, s.Requests, s.Errors, s.FirstError)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.logins.Load() != 0 || a.noToken != 0 || a.uses["external-jwt"] != 100 {
		t.Errorf("%d logins, %d requests without a token, %d with it; want 0, 0, 100", a.logins.Load(), a.noToken, a.uses["external-jwt"])
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"--endpoints", addr, "--token", "x", "--user", "bench:pw:x", "--total", "1", "put"}, &out, &errOut); code != 1 {
		t.Errorf("--token with --user: exit %d, %q; want exit 1", code, errOut.String())
	}
}
