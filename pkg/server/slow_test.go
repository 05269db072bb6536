package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kvd-dev/kvd/pkg/config"
)

// etcd_server_slow_apply_total counts the applies, Ranges and read-only
// Txns slower than warning-apply-duration, and
// etcd_server_slow_read_indexes_total is served, as etcd's.
func TestSlowRequestMetrics(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	c.WarningApplyDuration = config.Duration(time.Nanosecond)
	m := startMember(t, c)
	put(t, m, "k", "v")
	applies := metric(t, c, "etcd_server_slow_apply_total")
	if applies < 1 {
		t.Fatalf("etcd_server_slow_apply_total %v after a put slower than 1ns", applies)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := m.kv.Range(ctx, &pb.RangeRequest{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	rangeOp := &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: []byte("k")}}}
	if _, err := m.kv.Txn(ctx, &pb.TxnRequest{Success: []*pb.RequestOp{rangeOp}}); err != nil {
		t.Fatal(err)
	}
	if n := metric(t, c, "etcd_server_slow_apply_total"); n < applies+2 {
		t.Errorf("etcd_server_slow_apply_total %v after a Range and a read-only Txn, want at least %v", n, applies+2)
	}
	resp, err := http.Get(c.AdvertiseClientURLs + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	text, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(text), "\netcd_server_slow_read_indexes_total 0\n") {
		t.Error("/metrics lacks etcd_server_slow_read_indexes_total 0 on a healthy member")
	}
}
