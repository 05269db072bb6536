package server

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/kvd-dev/kvd/pkg/config"
)

var engines = []string{"bolt", "badger"}

// freePort returns a loopback port that is free now and was not handed out
// before in this test binary. It is drawn below the kernel's ephemeral
// range (32768 and up by default): a port from Listen(":0") is an
// ephemeral one, which any process's outgoing connection (the test
// packages run side by side) may take before the member binds it, and
// which a second Listen(":0") may return again.
func freePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := 20000 + rand.IntN(12000)
		if portsUsed[port] {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		portsUsed[port] = true
		return port
	}
	t.Fatal("no free port below the ephemeral range")
	return 0
}

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

func testConfig(t testing.TB, engine, dir string) *config.Config {
	t.Helper()
	c := config.Default()
	c.Name = "m1"
	c.DataDir = dir
	c.WALDir = ""
	client := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	c.ListenClientURLs, c.AdvertiseClientURLs = client, client
	c.ListenPeerURLs, c.InitialAdvertisePeerURLs = peer, peer
	c.InitialCluster = ""
	c.Backend.Engine = engine
	c.Complete()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return c
}

type member struct {
	app  *fx.App
	conn *grpc.ClientConn
	kv   pb.KVClient
}

func startMember(t testing.TB, c *config.Config, opts ...fx.Option) *member {
	t.Helper()
	app := fx.New(append([]fx.Option{
		fx.Supply(c, zap.NewNop()),
		fx.WithLogger(func() fxevent.Logger { return fxevent.NopLogger }),
		Module(),
	}, opts...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		t.Fatalf("start member: %v", err)
	}
	u, _ := c.ClientURLs()
	conn, err := grpc.NewClient(u[0].Host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	m := &member{app: app, conn: conn, kv: pb.NewKVClient(conn)}
	t.Cleanup(m.stop)
	return m
}

func (m *member) stop() {
	if m.app == nil {
		return
	}
	m.conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = m.app.Stop(ctx)
	m.app = nil
}

// put retries while the member elects itself.
func put(t testing.TB, m *member, k, v string) *pb.PutResponse {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		resp, err := m.kv.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: []byte(v)})
		cancel()
		if err == nil {
			return resp
		}
		if time.Now().After(deadline) {
			t.Fatalf("put %s: %v", k, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestOnePutIsOneTraceThroughEveryActor(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	c := testConfig(t, "bolt", t.TempDir())
	m := startMember(t, c, fx.Decorate(func(trace.Tracer) trace.Tracer { return tp.Tracer("kvd") }))
	put(t, m, "warm", "up") // the first put may race the election
	before := len(rec.Ended())
	put(t, m, "foo", "bar")

	want := []string{"kv.Put", "raft.propose", "raftlog.fsync", "raft.commit", "apply"}
	deadline := time.Now().Add(5 * time.Second)
	for {
		spans := rec.Ended()[before:]
		byName := map[string]sdktrace.ReadOnlySpan{}
		for _, s := range spans {
			byName[s.Name()] = s
		}
		missing := ""
		for _, n := range want {
			if _, ok := byName[n]; !ok {
				missing = n
			}
		}
		if missing == "" {
			root := byName["kv.Put"].SpanContext().TraceID()
			for _, n := range want {
				if got := byName[n].SpanContext().TraceID(); got != root {
					t.Fatalf("span %s in trace %s, want the put's trace %s", n, got, root)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			var names []string
			for _, s := range spans {
				names = append(names, s.Name())
			}
			t.Fatalf("span %q missing; got %v", missing, names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRestartKeepsEveryWrite stops a member and starts it again on the same
// data: the WAL replay and the backend agree, nothing is applied twice.
func TestRestartKeepsEveryWrite(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			c := testConfig(t, engine, dir)
			c.SnapshotCount = 50 // exercise raft snapshots and WAL truncation
			m := startMember(t, c)
			revs := map[string]int64{}
			for i := 0; i < 120; i++ {
				k := fmt.Sprintf("k%03d", i%40)
				revs[k] = put(t, m, k, fmt.Sprint(i)).Header.Revision
			}
			m.stop()

			m = startMember(t, c)
			put(t, m, "after", "restart")
			for k, rev := range revs {
				resp, err := m.kv.Range(context.Background(), &pb.RangeRequest{Key: []byte(k)})
				if err != nil {
					t.Fatal(err)
				}
				if len(resp.Kvs) != 1 || resp.Kvs[0].ModRevision != rev {
					t.Fatalf("%s after restart: %v, want mod revision %d", k, resp.Kvs, rev)
				}
			}
			resp, err := m.kv.Range(context.Background(), &pb.RangeRequest{Key: []byte("after")})
			if err != nil {
				t.Fatal(err)
			}
			if got := resp.Kvs[0].ModRevision; got != 122 {
				t.Fatalf("first write after restart at revision %d, want 122 (1 + 120 + 1)", got)
			}
		})
	}
}

func TestGRPCHealthServing(t *testing.T) {
	m := startMember(t, testConfig(t, "bolt", t.TempDir()))
	resp, err := healthpb.NewHealthClient(m.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health status %v, want SERVING", resp.Status)
	}
}

// TestHTTPEndpointsBesideGRPC: the client port answers etcd's plain HTTP
// endpoints and gRPC on the same listener.
func TestHTTPEndpointsBesideGRPC(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	m := startMember(t, c)
	put(t, m, "k", "v") // a leader exists: /health can pass
	u, _ := c.ClientURLs()
	for path, want := range map[string]string{
		"/version": `{"etcdcluster":"3.7.0","etcdserver":"3.7.3"}`,
		"/health":  `{"health":"true","reason":""}`,
		"/livez":   "ok",
	} {
		resp, err := http.Get("http://" + u[0].Host + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != want {
			t.Fatalf("GET %s: %d %q, want 200 %q", path, resp.StatusCode, body, want)
		}
	}
	if _, err := m.kv.Range(context.Background(), &pb.RangeRequest{Key: []byte("k")}); err != nil {
		t.Fatalf("gRPC after HTTP on the same port: %v", err)
	}
}

func TestLeaseCheckpointFeatureGate(t *testing.T) {
	c := config.Default()
	if got := checkpointInterval(c); got != 0 {
		t.Fatalf("checkpointing on by default (%v)", got)
	}
	c.FeatureGates = "LeaseCheckpoint=true"
	if got := checkpointInterval(c); got != 5*time.Minute {
		t.Fatalf("LeaseCheckpoint=true gives interval %v, want etcd's 5m", got)
	}
}

// TestMetricsUseEtcdNames: /metrics answers with etcd's metric names, and the
// values follow the member; listen-metrics-urls serves the same apart from
// the client port, with the health probes.
func TestMetricsUseEtcdNames(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	c.ListenMetricsURLs = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	m := startMember(t, c)
	rev := put(t, m, "k", "v").Header.Revision
	u, _ := c.ClientURLs()
	mu, _ := c.MetricsURLs()
	get := func(host, path string) string {
		t.Helper()
		resp, err := http.Get("http://" + host + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s%s: %d %q", host, path, resp.StatusCode, body)
		}
		return string(body)
	}
	if got := get(mu[0].Host, "/health"); strings.TrimSpace(got) != `{"health":"true","reason":""}` {
		t.Errorf("metrics listener /health: %q", got)
	}
	if !strings.Contains(get(mu[0].Host, "/metrics"), "etcd_server_has_leader 1") {
		t.Error("metrics listener /metrics lacks etcd_server_has_leader 1")
	}
	text := get(u[0].Host, "/metrics")
	for _, want := range []string{
		"etcd_server_has_leader 1",
		"etcd_server_is_leader 1",
		"etcd_server_leader_changes_seen_total 1",
		fmt.Sprintf("etcd_debugging_mvcc_current_revision %d", rev),
		`etcd_server_version{server_version="3.7.3"} 1`,
		"etcd_mvcc_db_total_size_in_bytes ",
		"etcd_debugging_mvcc_watch_stream_total 0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(text, "etcd_disk_wal_fsync_duration_seconds_count 0\n") || !strings.Contains(text, "etcd_disk_wal_fsync_duration_seconds_count") {
		t.Error("no WAL fsync observed in etcd_disk_wal_fsync_duration_seconds")
	}
	// The put reaches the backend within the batch interval (100 ms).
	eventually(t, "a backend commit in etcd_disk_backend_commit_duration_seconds", func() error {
		text := get(u[0].Host, "/metrics")
		if !strings.Contains(text, "etcd_disk_backend_commit_duration_seconds_count") || strings.Contains(text, "etcd_disk_backend_commit_duration_seconds_count 0\n") {
			return fmt.Errorf("no commit observed")
		}
		return nil
	})
}

// A metrics URL that cannot be bound stops the start with an error naming
// the flag, and the client port is not left bound.
func TestBusyMetricsURLIsRefused(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	c := testConfig(t, "bolt", t.TempDir())
	c.ListenMetricsURLs = "http://" + busy.Addr().String()
	err = startErr(t, c)
	if err == nil || !strings.Contains(err.Error(), "listen-metrics-urls") {
		t.Fatalf("start with a busy metrics port: %v", err)
	}
	u, _ := c.ClientURLs()
	ln, err := net.Listen("tcp", u[0].Host)
	if err != nil {
		t.Fatalf("client port still bound after the failed start: %v", err)
	}
	ln.Close()
}
