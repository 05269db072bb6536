package apply

import (
	"fmt"
	"reflect"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.uber.org/zap"
	"google.golang.org/protobuf/proto"
)

// warnIfSlow logs an apply that took longer than warning-apply-duration
// the way etcd's WarnOfExpensiveRequest does: "apply request took too
// long" with took, expected-duration, prefix, request (etcd's loggable
// form, values of puts redacted), response size and error.
func (a *Applier) warnIfSlow(start time.Time, req *pb.InternalRaftRequest, res *Result) {
	took := time.Since(start)
	if took <= a.cfg.WarningApplyDuration {
		return
	}
	var resp string
	if m := res.Resp; m != nil && !reflect.ValueOf(m).IsNil() {
		resp = fmt.Sprintf("size:%d", proto.Size(m))
	}
	a.lg.Warn("apply request took too long",
		zap.Duration("took", took),
		zap.Duration("expected-duration", a.cfg.WarningApplyDuration),
		zap.String("prefix", ""),
		zap.String("request", (&pb.InternalRaftStringer{Request: req}).String()),
		zap.String("response", resp),
		zap.Error(res.Err),
	)
}
