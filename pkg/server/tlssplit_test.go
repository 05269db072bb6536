package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
	"github.com/kvd-dev/kvd/pkg/tlsconf/tlstest"
)

// splitFixture is a TLS client port without a member: the split, a gRPC
// server (health service; an interceptor records the client certificate's
// CN it sees) and an HTTP server (/health answers the protocol).
type splitFixture struct {
	addr     string
	ca       *tlstest.CA
	alice    tls.Certificate
	logs     *observer.ObservedLogs
	cns      chan string
	stopOnce sync.Once
	stop     func()
}

func newSplitFixture(t *testing.T) *splitFixture {
	t.Helper()
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "ca")
	cert, key := ca.WriteCert(t, dir, "server", "server")
	info, err := tlsconf.New(tlsconf.Options{Block: tlsconf.ClientBlock,
		TLS: config.TLS{CertFile: cert, KeyFile: key, TrustedCAFile: ca.WriteCA(t, dir, "ca"), ClientCertAuth: true}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	fails := tlsconf.NewFailureLog(zap.New(core), "test")
	f := &splitFixture{addr: ln.Addr().String(), ca: ca, alice: ca.KeyPair(t, "alice"), logs: logs, cns: make(chan string, 100)}
	sl := newTLSSplitListener(ln, info.ServerConfig(clientProtos...), fails, zap.NewNop())
	g := grpc.NewServer(grpc.Creds(tlsconf.ServerCredentials(fails)),
		grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			p, _ := peer.FromContext(ctx)
			cn := "none"
			if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.VerifiedChains) > 0 {
				cn = ti.State.VerifiedChains[0][0].Subject.CommonName
			}
			f.cns <- cn
			return h(ctx, req)
		}))
	healthpb.RegisterHealthServer(g, health.NewServer())
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		_, _ = io.WriteString(w, r.Proto+" "+string(body))
	})
	hsrv := &http.Server{Handler: mux, Protocols: clientHTTPProtocols(), ReadHeaderTimeout: 5 * time.Second}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = g.Serve(sl.grpc) }()
	go func() { defer wg.Done(); _ = hsrv.Serve(sl.http) }()
	f.stop = func() {
		f.stopOnce.Do(func() {
			_ = hsrv.Close()
			g.Stop()
			sl.Close()
			wg.Wait()
		})
	}
	t.Cleanup(f.stop)
	return f
}

func (f *splitFixture) clientTLS(certs ...tls.Certificate) *tls.Config {
	return &tls.Config{RootCAs: f.ca.Pool(), Certificates: certs, ServerName: "127.0.0.1"}
}

