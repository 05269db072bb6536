package apply

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// Counter is what a slow request is counted on (a prometheus.Counter).
type Counter interface{ Inc() }

// SlowLog logs requests that took longer than warning-apply-duration the way
// etcd's WarnOfExpensiveRequest and its read-only forms do: "apply request
// took too long" with took, expected-duration, prefix, request, response and
// error; and counts each on etcd_server_slow_apply_total, which etcd counts
// for slow applies and slow read-only requests alike. A request that is not
// slow costs one time.Since and nothing else.
type SlowLog struct {
	Logger *zap.Logger
	// Limit is warning-apply-duration; 0 logs every request, as etcd.
	Limit time.Duration
	// Slow, if set, counts each slow request.
	Slow Counter
}

// Apply logs a slow apply: etcd's WarnOfExpensiveRequest (request in etcd's
// loggable form, values of puts redacted; response as its size).
func (l SlowLog) Apply(start time.Time, req *pb.InternalRaftRequest, res *Result) {
	took := time.Since(start)
	if took <= l.Limit {
		return
	}
	var resp string
	if !isNil(res.Resp) {
		resp = fmt.Sprintf("size:%d", proto.Size(res.Resp))
	}
	l.warn(took, "", &pb.InternalRaftStringer{Request: req}, resp, res.Err)
}

// ReadOnlyRange logs a slow Range served from this member: etcd's
// WarnOfExpensiveReadOnlyRangeRequest.
func (l SlowLog) ReadOnlyRange(start time.Time, req *pb.RangeRequest, r *pb.RangeResponse, err error) {
	took := time.Since(start)
	if took <= l.Limit {
		return
	}
	var resp string
	if r != nil {
		resp = fmt.Sprintf("range_response_count:%d size:%d", len(r.Kvs), proto.Size(r))
	}
	l.warn(took, "read-only range ", req, resp, err)
}

// ReadOnlyTxn logs a slow read-only Txn served from this member: etcd's
// WarnOfExpensiveReadOnlyTxnRequest.
func (l SlowLog) ReadOnlyTxn(start time.Time, req *pb.TxnRequest, r *pb.TxnResponse, err error) {
	took := time.Since(start)
	if took <= l.Limit {
		return
	}
	var resp string
	if r != nil {
		var resps []string
		for _, op := range r.Responses {
			if _, ok := op.Response.(*pb.ResponseOp_ResponseRange); !ok {
				continue // only ranges are in a read-only txn
			}
			if rr := op.GetResponseRange(); rr != nil {
				resps = append(resps, fmt.Sprintf("range_response_count:%d", len(rr.GetKvs())))
			} else {
				resps = append(resps, "range_response:nil")
			}
		}
		resp = fmt.Sprintf("responses:<%s> size:%d", strings.Join(resps, " "), proto.Size(r))
	}
	l.warn(took, "read-only txn ", pb.NewLoggableTxnRequest(req), resp, err)
}

func (l SlowLog) warn(took time.Duration, prefix string, req fmt.Stringer, resp string, err error) {
	l.Logger.Warn("apply request took too long",
		zap.Duration("took", took),
		zap.Duration("expected-duration", l.Limit),
		zap.String("prefix", prefix),
		zap.String("request", req.String()),
		zap.String("response", resp),
		zap.Error(err),
	)
	if l.Slow != nil {
		l.Slow.Inc()
	}
}

func isNil(m proto.Message) bool { return m == nil || reflect.ValueOf(m).IsNil() }
