package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
	"github.com/kvd-dev/kvd/pkg/tlsconf/tlstest"
)

// tlsPKI is a CA with the files of a member's certificates.
type tlsPKI struct {
	dir    string
	ca     *tlstest.CA
	caFile string
}

func newTLSPKI(t testing.TB) *tlsPKI {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "kvd-test-ca")
	return &tlsPKI{dir: dir, ca: ca, caFile: ca.WriteCA(t, dir, "ca")}
}

// tlsConfig makes c serve https on its client and peer URLs (mutual TLS on
// both, peers restricted to the CNs m1..m3), plus an http client URL.
func (p *tlsPKI) tlsConfig(t testing.TB, c *config.Config) {
	t.Helper()
	swap := func(s string) string { return strings.ReplaceAll(s, "http://", "https://") }
	c.ListenClientURLs = swap(c.ListenClientURLs) + fmt.Sprintf(",http://127.0.0.1:%d", freePort(t))
	c.AdvertiseClientURLs = swap(c.AdvertiseClientURLs)
	c.ListenPeerURLs, c.InitialAdvertisePeerURLs, c.InitialCluster = swap(c.ListenPeerURLs), swap(c.InitialAdvertisePeerURLs), swap(c.InitialCluster)
	cert, key := p.ca.WriteCert(t, p.dir, c.Name+"-server", c.Name)
	pcert, pkey := p.ca.WriteCert(t, p.dir, c.Name+"-peer", c.Name)
	c.ClientTLS = config.TLS{CertFile: cert, KeyFile: key, TrustedCAFile: p.caFile, ClientCertAuth: true}
	c.PeerTLS = config.TLS{CertFile: pcert, KeyFile: pkey, TrustedCAFile: p.caFile, ClientCertAuth: true, AllowedCNs: []string{"m1", "m2", "m3"}}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

func (p *tlsPKI) clientTLS(t testing.TB, cn string) *tls.Config {
	return &tls.Config{RootCAs: p.ca.Pool(), Certificates: []tls.Certificate{p.ca.KeyPair(t, cn)}}
}

// startTLSMember is startMember with a TLS client connection to the
// member's first (https) client URL.
func startTLSMember(t testing.TB, c *config.Config, p *tlsPKI) *member {
	t.Helper()
	app := fx.New(fx.Supply(c, zap.NewNop()), fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }), Module())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatalf("start member: %v", err)
	}
	u, _ := c.ClientURLs()
	conn, err := grpc.NewClient(u[0].Host, grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS(t, "root"))))
	if err != nil {
		t.Fatal(err)
	}
	m := &member{app: app, conn: conn, kv: pb.NewKVClient(conn)}
	t.Cleanup(m.stop)
	return m
}

