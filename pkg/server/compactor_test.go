package server

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"go.uber.org/fx"
	"go.uber.org/goleak"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/enginetest"
)

// A physical compaction that fails in the backend stops the member as a
// failed actor does (exit code 1), and the client waiting for it gets an
// error at once instead of waiting for its deadline.
func TestCompactionFailureStopsMember(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			leaks := goleak.IgnoreCurrent()
			var fail atomic.Bool
			c := testConfig(t, engine, t.TempDir())
			m := startMember(t, c, fx.Decorate(func(be backend.Backend) backend.Backend {
				return enginetest.KeyDeleteFaults{Backend: be, Fail: &fail}
			}))
			var rev int64
			for i := range 20 {
				rev = put(t, m, fmt.Sprintf("k%d", i%3), "v").Header.Revision
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := m.kv.Compact(ctx, &pb.CompactionRequest{Revision: rev - 15, Physical: true}); err != nil {
				t.Fatalf("physical compact before the failure: %v", err)
			}
			fail.Store(true)
			start := time.Now()
			_, err := m.kv.Compact(ctx, &pb.CompactionRequest{Revision: rev - 5, Physical: true})
			if err == nil || rpctypes.ErrorDesc(err) != rpctypes.ErrorDesc(rpctypes.ErrGRPCStopped) {
				t.Fatalf("physical compact that fails = %v, want %v", err, rpctypes.ErrGRPCStopped)
			}
			if ctx.Err() != nil {
				t.Fatalf("physical compact returned only at its deadline (%v)", time.Since(start))
			}
			select {
			case sig := <-m.app.Wait():
				if sig.ExitCode != 1 {
					t.Fatalf("member stopped with exit code %d, want 1", sig.ExitCode)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("the member did not stop after the compaction failed")
			}
			m.stop()
			goleak.VerifyNone(t, leaks)
		})
	}
}
