package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// security is how the tool reaches the servers beyond plain gRPC: TLS
// (--cacert, --cert, --key) and a user to authenticate as (--user). The
// zero value is plaintext and anonymous, the tool's behaviour without
// those flags.
type security struct {
	// tls is non-nil when any TLS flag was given; https:// and unixs://
	// endpoints use it too (with the system roots when it is nil).
	tls  *tls.Config
	mtls bool // a client certificate is presented
	user *userCreds
	// token is --token: sent as is with every request, never renewed.
	token string
	// reauths counts the re-authentications after the server refused a
	// token, over every connection of the run.
	reauths *atomic.Int64
}

// tlsMode names the TLS of the run for the summary: "" (none given by
// flag), "tls" (server certificate checked) or "mutual" (client certificate too).
func (s security) tlsMode() string {
	switch {
	case s.tls == nil:
		return ""
	case s.mtls:
		return "mutual"
	}
	return "tls"
}

func (s security) userName() string {
	if s.user == nil {
		return ""
	}
	return s.user.name
}

// userCreds is --user name:password.
type userCreds struct {
	name, password string
}

// parseUser splits name:password at the first colon, as etcdctl's --user
// does, so a password may contain colons; the name must not be empty.
func parseUser(s string) (*userCreds, error) {
	name, password, ok := strings.Cut(s, ":")
	if !ok || name == "" {
		return nil, fmt.Errorf("--user %q: want name:password", s)
	}
	return &userCreds{name: name, password: password}, nil
}

// tlsConfig builds the client TLS configuration of --cacert, --cert and
// --key: nil when none is given. The CA file replaces the system roots;
// cert and key, which must come together, make it mutual TLS. The server
// name is left empty: gRPC checks the certificate against each
// endpoint's host.
func tlsConfig(cacert, cert, key string) (*tls.Config, error) {
	if cacert == "" && cert == "" && key == "" {
		return nil, nil
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("--cert and --key must be given together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if cacert != "" {
		pem, err := os.ReadFile(cacert)
		if err != nil {
			return nil, fmt.Errorf("--cacert: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--cacert %s: no PEM certificate in it", cacert)
		}
		cfg.RootCAs = pool
	}
	if cert != "" {
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--cert/--key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// grpcTarget turns an etcd-style endpoint into a gRPC target and tells
// whether to speak TLS to it: https:// and unixs:// always, host:port and
// unix:// when a TLS flag was given (tlsFlags), http:// never (with a TLS
// flag it is an error rather than a silent plaintext measurement).
func grpcTarget(endpoint string, tlsFlags bool) (target string, useTLS bool, err error) {
	switch {
	case strings.HasPrefix(endpoint, "https://"):
		return strings.TrimPrefix(endpoint, "https://"), true, nil
	case strings.HasPrefix(endpoint, "unixs://"):
		return "unix://" + strings.TrimPrefix(endpoint, "unixs://"), true, nil
	case strings.HasPrefix(endpoint, "http://"):
		if tlsFlags {
			return "", false, fmt.Errorf("endpoint %s: http:// with --cacert/--cert/--key; use https:// or host:port", endpoint)
		}
		return strings.TrimPrefix(endpoint, "http://"), false, nil
	}
	return endpoint, tlsFlags, nil
}

// Methods that must go out without a token: logging in.
const authenticateMethod = "/etcdserverpb.Auth/Authenticate"

// tokenSource is one connection's token: obtained once when the connection
// is ready, sent in the "token" metadata of every request, and replaced
// when the server refuses it.
type tokenSource struct {
	user    *userCreds
	auth    pb.AuthClient
	reauths *atomic.Int64

	tok atomic.Pointer[string]
	mu  sync.Mutex // serializes Authenticate calls of this connection
}

// refresh authenticates again unless another request of this connection
// already replaced stale (the token it was refused with); with stale ""
// it always authenticates.
func (ts *tokenSource) refresh(ctx context.Context, stale string) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if cur := ts.tok.Load(); stale != "" && cur != nil && *cur != stale {
		return nil
	}
	resp, err := ts.auth.Authenticate(ctx, &pb.AuthenticateRequest{Name: ts.user.name, Password: ts.user.password})
	if err != nil {
		return fmt.Errorf("authenticate as %s: %w", ts.user.name, err)
	}
	tok := resp.Token
	ts.tok.Store(&tok)
	if stale != "" && ts.reauths != nil {
		ts.reauths.Add(1)
	}
	return nil
}

func (ts *tokenSource) token() string {
	if p := ts.tok.Load(); p != nil {
		return *p
	}
	return ""
}

// tokenRefused tells the errors after which etcd's client authenticates
// again and retries: the token is unknown (expired, or the member lost it)
// or older than the auth store.
func tokenRefused(err error) bool {
	if err == nil {
		return false
	}
	switch rpctypes.ErrorDesc(err) {
	case rpctypes.ErrInvalidAuthToken.Error(), rpctypes.ErrAuthOldRevision.Error():
		return true
	}
	return false
}

// unary adds the token to every request but Authenticate and, when the
// server refuses it, authenticates again and retries the request once, as
// etcd's client does. A refused request did not take effect, so the retry
// cannot apply a write twice; its latency includes the new login.
func (ts *tokenSource) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == authenticateMethod {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	tok := ts.token()
	err := invoker(metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, tok), method, req, reply, cc, opts...)
	if !tokenRefused(err) {
		return err
	}
	if rerr := ts.refresh(ctx, tok); rerr != nil {
		return fmt.Errorf("%w (after %w)", rerr, err)
	}
	return invoker(metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, ts.token()), method, req, reply, cc, opts...)
}

// stream adds the token to a new stream (watch); a stream refused for its
// token fails as any other stream failure does.
func (ts *tokenSource) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, ts.token()), desc, cc, method, opts...)
}

// staticToken is --token: the same token in the "token" metadata of every
// request and stream, as a client holding an external token (an OIDC JWT)
// sends it.
type staticToken string

func (t staticToken) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, string(t)), method, req, reply, cc, opts...)
}

func (t staticToken) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	return streamer(metadata.AppendToOutgoingContext(ctx, rpctypes.TokenFieldNameGRPC, string(t)), desc, cc, method, opts...)
}
