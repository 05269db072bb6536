package tlsconf

import (
	"bytes"
	"context"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/tlsconf/tlstest"
)

// fixture is a CA with a server and a client certificate in files.
type fixture struct {
	dir                  string
	ca                   *tlstest.CA
	caFile               string
	serverCert, serverKy string
	clientCert, clientKy string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir(), ca: tlstest.NewCA(t, "test-ca")}
	f.caFile = f.ca.WriteCA(t, f.dir, "ca")
	f.serverCert, f.serverKy = f.ca.WriteCert(t, f.dir, "server", "server")
	f.clientCert, f.clientKy = f.ca.WriteCert(t, f.dir, "client", "alice")
	return f
}

func (f *fixture) server(t *testing.T, mod func(*config.TLS)) *Info {
	t.Helper()
	c := config.TLS{CertFile: f.serverCert, KeyFile: f.serverKy, TrustedCAFile: f.caFile, ClientCertAuth: true}
	if mod != nil {
		mod(&c)
	}
	i, err := New(Options{Block: PeerBlock, TLS: c})
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func (f *fixture) client(t *testing.T, mod func(*config.TLS)) *Info {
	t.Helper()
	c := config.TLS{ClientCertFile: f.clientCert, ClientKeyFile: f.clientKy, TrustedCAFile: f.caFile}
	if mod != nil {
		mod(&c)
	}
	i, err := New(Options{Block: ClientBlock, TLS: c})
	if err != nil {
		t.Fatal(err)
	}
	return i
}

// handshake runs one TLS handshake over a pipe and returns both sides'
// results and states.
func handshake(t *testing.T, srv, cli *tls.Config) (serr, cerr error, sst, cst tls.ConnectionState) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s := tls.Server(a, srv)
		serr = s.HandshakeContext(ctx)
		if serr == nil {
			// TLS 1.3: the server verifies the client's certificate after
			// the client returned; a read sees the outcome.
			sst = s.ConnectionState()
			_, _ = s.Write([]byte("x"))
		}
		a.Close()
	}()
	c := tls.Client(b, cli)
	cerr = c.HandshakeContext(ctx)
	if cerr == nil {
		cst = c.ConnectionState()
		var buf [1]byte
		if _, err := c.Read(buf[:]); err != nil {
			cerr = err
		}
	}
	b.Close()
	<-done
	return serr, cerr, sst, cst
}

func TestHandshakeOK(t *testing.T) {
	f := newFixture(t)
	srv, cli := f.server(t, nil), f.client(t, nil)
	if !srv.ClientCertAuth() || !srv.HasCert() || cli.HasCert() {
		t.Fatalf("ClientCertAuth %v HasCert %v / %v", srv.ClientCertAuth(), srv.HasCert(), cli.HasCert())
	}
	serr, cerr, sst, cst := handshake(t, srv.ServerConfig("h2"), withProtos(cli.ClientConfig("127.0.0.1"), "h2"))
	if serr != nil || cerr != nil {
		t.Fatalf("server %v, client %v", serr, cerr)
	}
	if len(sst.VerifiedChains) == 0 || sst.VerifiedChains[0][0].Subject.CommonName != "alice" {
		t.Errorf("server did not verify the client certificate: %+v", sst.VerifiedChains)
	}
	if cst.PeerCertificates[0].Subject.CommonName != "server" || cst.NegotiatedProtocol != "h2" {
		t.Errorf("client sees CN %q, ALPN %q", cst.PeerCertificates[0].Subject.CommonName, cst.NegotiatedProtocol)
	}
}

func withProtos(c *tls.Config, p ...string) *tls.Config {
	c.NextProtos = p
	return c
}

func TestWrongCARefused(t *testing.T) {
	f := newFixture(t)
	other := tlstest.NewCA(t, "other-ca")
	oc, ok := other.WriteCert(t, f.dir, "other-client", "mallory")
	ocaFile := other.WriteCA(t, f.dir, "other-ca")

	srv := f.server(t, nil)
	// A client certificate from another CA.
	cli := f.client(t, func(c *config.TLS) { c.ClientCertFile, c.ClientKeyFile = oc, ok })
	serr, cerr, _, _ := handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1"))
	if serr == nil || cerr == nil {
		t.Errorf("client cert of another CA: server %v, client %v; want both to fail", serr, cerr)
	}
	// A client that trusts another CA refuses the server.
	cli = f.client(t, func(c *config.TLS) { c.TrustedCAFile = ocaFile })
	_, cerr, _, _ = handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1"))
	if cerr == nil || !strings.Contains(cerr.Error(), "unknown authority") {
		t.Errorf("server cert of an untrusted CA: client %v", cerr)
	}
}

