package server

import (
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/alarms"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// newAlarms loads the raised alarms from the backend.
func newAlarms(st *mvcc.Store, lg *zap.Logger) (*alarms.Store, error) {
	as := alarms.New()
	if err := as.Load(st.AlarmRecords); err != nil {
		return nil, err
	}
	for _, a := range as.Get(0) {
		lg.Warn("alarm raised", zap.Stringer("alarm", a.Alarm), zap.String("member", membership.HexID(a.MemberID)))
	}
	return as, nil
}

// newQuota is the backend quota (quota-backend-bytes) over the store's
// current engine, logged as etcd does at start.
func newQuota(c *config.Config, st *mvcc.Store, lg *zap.Logger) *alarms.Quota {
	q := alarms.NewQuota(c.QuotaBackendBytes, func() int64 { return st.Backend().Size() })
	switch {
	case q.Limit < 0:
		lg.Info("disabled backend quota", zap.Int64("quota-size-bytes", q.Limit))
	case q.Limit > alarms.MaxQuotaBytes:
		lg.Warn("quota exceeds the maximum value", zap.Int64("quota-size-bytes", q.Limit), zap.Int64("quota-maximum-size-bytes", alarms.MaxQuotaBytes))
		fallthrough
	default:
		lg.Info("enabled backend quota", zap.Int64("quota-size-bytes", q.Limit))
	}
	return q
}
