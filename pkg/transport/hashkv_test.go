package transport

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A peer answers HashKV through its Config.HashKV, for its own cluster
// only; without the callback it refuses.
func TestFetchHashKV(t *testing.T) {
	with := startMember(t, 1, 9, "", func(c *Config) {
		c.HashKV = func(req []byte) ([]byte, error) { return append([]byte("hash of "), req...), nil }
	})
	without := startMember(t, 2, 9, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := FetchHashKV(ctx, with.url, 9, nil, []byte("rev 3"))
	if err != nil || string(b) != "hash of rev 3" {
		t.Fatalf("fetch = %q, %v", b, err)
	}
	if _, err := FetchHashKV(ctx, with.url, 8, nil, []byte("rev 3")); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "cluster ID mismatch") {
		t.Fatalf("fetch from another cluster: %v", err)
	}
	if _, err := FetchHashKV(ctx, without.url, 9, nil, nil); status.Code(err) != codes.Unimplemented {
		t.Fatalf("fetch from a member without HashKV: %v", err)
	}
	if _, err := FetchHashKV(ctx, "ftp://x", 9, nil, nil); err == nil {
		t.Fatal("bad URL accepted")
	}
}