// TestTLSCluster: three members with mutual TLS for clients and peers; a
// write replicates; every client port also answers HTTP/1.1 and HTTP/2
// over TLS, the plaintext URL beside it still works, and the https metrics
// URL uses the client certificate.
func TestTLSCluster(t *testing.T) {
	p := newTLSPKI(t)
	cs := clusterConfigs(t, "bolt", "bolt", "badger")
	for _, c := range cs {
		p.tlsConfig(t, c)
	}
	cs[0].ListenMetricsURLs = fmt.Sprintf("https://127.0.0.1:%d", freePort(t))
	ms := make([]*member, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); ms[i] = startTLSMember(t, c, p) }()
	}
	wg.Wait()
	put(t, ms[0], "k", "v")
	for i, m := range ms {
		resp, err := m.kv.Range(ctx5(t), &pb.RangeRequest{Key: []byte("k")})
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
			t.Fatalf("m%d: linearizable read over TLS: %v %v", i+1, resp, err)
		}
	}

	// The plaintext URL of the same member.
	u, _ := cs[1].ClientURLs()
	plain := startMemberConn(t, u[1].Host)
	if resp, err := pb.NewKVClient(plain).Range(ctx5(t), &pb.RangeRequest{Key: []byte("k")}); err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("plaintext URL beside the TLS one: %v %v", resp, err)
	}

	// HTTP over TLS on the client port, both protocols; and the metrics URL.
	for _, h2 := range []bool{false, true} {
		tr := &http.Transport{TLSClientConfig: p.clientTLS(t, "probe"), ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		cli := &http.Client{Transport: tr, Timeout: 5 * time.Second}
		urls := []string{"https://" + u[0].Host + "/health", cs[0].ListenMetricsURLs + "/metrics"}
		for _, url := range urls {
			resp, err := cli.Get(url)
			if err != nil {
				t.Fatalf("GET %s (h2 %v): %v", url, h2, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || (h2 && resp.ProtoMajor != 2) || (!strings.Contains(string(b), `"health":"true"`) && !strings.Contains(string(b), "etcd_server_has_leader")) {
				t.Errorf("GET %s (h2 %v): %d %s %.80q", url, h2, resp.StatusCode, resp.Proto, b)
			}
		}
		tr.CloseIdleConnections()
	}

	// A member asks another's HashKV over its https peer URL (the
	// corruption checks do) with its peer block.
	peerTLS, err := tlsconf.ForPeer(cs[0], zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	st, err := ms[1].maint().Status(ctx5(t), &pb.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := peerHashKV(ctx5(t), []string{cs[1].InitialAdvertisePeerURLs}, st.Header.ClusterId, peerTLS.ClientCredentials(), 0); err != nil {
		t.Errorf("HashKV from m1 to m2 over peer TLS: %v", err)
	}

	// Member list shows the https client URLs everyone published.
	eventually(t, "member list", func() error {
		resp, err := ms[2].cluster().MemberList(ctx5(t), &pb.MemberListRequest{})
		if err != nil {
			return err
		}
		for _, m := range resp.Members {
			if len(m.ClientURLs) == 0 || !strings.HasPrefix(m.ClientURLs[0], "https://") || !strings.HasPrefix(m.PeerURLs[0], "https://") {
				return fmt.Errorf("member %s: client %v peer %v", m.Name, m.ClientURLs, m.PeerURLs)
			}
		}
		return nil
	})
}

func startMemberConn(t testing.TB, host string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestTLSStartErrors: bad TLS files stop the start with an error naming the
// key, before anything is bound.
func TestTLSStartErrors(t *testing.T) {
	p := newTLSPKI(t)
	missing := filepath.Join(p.dir, "missing.pem")
	garbage := filepath.Join(p.dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, otherKey := p.ca.WriteCert(t, p.dir, "other", "other")
	for _, tc := range []struct {
		name string
		mod  func(c *config.Config)
		want string
	}{
		{"client cert missing", func(c *config.Config) { c.ClientTLS.CertFile = missing }, "client-transport-security.cert-file (--cert-file)"},
		{"peer key mismatch", func(c *config.Config) { c.PeerTLS.KeyFile = otherKey }, "peer-transport-security.key-file (--peer-key-file)"},
		{"client CA garbage", func(c *config.Config) { c.ClientTLS.TrustedCAFile = garbage }, "client-transport-security.trusted-ca-file"},
		{"peer CA missing", func(c *config.Config) { c.PeerTLS.TrustedCAFile = missing }, "peer-transport-security.trusted-ca-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig(t, "bolt", t.TempDir())
			p.tlsConfig(t, c)
			tc.mod(c)
			err := startErr(t, c)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start: %v; want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestAutoTLSMember: auto-tls and peer-auto-tls serve with a generated
// certificate kept under <data-dir>/fixtures.
func TestAutoTLSMember(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	swap := func(s string) string { return strings.ReplaceAll(s, "http://", "https://") }
	c.ListenClientURLs, c.AdvertiseClientURLs = swap(c.ListenClientURLs), swap(c.AdvertiseClientURLs)
	c.ListenPeerURLs, c.InitialAdvertisePeerURLs, c.InitialCluster = swap(c.ListenPeerURLs), swap(c.InitialAdvertisePeerURLs), swap(c.InitialCluster)
	c.ClientTLS.AutoTLS, c.PeerTLS.AutoTLS = true, true
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	app := fx.New(fx.Supply(c, zap.NewNop()), fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }), Module())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatal(err)
	}
	u, _ := c.ClientURLs()
	conn, err := grpc.NewClient(u[0].Host, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{InsecureSkipVerify: true})))
	if err != nil {
		t.Fatal(err)
	}
	m := &member{app: app, conn: conn, kv: pb.NewKVClient(conn)}
	t.Cleanup(m.stop)
	put(t, m, "k", "v")
	for _, f := range []string{"fixtures/client/cert.pem", "fixtures/client/key.pem", "fixtures/peer/cert.pem", "fixtures/peer/key.pem"} {
		if _, err := os.Stat(filepath.Join(c.DataDir, f)); err != nil {
			t.Error(err)
		}
	}
}
