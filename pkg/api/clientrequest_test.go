package api

import (
	"context"
	"errors"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/metadata"
)

// clientRequest counts each call by its client-api-version ("unknown"
// without one) and refuses a version that is not UTF-8, with etcd's error.
func TestClientRequestCountsAndRefusesBadVersion(t *testing.T) {
	type call struct {
		stream  bool
		version string
	}
	var got []call
	s := &Server{Deps: Deps{ClientRequests: func(stream bool, v string) { got = append(got, call{stream, v}) }}}
	withVersion := func(v string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(rpctypes.MetadataClientAPIVersionKey, v))
	}
	if err := s.clientRequest(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if err := s.clientRequest(withVersion("3.7"), true); err != nil {
		t.Fatal(err)
	}
	if err := s.clientRequest(withVersion("\xff"), false); !errors.Is(err, rpctypes.ErrGRPCInvalidClientAPIVersion) {
		t.Fatalf("a version that is not UTF-8: %v, want %v", err, rpctypes.ErrGRPCInvalidClientAPIVersion)
	}
	want := []call{{false, "unknown"}, {true, "3.7"}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("counted %v, want %v (the refused call not counted)", got, want)
	}
}
