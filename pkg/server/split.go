package server

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/tlsconf"
)

// http2Preface starts every HTTP/2 connection (gRPC); anything else on the
// client port is taken for HTTP/1.x, as etcd serves both on one port.
var http2Preface = []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")

// splitListener sorts accepted connections by their first bytes into a gRPC
// listener and an HTTP/1.x listener. Only the first bytes of a connection
// are looked at; requests on it then flow untouched.
type splitListener struct {
	ln         net.Listener
	grpc, http *connQueue

	// For an https URL (tlssplit.go): the server TLS configuration, where
	// failed handshakes are logged, and a logger.
	tls   *tls.Config
	fails *tlsconf.FailureLog
	lg    *zap.Logger
}

func newSplitListener(ln net.Listener) *splitListener {
	s := &splitListener{ln: ln, grpc: newConnQueue(ln.Addr()), http: newConnQueue(ln.Addr())}
	go s.run()
	return s
}

// newTLSSplitListener is newSplitListener for an https URL.
func newTLSSplitListener(ln net.Listener, cfg *tls.Config, fails *tlsconf.FailureLog, lg *zap.Logger) *splitListener {
	s := &splitListener{ln: ln, grpc: newConnQueue(ln.Addr()), http: newConnQueue(ln.Addr()), tls: cfg, fails: fails, lg: lg}
	go s.run()
	return s
}

func (s *splitListener) run() {
	for {
		c, err := s.ln.Accept()
		if err != nil {
			s.grpc.close(err)
			s.http.close(err)
			return
		}
		if s.tls != nil {
			go s.sortTLS(c)
		} else {
			go s.sort(c)
		}
	}
}

func (s *splitListener) sort(c net.Conn) {
	// A client that sends nothing for this long is dropped, not left to hold
	// a goroutine.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	head := make([]byte, 3)
	if _, err := io.ReadFull(c, head); err != nil {
		c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	pc := &prefixConn{Conn: c, r: io.MultiReader(bytes.NewReader(head), c)}
	if bytes.Equal(head, http2Preface[:3]) {
		s.grpc.put(pc)
	} else {
		s.http.put(pc)
	}
}

// Close closes the underlying listener (and so both halves).
func (s *splitListener) Close() error { return s.ln.Close() }

type prefixConn struct {
	net.Conn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connQueue is a net.Listener fed by splitListener.
type connQueue struct {
	addr  net.Addr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
	err   error
}

func newConnQueue(addr net.Addr) *connQueue {
	return &connQueue{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (q *connQueue) put(c net.Conn) {
	select {
	case q.conns <- c:
	case <-q.done:
		c.Close()
	}
}

func (q *connQueue) close(err error) {
	q.once.Do(func() {
		q.err = err
		close(q.done)
	})
}

func (q *connQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.conns:
		return c, nil
	case <-q.done:
		if q.err == nil {
			return nil, net.ErrClosed
		}
		return nil, q.err
	}
}

func (q *connQueue) Close() error {
	q.close(net.ErrClosed)
	return nil
}

func (q *connQueue) Addr() net.Addr { return q.addr }
