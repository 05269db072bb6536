package server

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// A publish refused because the applier is far behind retries every 100 ms
// however long it has been failing; other failures double the wait up to
// 2 s.
func TestNextPublishBackoff(t *testing.T) {
	tooMany := fmt.Errorf("publish: %w", rpctypes.ErrGRPCRequestTooManyRequests)
	for _, c := range []struct {
		cur  time.Duration
		err  error
		want time.Duration
	}{
		{100 * time.Millisecond, context.DeadlineExceeded, 200 * time.Millisecond},
		{time.Second, errors.New("no leader"), 2 * time.Second},
		{2 * time.Second, rpctypes.ErrGRPCTimeout, 2 * time.Second},
		{2 * time.Second, tooMany, 100 * time.Millisecond},
		{100 * time.Millisecond, rpctypes.ErrGRPCRequestTooManyRequests, 100 * time.Millisecond},
	} {
		if got := nextPublishBackoff(c.cur, c.err); got != c.want {
			t.Errorf("after %v, failing with %v: wait %v, want %v", c.cur, c.err, got, c.want)
		}
	}
}

func TestPublishReason(t *testing.T) {
	if r := publishReason(0, errors.New("x")); r != "no leader: waiting for a quorum of members to elect one" {
		t.Errorf("no leader: %q", r)
	}
	if r := publishReason(0xab, context.DeadlineExceeded); r != "leader ab did not commit the request in time" {
		t.Errorf("deadline: %q", r)
	}
	if r := publishReason(0xab, errors.New("refused")); r != "refused" {
		t.Errorf("other: %q", r)
	}
}
