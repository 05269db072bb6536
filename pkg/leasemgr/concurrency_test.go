package leasemgr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// The applier, the API and the expirer use a manager at once (run with
// -race): every call stays consistent with the leases that exist.
func TestConcurrentUse(t *testing.T) {
	m := New(Config{MinTTL: 1, RetryInterval: time.Millisecond})
	m.Promote(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	// The applier: grants, attaches, revokes.
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer cancel()
		for i := range 2000 {
			id := int64(i%50 + 1)
			if _, err := m.Grant(id, 1); err != nil && !errors.Is(err, ErrExists) {
				errc <- err
				return
			}
			m.Attach([]*mvccpb.Event{put(fmt.Sprint("k", i%200), id), del(fmt.Sprint("k", (i+7)%200))})
			if i%3 == 0 {
				keys, err := m.Revoke(int64((i+25)%50 + 1))
				if err != nil && !errors.Is(err, ErrNotFound) {
					errc <- err
					return
				}
				for _, k := range keys {
					if m.LeaseOf([]byte(k)) != 0 {
						errc <- fmt.Errorf("key %s still attached after its lease was revoked", k)
						return
					}
				}
			}
		}
	}()
	// The API and the expirer.
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				id := int64((i*7+w)%50 + 1)
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Millisecond)
				_, err := m.Renew(rctx, id)
				rcancel()
				if err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					errc <- err
					return
				}
				if st, err := m.TimeToLive(id, true); err == nil && st.GrantedTTL != 1 {
					errc <- fmt.Errorf("lease %d granted TTL %d", id, st.GrantedTTL)
					return
				}
				m.Leases()
				m.Expired(10)
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}
}
