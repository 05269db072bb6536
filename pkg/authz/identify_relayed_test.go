package authz

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"testing"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// A certificate names its user unless the request was relayed by a gateway
// or by the member's own lock and election client.
func TestCertUserIgnoresRelayed(t *testing.T) {
	cert := &x509.Certificate{Subject: pkix.Name{CommonName: "alice"}}
	ctx := peer.NewContext(context.Background(), &peer.Peer{AuthInfo: credentials.TLSInfo{
		State: tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{cert}}}}})
	if got := certUser(ctx, 3); got.User != "alice" {
		t.Fatalf("direct: %+v", got)
	}
	for _, key := range []string{"grpcgateway-accept", RelayedMetadataKey} {
		rctx := metadata.NewIncomingContext(ctx, metadata.Pairs(key, "1"))
		if got := certUser(rctx, 3); !got.Anonymous() {
			t.Errorf("%s: %+v, want anonymous", key, got)
		}
	}
}
