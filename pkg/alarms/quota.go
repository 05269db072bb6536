package alarms

import (
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// DefaultQuotaBytes and MaxQuotaBytes are etcd's: the quota when
// quota-backend-bytes is 0, and the size above which etcd warns that a
// quota may degrade performance.
const (
	DefaultQuotaBytes int64 = 2 << 30
	MaxQuotaBytes     int64 = 8 << 30
)

// etcd's cost estimates (storage/quota.go).
const (
	leaseOverhead = 64
	kvOverhead    = 256
)

// Cost is etcd's estimate of how much a request grows the backend: a put
// its key and value plus 256 bytes, a txn the costlier of its branches
// (nested txns included), a lease grant 64 bytes; 0 for anything else.
func Cost(req any) int {
	switch r := req.(type) {
	case *pb.PutRequest:
		return costPut(r)
	case *pb.TxnRequest:
		return costTxn(r)
	case *pb.LeaseGrantRequest:
		return leaseOverhead
	}
	return 0
}

func costPut(r *pb.PutRequest) int { return kvOverhead + len(r.Key) + len(r.Value) }

func costTxn(r *pb.TxnRequest) int {
	branch := func(ops []*pb.RequestOp) int {
		n := 0
		for _, op := range ops {
			if p := op.GetRequestPut(); p != nil {
				n += costPut(p)
			} else if t := op.GetRequestTxn(); t != nil {
				n += costTxn(t)
			}
		}
		return n
	}
	return max(branch(r.Success), branch(r.Failure))
}

// Quota is the backend quota (etcd's BackendQuota): a request fits when it
// costs nothing or the engine's size plus its cost stays under the limit.
type Quota struct {
	// Limit is the quota in bytes; negative: no quota (etcd's passthrough).
	Limit int64
	// Size is the backend's size on disk (backend.Backend.Size).
	Size func() int64

	// The size is asked at most every sizeTTL: bolt's opens a read
	// transaction, and every put asks.
	sizeAt atomic.Int64 // unix nanoseconds; 0: never
	size   atomic.Int64
}

// sizeTTL bounds how stale the size a quota check uses may be.
const sizeTTL = 10 * time.Millisecond

// NewQuota is etcd's NewBackendQuota: 0 means DefaultQuotaBytes, a negative
// quota disables the check.
func NewQuota(quotaBackendBytes int64, size func() int64) *Quota {
	if quotaBackendBytes == 0 {
		quotaBackendBytes = DefaultQuotaBytes
	}
	return &Quota{Limit: quotaBackendBytes, Size: size}
}

// Available reports whether req fits within the quota.
func (q *Quota) Available(req any) bool {
	if q == nil || q.Limit < 0 {
		return true
	}
	cost := Cost(req)
	if cost == 0 {
		return true
	}
	return q.currentSize()+int64(cost) < q.Limit
}

func (q *Quota) currentSize() int64 {
	now := time.Now().UnixNano()
	if at := q.sizeAt.Load(); at != 0 && now-at < int64(sizeTTL) {
		return q.size.Load()
	}
	n := q.Size()
	q.size.Store(n)
	q.sizeAt.Store(now)
	return n
}
