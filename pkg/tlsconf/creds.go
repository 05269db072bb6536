package tlsconf

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TLSConn is a connection that carries TLS: a *tls.Conn, or a wrapper of
// one that already handshook (the client port's h2 split).
type TLSConn interface {
	net.Conn
	HandshakeContext(ctx context.Context) error
	ConnectionState() tls.ConnectionState
}

// ServerCredentials returns the gRPC server transport credentials of a
// server whose listener does the TLS itself (tls.NewListener or the client
// port's split): a TLSConn is handshaken if it has not been yet, and gRPC
// sees credentials.TLSInfo with its state (the verified chains, so the
// client certificate's CommonName reaches peer.FromContext(ctx).AuthInfo);
// any other connection passes as plaintext. gRPC then serves the
// connection on its own HTTP/2 transport. A failed handshake goes to log.
func ServerCredentials(log *FailureLog) credentials.TransportCredentials {
	return &serverCreds{log: log}
}

type serverCreds struct{ log *FailureLog }

func (s *serverCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, ok := c.(TLSConn)
	if !ok {
		return c, PlainAuthInfo{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), HandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		s.log.Note(c.RemoteAddr(), err)
		c.Close()
		return nil, nil, err
	}
	return c, AuthInfo(tc.ConnectionState()), nil
}

func (s *serverCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsconf: server credentials cannot dial")
}

func (s *serverCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (s *serverCreds) Clone() credentials.TransportCredentials { return &serverCreds{log: s.log} }

func (s *serverCreds) OverrideServerName(string) error { return nil }

// AuthInfo is what gRPC reports for a TLS connection.
func AuthInfo(st tls.ConnectionState) credentials.TLSInfo {
	return credentials.TLSInfo{State: st, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
}

// PlainAuthInfo is what gRPC reports for a plaintext connection on a server
// with ServerCredentials.
type PlainAuthInfo struct{ credentials.CommonAuthInfo }

// AuthType implements credentials.AuthInfo.
func (PlainAuthInfo) AuthType() string { return "insecure" }

// ClientCredentials returns gRPC dial credentials that build the TLS
// configuration at each handshake (ClientConfig: current CA pool and client
// certificate) for the host of the target, offering ALPN h2.
func (i *Info) ClientCredentials() credentials.TransportCredentials {
	return &clientCreds{i: i}
}

// DialCredentials returns the credentials to dial another member's URL
// rawURL ("https://host:port" or "http://host:port"): ClientCredentials for
// https, plaintext for http. Use the client block's Info for client URLs,
// the peer block's for peer URLs.
func (i *Info) DialCredentials(rawURL string) (credentials.TransportCredentials, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, err
	}
	switch u.Scheme {
	case "https":
		return i.ClientCredentials(), nil
	case "http":
		return insecure.NewCredentials(), nil
	default:
		return nil, fmt.Errorf("tlsconf: cannot dial %q: want http or https", rawURL)
	}
}

type clientCreds struct {
	i          *Info
	serverName string
}

func (c *clientCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	name := c.serverName
	if name == "" {
		name = hostOf(authority)
	}
	return clientHandshake(ctx, raw, c.i.ClientConfig(name))
}

// clientHandshake runs a client TLS handshake offering h2 on raw.
func clientHandshake(ctx context.Context, raw net.Conn, cfg *tls.Config) (net.Conn, credentials.AuthInfo, error) {
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(raw, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, nil, err
	}
	return tc, AuthInfo(tc.ConnectionState()), nil
}

func (c *clientCreds) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("tlsconf: client credentials cannot serve")
}

func (c *clientCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2", ServerName: c.serverName}
}

func (c *clientCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}

func (c *clientCreds) OverrideServerName(name string) error {
	c.serverName = name
	return nil
}

// FailureLog logs failed TLS handshakes on one listener without flooding:
// the first at once, then at most one line per interval carrying how many
// more failed meanwhile. A client that keeps retrying with the wrong
// certificate (or in plaintext) is one line per interval, not one per try.
type FailureLog struct {
	lg       *zap.Logger
	what     string
	interval time.Duration

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// NewFailureLog returns a FailureLog for the listener described by what.
func NewFailureLog(lg *zap.Logger, what string) *FailureLog {
	if lg == nil {
		lg = zap.NewNop()
	}
	return &FailureLog{lg: lg, what: what, interval: 10 * time.Second}
}

// Note records one failed handshake.
func (f *FailureLog) Note(remote net.Addr, err error) {
	if f == nil {
		return
	}
	f.mu.Lock()
	now := time.Now()
	if !f.last.IsZero() && now.Sub(f.last) < f.interval {
		f.suppressed++
		f.mu.Unlock()
		return
	}
	n := f.suppressed
	f.last, f.suppressed = now, 0
	f.mu.Unlock()
	fields := []zap.Field{zap.String("listener", f.what), zap.Error(err)}
	if remote != nil {
		fields = append(fields, zap.String("remote", remote.String()))
	}
	if n > 0 {
		fields = append(fields, zap.Int("more-failures-not-logged", n))
	}
	f.lg.Warn("TLS handshake failed; connection refused", fields...)
}

// LoopbackCredentials returns the credentials the member's JSON gateway dials
// its own https client listener with, as etcd's gateway does: the server is
// the member itself, so its certificate is not verified, and the member
// presents its client certificate (client-cert-file, else cert-file, read
// again when rotated), which client-cert-auth then checks as any other.
func (i *Info) LoopbackCredentials() credentials.TransportCredentials {
	return &loopbackCreds{clientCreds{i: i}}
}

type loopbackCreds struct{ clientCreds }

func (c *loopbackCreds) ClientHandshake(ctx context.Context, _ string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg := c.i.ClientConfig("")
	cfg.InsecureSkipVerify = true
	cfg.VerifyConnection = nil
	return clientHandshake(ctx, raw, cfg)
}

func (c *loopbackCreds) Clone() credentials.TransportCredentials {
	cp := *c
	return &cp
}
