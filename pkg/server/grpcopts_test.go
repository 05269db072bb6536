package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/kvd-dev/kvd/pkg/config"
)

// serveHealth serves the gRPC health service with the client server's
// stream and keepalive options from c, and returns its address.
func serveHealth(t *testing.T, c *config.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(clientStreamOptions(c)...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)
	return ln.Addr().String()
}

// max-concurrent-streams: a connection gets that many streams at once; the
// next waits until one ends.
func TestMaxConcurrentStreams(t *testing.T) {
	c := config.Default()
	c.MaxConcurrentStreams = 2
	cc, err := grpc.NewClient(serveHealth(t, c), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx := context.Background()
	var cancels []context.CancelFunc
	for i := 0; i < 2; i++ {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		cancels = append(cancels, cancel)
		w, err := hc.Watch(sctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = hc.Check(tctx, &healthpb.HealthCheckRequest{})
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("third stream with 2 open: %v, want it to wait (DeadlineExceeded)", err)
	}
	cancels[0]()
	tctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := hc.Check(tctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("third stream after one closed: %v", err)
	}
}

// h2conn is a raw HTTP/2 client connection, to send pings faster than a
// gRPC client allows and to watch the server's frames.
type h2conn struct {
	t  *testing.T
	nc net.Conn
	fr *http2.Framer
}

func dialH2(t *testing.T, addr string) *h2conn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(nc, nc)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	return &h2conn{t: t, nc: nc, fr: fr}
}

// openWatch opens a health Watch stream (stream 1) and leaves it open, so
// the connection has an active stream.
func (h *h2conn) openWatch() {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Watch"}, {":authority", "kvd"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		h.t.Fatal(err)
	}
	// An empty HealthCheckRequest: a 5-byte gRPC message header.
	if err := h.fr.WriteData(1, false, []byte{0, 0, 0, 0, 0}); err != nil {
		h.t.Fatal(err)
	}
}

// frames reads frames until the connection ends or d passes, acking
// settings, and returns what it saw: "ping" for each ping from the server,
// "pingack:<first data byte>" for each ack of ours, "goaway:<code>:<debug>", and "closed" when the server closed the
// connection.
func (h *h2conn) frames(d time.Duration, stopAt string) []string {
	var seen []string
	_ = h.nc.SetReadDeadline(time.Now().Add(d))
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return seen
			}
			return append(seen, "closed")
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = h.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				seen = append(seen, "ping")
			} else {
				seen = append(seen, fmt.Sprintf("pingack:%d", f.Data[0]))
			}
		case *http2.GoAwayFrame:
			seen = append(seen, "goaway:"+f.ErrCode.String()+":"+string(f.DebugData()))
		}
		if len(seen) > 0 && strings.HasPrefix(seen[len(seen)-1], stopAt) {
			return seen
		}
	}
}

// grpc-keepalive-min-time: a client that pings more often than that, with a
// stream open, is sent GOAWAY "too_many_pings"; under a shorter min-time the
// same pings are fine.
func TestKeepaliveMinTime(t *testing.T) {
	for _, tc := range []struct {
		minTime config.Duration
		goaway  bool
	}{{config.Duration(5 * time.Second), true}, {config.Duration(time.Millisecond), false}} {
		t.Run(tc.minTime.String(), func(t *testing.T) {
			c := config.Default()
			c.GRPCKeepAliveMinTime = tc.minTime
			h := dialH2(t, serveHealth(t, c))
			h.openWatch()
			h.frames(200*time.Millisecond, "")
			for i := 0; i < 5; i++ {
				if err := h.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
					break // the server may already have closed
				}
				time.Sleep(20 * time.Millisecond)
			}
			// A marker ping last: the server answers pings in order, and
			// queues a GOAWAY for a ping right after its ack, so once the
			// marker's ack is in, any GOAWAY for the five is too.
			stopAt := "goaway"
			if !tc.goaway {
				if err := h.fr.WritePing(false, [8]byte{255}); err != nil {
					t.Fatalf("marker ping: %v", err)
				}
				stopAt = "pingack:255"
			}
			frames := h.frames(10*time.Second, stopAt)
			seen := strings.Join(frames, " ")
			if !tc.goaway && frames[len(frames)-1] != stopAt {
				t.Fatalf("no ack for the marker ping: frames %q", seen)
			}
			got := strings.Contains(seen, "goaway:ENHANCE_YOUR_CALM:too_many_pings")
			if got != tc.goaway {
				t.Fatalf("5 pings 20ms apart under min-time %s: frames %q; want GOAWAY too_many_pings: %v", tc.minTime, seen, tc.goaway)
			}
		})
	}
}

// grpc-keepalive-interval and grpc-keepalive-timeout: the server pings an
// idle connection every interval and closes it when a ping goes unanswered
// for timeout.
func TestKeepaliveIntervalAndTimeout(t *testing.T) {
	c := config.Default()
	c.GRPCKeepAliveInterval = config.Duration(200 * time.Millisecond)
	c.GRPCKeepAliveTimeout = config.Duration(300 * time.Millisecond)
	h := dialH2(t, serveHealth(t, c))
	start := time.Now()
	seen := h.frames(5*time.Second, "closed")
	if len(seen) == 0 || seen[0] != "ping" || seen[len(seen)-1] != "closed" {
		t.Fatalf("frames %q: want the server's ping, then the connection closed", seen)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("closed after %s", d)
	}

	// The defaults (2h, 20s) send no ping in a second.
	h = dialH2(t, serveHealth(t, config.Default()))
	if seen := h.frames(time.Second, "ping"); len(seen) != 0 {
		t.Fatalf("default keepalive: frames %q, want none", seen)
	}
}