func TestNoClientCertRefusedWhenRequired(t *testing.T) {
	f := newFixture(t)
	srv := f.server(t, nil)
	cli := f.client(t, func(c *config.TLS) { c.ClientCertFile, c.ClientKeyFile = "", "" })
	serr, cerr, _, _ := handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1"))
	if serr == nil || cerr == nil {
		t.Fatalf("no client cert: server %v, client %v; want both to fail", serr, cerr)
	}
	// trusted-ca-file alone requires client certificates too, as in etcd.
	srv = f.server(t, func(c *config.TLS) { c.ClientCertAuth = false })
	if !srv.ClientCertAuth() {
		t.Error("trusted-ca-file alone does not require client certificates")
	}
	// Neither: no client certificate needed.
	srv = f.server(t, func(c *config.TLS) { c.ClientCertAuth, c.TrustedCAFile = false, "" })
	if serr, cerr, _, _ := handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1")); serr != nil || cerr != nil {
		t.Fatalf("server without client auth: server %v, client %v", serr, cerr)
	}
}

func TestRotation(t *testing.T) {
	f := newFixture(t)
	srv, cli := f.server(t, nil), f.client(t, nil)
	_, cerr, _, cst := handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1"))
	if cerr != nil {
		t.Fatal(cerr)
	}
	first := cst.PeerCertificates[0].SerialNumber

	// Rewrite the server's files (key first, as tools do; the handshake in
	// between still gets the old pair, never a mismatch).
	c, k := f.ca.Issue(t, "server-rotated")
	tlstest.Write(t, f.serverKy, k)
	if _, cerr, _, cst = handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1")); cerr != nil {
		t.Fatalf("handshake mid-rotation: %v", cerr)
	} else if cst.PeerCertificates[0].SerialNumber.Cmp(first) != 0 {
		t.Fatalf("mid-rotation: served a new certificate before its file was written")
	}
	tlstest.Write(t, f.serverCert, c)
	_, cerr, _, cst = handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1"))
	if cerr != nil {
		t.Fatal(cerr)
	}
	if got := cst.PeerCertificates[0].Subject.CommonName; got != "server-rotated" {
		t.Errorf("after rotation the server serves CN %q", got)
	}

	// The client's certificate rotates too.
	cc, ck := f.ca.Issue(t, "bob")
	tlstest.Write(t, f.clientKy, ck)
	tlstest.Write(t, f.clientCert, cc)
	_, cerr, sst, _ := handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1"))
	if cerr != nil {
		t.Fatal(cerr)
	}
	if got := sst.VerifiedChains[0][0].Subject.CommonName; got != "bob" {
		t.Errorf("after rotation the client presents CN %q", got)
	}

	// A new CA replaces the trusted CA file on both sides, with new
	// certificates: handshakes keep working without a restart.
	ca2 := tlstest.NewCA(t, "ca-2")
	c, k = ca2.Issue(t, "server-ca2")
	cc, ck = ca2.Issue(t, "carol")
	for _, w := range []struct {
		p string
		b []byte
	}{{f.serverKy, k}, {f.serverCert, c}, {f.clientKy, ck}, {f.clientCert, cc}, {f.caFile, ca2.PEM}} {
		tlstest.Write(t, w.p, w.b)
	}
	serr, cerr, sst, cst := handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1"))
	if serr != nil || cerr != nil {
		t.Fatalf("after CA rotation: server %v, client %v", serr, cerr)
	}
	if sst.VerifiedChains[0][0].Subject.CommonName != "carol" || cst.PeerCertificates[0].Subject.CommonName != "server-ca2" {
		t.Errorf("after CA rotation: %q / %q", sst.VerifiedChains[0][0].Subject.CommonName, cst.PeerCertificates[0].Subject.CommonName)
	}
}

