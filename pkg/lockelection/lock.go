package lockelection

import (
	"context"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/kvd-dev/kvd/pkg/lockelection/v3lockpb"
)

// lockServer is etcd's v3lock server.
type lockServer struct {
	v3lockpb.UnsafeLockServer
	s *Service
}

// Lock waits until the caller holds the lock name: a key under name/ on the
// request's lease (a new 60 s lease when it names none, never kept alive),
// as concurrency.Mutex takes it.
func (ls *lockServer) Lock(ctx context.Context, req *v3lockpb.LockRequest) (*v3lockpb.LockResponse, error) {
	ctx = asCaller(ctx)
	s, err := ls.s.session(ctx, req.Lease)
	if err != nil {
		return nil, err
	}
	m := concurrency.NewMutex(s, string(req.Name))
	if err := m.Lock(ctx); err != nil {
		return nil, err
	}
	return &v3lockpb.LockResponse{Header: m.Header(), Key: []byte(m.Key())}, nil
}

// Unlock deletes the lock's key.
func (ls *lockServer) Unlock(ctx context.Context, req *v3lockpb.UnlockRequest) (*v3lockpb.UnlockResponse, error) {
	c, err := ls.s.client()
	if err != nil {
		return nil, err
	}
	resp, err := c.Delete(asCaller(ctx), string(req.Key))
	if err != nil {
		return nil, err
	}
	return &v3lockpb.UnlockResponse{Header: resp.Header}, nil
}