func (f *splitFixture) grpcCheck(t *testing.T, creds credentials.TransportCredentials, timeout time.Duration) error {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+f.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func (f *splitFixture) get(t *testing.T, tr *http.Transport, body string) (string, error) {
	t.Helper()
	defer tr.CloseIdleConnections()
	req, err := http.NewRequest(http.MethodPost, "https://"+f.addr+"/health", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// TestTLSSplit: one TLS port serves gRPC (on gRPC's own transport, with the
// client certificate in the peer info) and HTTP/1.1 and HTTP/2.
func TestTLSSplit(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f := newSplitFixture(t)

	if err := f.grpcCheck(t, credentials.NewTLS(f.clientTLS(f.alice)), 5*time.Second); err != nil {
		t.Fatalf("gRPC over TLS: %v", err)
	}
	if cn := <-f.cns; cn != "alice" {
		t.Errorf("gRPC handler saw CN %q in peer.AuthInfo, want alice", cn)
	}

	h1 := &http.Transport{TLSClientConfig: f.clientTLS(f.alice), TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	if got, err := f.get(t, h1, "one"); err != nil || got != "HTTP/1.1 one" {
		t.Errorf("HTTP/1.1 over TLS: %q %v", got, err)
	}
	h2 := &http.Transport{TLSClientConfig: f.clientTLS(f.alice), ForceAttemptHTTP2: true}
	for i := range 3 { // reused connection: requests after the sniffed one
		if got, err := f.get(t, h2, strings.Repeat("x", i*40000)); err != nil || got != "HTTP/2.0 "+strings.Repeat("x", i*40000) {
			t.Errorf("HTTP/2 over TLS, request %d: %.40q %v", i, got, err)
		}
	}

	// A client without ALPN, speaking HTTP/1.1.
	c, err := tls.Dial("tcp", f.addr, f.clientTLS(f.alice))
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "POST /health HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("HTTP/1.1 without ALPN: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	c.Close()
	if string(b) != "HTTP/1.1 hi" {
		t.Errorf("HTTP/1.1 without ALPN: %q", b)
	}

	// curl with its defaults (HTTP/2 over ALPN), if installed.
	if path, err := exec.LookPath("curl"); err == nil {
		dir := t.TempDir()
		caFile := f.ca.WriteCA(t, dir, "ca")
		cert, key := f.ca.WriteCert(t, dir, "curl", "curl")
		out, err := exec.Command(path, "-sS", "--max-time", "5", "--cacert", caFile, "--cert", cert, "--key", key,
			"-d", "c", "https://"+f.addr+"/health").CombinedOutput()
		if err != nil || string(out) != "HTTP/2.0 c" {
			t.Errorf("curl: %q %v", out, err)
		}
	}

	// A gRPC connection that idles past the window before its first call
	// is still served.
	cc, err := grpc.NewClient("passthrough:///"+f.addr, grpc.WithTransportCredentials(credentials.NewTLS(f.clientTLS(f.alice))))
	if err != nil {
		t.Fatal(err)
	}
	cc.Connect()
	time.Sleep(h2IdleWindow + 500*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err = healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	cancel()
	cc.Close()
	if err != nil {
		t.Errorf("gRPC call after idling: %v", err)
	}
	<-f.cns

	if n := f.logs.Len(); n != 0 {
		t.Errorf("%d warnings logged for good clients: %v", n, f.logs.All())
	}
	f.stop()
}

// TestTLSSplitRefusals: a plaintext client and a client without a
// certificate are refused at once, logged once, and leave no goroutine.
func TestTLSSplitRefusals(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	f := newSplitFixture(t)

	start := time.Now()
	if err := f.grpcCheck(t, insecure.NewCredentials(), 3*time.Second); err == nil {
		t.Error("plaintext gRPC client served on the TLS port")
	}
	resp, err := http.Get("http://" + f.addr + "/health")
	if err != nil {
		t.Fatalf("plaintext HTTP: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTPS") {
		t.Errorf("plaintext HTTP on the TLS port: %d %q", resp.StatusCode, b)
	}

	err = f.grpcCheck(t, credentials.NewTLS(f.clientTLS()), 3*time.Second)
	if err == nil {
		t.Error("gRPC client without certificate served")
	}
	other := tlstest.NewCA(t, "other")
	if _, err := f.get(t, &http.Transport{TLSClientConfig: f.clientTLS(other.KeyPair(t, "mallory")), ForceAttemptHTTP2: true}, ""); err == nil {
		t.Error("HTTP client with a certificate of another CA served")
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("refusals took %v", d)
	}
	// The client can see a refusal before the server logs it: wait for the
	// first line, then make sure no second one follows.
	for deadline := time.Now().Add(5 * time.Second); f.logs.FilterMessageSnippet("TLS handshake failed").Len() == 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if n := f.logs.FilterMessageSnippet("TLS handshake failed").Len(); n != 1 {
		t.Errorf("refused handshakes logged %d times, want 1 (rate limited)", n)
	}
	f.stop()
}

// TestSniffedConnDropsOneSettingsAck: the replay drops exactly the first
// SETTINGS ACK after the preface, whatever the read sizes.
func TestSniffedConnDropsOneSettingsAck(t *testing.T) {
	var in, want bytes.Buffer
	fr := http2.NewFramer(&in, nil)
	wfr := http2.NewFramer(&want, nil)
	in.Write(http2Preface)
	want.Write(http2Preface)
	for _, w := range []*http2.Framer{fr, wfr} {
		_ = w.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		_ = w.WriteWindowUpdate(0, 12345)
	}
	_ = fr.WriteSettingsAck() // dropped
	for _, w := range []*http2.Framer{fr, wfr} {
		_ = w.WriteData(1, false, bytes.Repeat([]byte{4, 0, 0, 0, 1}, 3000)) // looks like an ACK inside a payload
		_ = w.WriteSettingsAck()                                             // a second ACK stays
		_ = w.WritePing(false, [8]byte{1})
	}
	all := in.Bytes()
	for _, split := range []int{1, 5, 9, 24, 30, 1000, len(all)} {
		for _, readSize := range []int{1, 3, 9, 4096} {
			// Part of the stream was read while sniffing, the rest comes
			// from the connection.
			a, b := net.Pipe()
			go func() { _, _ = b.Write(all[split:]); b.Close() }()
			sc := &sniffedConn{Conn: a, pending: bytes.Clone(all[:split]), skip: len(http2Preface)}
			var got bytes.Buffer
			buf := make([]byte, readSize)
			for {
				n, err := sc.Read(buf)
				got.Write(buf[:n])
				if errors.Is(err, io.EOF) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
			}
			a.Close()
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Fatalf("split %d, reads of %d: got %d bytes, want %d", split, readSize, got.Len(), want.Len())
			}
		}
	}
}