func TestBrokenRotationKeepsLastGood(t *testing.T) {
	f := newFixture(t)
	core, logs := observer.New(zap.WarnLevel)
	i, err := New(Options{Block: ClientBlock, TLS: config.TLS{CertFile: f.serverCert, KeyFile: f.serverKy}, Logger: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	tlstest.Write(t, f.serverCert, []byte("garbage"))
	cli := f.client(t, nil)
	for range 3 {
		if _, cerr, _, cst := handshake(t, i.ServerConfig(), cli.ClientConfig("127.0.0.1")); cerr != nil {
			t.Fatalf("handshake with a broken cert file: %v", cerr)
		} else if cst.PeerCertificates[0].Subject.CommonName != "server" {
			t.Fatalf("served %q", cst.PeerCertificates[0].Subject.CommonName)
		}
	}
	if n := logs.FilterMessageSnippet("cannot reload TLS certificate").Len(); n != 1 {
		t.Errorf("broken file logged %d times over 3 handshakes, want once", n)
	}
}

func TestStartupErrors(t *testing.T) {
	f := newFixture(t)
	other := tlstest.NewCA(t, "other")
	_, otherKey := other.WriteCert(t, f.dir, "other", "x")
	garbage := filepath.Join(f.dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a pem file"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyAsCA := f.serverKy
	missing := filepath.Join(f.dir, "missing.pem")
	unreadable := filepath.Join(f.dir, "unreadable")
	if err := os.Mkdir(unreadable, 0o700); err != nil { // a directory cannot be read as a file
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		block string
		tls   config.TLS
		want  []string
	}{
		{"missing cert", ClientBlock, config.TLS{CertFile: missing, KeyFile: f.serverKy},
			[]string{"client-transport-security.cert-file (--cert-file)", "missing.pem", "no such file"}},
		{"missing key", PeerBlock, config.TLS{CertFile: f.serverCert, KeyFile: missing},
			[]string{"peer-transport-security.key-file (--peer-key-file)", "no such file"}},
		{"unreadable cert", ClientBlock, config.TLS{CertFile: unreadable, KeyFile: f.serverKy},
			[]string{"client-transport-security.cert-file", "is a directory"}},
		{"key does not match", PeerBlock, config.TLS{CertFile: f.serverCert, KeyFile: otherKey},
			[]string{"peer-transport-security.key-file (--peer-key-file)", "does not match", "server.pem"}},
		{"cert not PEM", ClientBlock, config.TLS{CertFile: garbage, KeyFile: f.serverKy},
			[]string{"client-transport-security.cert-file", "garbage.pem"}},
		{"CA not PEM", ClientBlock, config.TLS{CertFile: f.serverCert, KeyFile: f.serverKy, TrustedCAFile: garbage},
			[]string{"client-transport-security.trusted-ca-file (--trusted-ca-file)", "no PEM certificate"}},
		{"CA file holds a key", PeerBlock, config.TLS{CertFile: f.serverCert, KeyFile: f.serverKy, TrustedCAFile: keyAsCA},
			[]string{"peer-transport-security.trusted-ca-file (--peer-trusted-ca-file)", "EC PRIVATE KEY"}},
		{"CA missing", PeerBlock, config.TLS{TrustedCAFile: missing},
			[]string{"peer-transport-security.trusted-ca-file", "no such file"}},
		{"client cert missing", PeerBlock, config.TLS{CertFile: f.serverCert, KeyFile: f.serverKy, ClientCertFile: missing, ClientKeyFile: f.clientKy},
			[]string{"peer-transport-security.client-cert-file (--peer-client-cert-file)", "no such file"}},
		{"cert without key", ClientBlock, config.TLS{CertFile: f.serverCert},
			[]string{"client-transport-security.cert-file", "together"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(Options{Block: tc.block, TLS: tc.tls})
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestAllowedCN(t *testing.T) {
	f := newFixture(t)
	srv := f.server(t, func(c *config.TLS) { c.AllowedCNs = []string{"m1", "m2"} })
	m1c, m1k := f.ca.WriteCert(t, f.dir, "m1", "m1")
	cli := f.client(t, func(c *config.TLS) { c.ClientCertFile, c.ClientKeyFile = m1c, m1k })
	if serr, cerr, _, _ := handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1")); serr != nil || cerr != nil {
		t.Fatalf("allowed CN: server %v, client %v", serr, cerr)
	}
	// alice is signed by the right CA but not allowed.
	cli = f.client(t, nil)
	serr, cerr, _, _ := handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1"))
	if serr == nil || cerr == nil || !strings.Contains(serr.Error(), `"alice"`) {
		t.Fatalf("CN alice: server %v, client %v; want a refusal naming the CN", serr, cerr)
	}
	// The dialing side checks the server's certificate too, as etcd does.
	srv2 := f.server(t, nil) // serves CN "server"
	cli = f.client(t, func(c *config.TLS) {
		c.ClientCertFile, c.ClientKeyFile = m1c, m1k
		c.AllowedCNs = []string{"m1"}
	})
	if _, cerr, _, _ := handshake(t, srv2.ServerConfig(), cli.ClientConfig("127.0.0.1")); cerr == nil {
		t.Error("client accepted a server whose CN is not allowed")
	}

	// allowed-hostname: the certificate must be valid for one of them.
	hc, hk := f.ca.WriteCert(t, f.dir, "h", "h", "m3.example")
	srv = f.server(t, func(c *config.TLS) { c.AllowedHostnames = []string{"m3.example"} })
	cli = f.client(t, func(c *config.TLS) { c.ClientCertFile, c.ClientKeyFile = hc, hk })
	if serr, cerr, _, _ := handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1")); serr != nil || cerr != nil {
		t.Fatalf("allowed hostname: server %v, client %v", serr, cerr)
	}
	cli = f.client(t, nil)
	if serr, _, _, _ := handshake(t, srv.ServerConfig(), cli.ClientConfig("127.0.0.1")); serr == nil {
		t.Error("server accepted a certificate not valid for the allowed hostname")
	}
}

func TestAutoTLS(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "fixtures", "peer")
	o := Options{Block: PeerBlock, TLS: config.TLS{AutoTLS: true}, AutoTLSDir: dir, Hosts: []string{"127.0.0.1:2380", "kvd.example:2380"}}
	i, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := os.ReadFile(filepath.Join(dir, "cert.pem"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "key.pem")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key.pem: %v %v", fi, err)
	}
	// A restart keeps the certificate.
	i2, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(filepath.Join(dir, "cert.pem")); !bytes.Equal(again, cert) {
		t.Error("auto-tls generated a new certificate although one existed")
	}
	serr, cerr, _, cst := handshake(t, i.ServerConfig(), i2.ClientConfig("127.0.0.1"))
	if serr != nil || cerr != nil {
		t.Fatalf("auto-tls: server %v, client %v", serr, cerr)
	}
	leaf := cst.PeerCertificates[0]
	if leaf.VerifyHostname("127.0.0.1") != nil || leaf.VerifyHostname("kvd.example") != nil {
		t.Errorf("generated certificate not valid for the listen hosts: %v %v", leaf.IPAddresses, leaf.DNSNames)
	}
	// Given files win over auto-tls.
	f := newFixture(t)
	i3, err := New(Options{Block: PeerBlock, TLS: config.TLS{AutoTLS: true, CertFile: f.serverCert, KeyFile: f.serverKy}, AutoTLSDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, _, cst := handshake(t, i3.ServerConfig(), i2.ClientConfig("127.0.0.1")); cst.PeerCertificates[0].Subject.CommonName != "server" {
		t.Error("auto-tls replaced the given certificate")
	}
}

// TestGRPCCredentials: a gRPC server on a TLS listener with
// ServerCredentials sees the client's verified certificate in its peer
// info; the client dials with ClientCredentials.
func TestGRPCCredentials(t *testing.T) {
	f := newFixture(t)
	srv, cli := f.server(t, nil), f.client(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	cns := make(chan string, 4)
	g := grpc.NewServer(grpc.Creds(ServerCredentials(NewFailureLog(zap.New(core), "test"))),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p, _ := peer.FromContext(ctx)
			ti, ok := p.AuthInfo.(credentials.TLSInfo)
			if !ok || len(ti.State.VerifiedChains) == 0 {
				cns <- "none"
			} else {
				cns <- ti.State.VerifiedChains[0][0].Subject.CommonName
			}
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	go func() { _ = g.Serve(tls.NewListener(ln, srv.ServerConfig("h2"))) }()
	defer g.Stop()

	cc, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(cli.ClientCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if cn := <-cns; cn != "alice" {
		t.Errorf("server saw CN %q, want alice", cn)
	}

	// A client without a certificate is refused and logged once.
	nocert := f.client(t, func(c *config.TLS) { c.ClientCertFile, c.ClientKeyFile = "", "" })
	cc2, err := grpc.NewClient("passthrough:///"+ln.Addr().String(), grpc.WithTransportCredentials(nocert.ClientCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc2.Close()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := healthpb.NewHealthClient(cc2).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil {
			t.Fatal("client without certificate served")
		}
	}
	// The client can see the refusal before the server's handshake returns
	// and logs it, so wait for the first line, then make sure no more come.
	deadline := time.Now().Add(5 * time.Second)
	for logs.FilterMessageSnippet("TLS handshake failed").Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if n := logs.FilterMessageSnippet("TLS handshake failed").Len(); n != 1 {
		t.Errorf("handshake failures logged %d times, want 1 (rate limited)", n)
	}
}

func TestDialCredentials(t *testing.T) {
	i, err := New(Options{Block: ClientBlock})
	if err != nil {
		t.Fatal(err)
	}
	for u, want := range map[string]string{"https://127.0.0.1:2379": "tls", "http://127.0.0.1:2379": "insecure"} {
		c, err := i.DialCredentials(u)
		if err != nil || c.Info().SecurityProtocol != want {
			t.Errorf("%s: %v %v, want %s", u, c, err, want)
		}
	}
	if _, err := i.DialCredentials("unix://x"); err == nil {
		t.Error("unix URL accepted")
	}
}
