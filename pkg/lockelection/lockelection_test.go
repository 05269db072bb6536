package lockelection

import (
	"context"
	"net"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/kvd-dev/kvd/pkg/authz"
)

func TestUsePrefersPlaintext(t *testing.T) {
	tlsCreds := insecure.NewCredentials() // stands for the loopback TLS credentials
	tcp := func(ip string, port int) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: port} }
	for _, tc := range []struct {
		name      string
		uses      []net.Addr
		creds     []credentials.TransportCredentials
		target    string
		plaintext bool
	}{
		{"plain only", []net.Addr{tcp("0.0.0.0", 1)}, []credentials.TransportCredentials{nil}, "127.0.0.1:1", true},
		{"tls then plain", []net.Addr{tcp("127.0.0.1", 1), tcp("::", 2)}, []credentials.TransportCredentials{tlsCreds, nil}, "[::1]:2", true},
		{"plain then tls", []net.Addr{tcp("10.0.0.1", 1), tcp("127.0.0.1", 2)}, []credentials.TransportCredentials{nil, tlsCreds}, "10.0.0.1:1", true},
		{"two plain", []net.Addr{tcp("127.0.0.1", 1), tcp("127.0.0.1", 2)}, []credentials.TransportCredentials{nil, nil}, "127.0.0.1:1", true},
		{"tls only", []net.Addr{tcp("127.0.0.1", 1), tcp("127.0.0.1", 2)}, []credentials.TransportCredentials{tlsCreds, tlsCreds}, "127.0.0.1:1", false},
	} {
		s := New(nil)
		for i, a := range tc.uses {
			s.Use(a, tc.creds[i])
		}
		if s.target != tc.target || (s.creds == nil) != tc.plaintext {
			t.Errorf("%s: target %s plaintext %v, want %s %v", tc.name, s.target, s.creds == nil, tc.target, tc.plaintext)
		}
	}
}

func TestClosedServiceRefuses(t *testing.T) {
	s := New(nil)
	s.Use(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}, nil)
	if _, err := s.client(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.client(); err != ErrClosed {
		t.Fatalf("after Close: %v", err)
	}
}

// The caller's token travels, nothing else of its metadata does, and the
// call is marked as relayed.
func TestAsCaller(t *testing.T) {
	in := metadata.NewIncomingContext(context.Background(), metadata.Pairs(
		rpctypes.TokenFieldNameGRPC, "tok", rpctypes.TokenFieldNameSwagger, "Bearer jwt", "other", "x"))
	md, _ := metadata.FromOutgoingContext(asCaller(in))
	if got := md.Get(rpctypes.TokenFieldNameGRPC); len(got) != 1 || got[0] != "tok" {
		t.Errorf("token: %v", got)
	}
	if got := md.Get(rpctypes.TokenFieldNameSwagger); len(got) != 1 || got[0] != "Bearer jwt" {
		t.Errorf("authorization: %v", got)
	}
	if len(md.Get("other")) != 0 || len(md.Get(authz.RelayedMetadataKey)) != 1 {
		t.Errorf("metadata: %v", md)
	}
	md, _ = metadata.FromOutgoingContext(asCaller(context.Background()))
	if len(md) != 1 {
		t.Errorf("no caller metadata: %v", md)
	}
}
