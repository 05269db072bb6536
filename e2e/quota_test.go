package e2e

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// quotaBytes is small so the store fills in a second or two; etcd has no
// minimum quota.
const quotaBytes = 8 << 20

// TestQuotaNoSpace fills a member started with a small quota-backend-bytes
// until it refuses writes, then follows etcd's recovery procedure (delete,
// compact, defragment, alarm disarm), restarting the member while the alarm
// is raised. The same scenario runs against etcd v3.7.3 and kvd on both
// engines; what clients and etcdctl see must be the same.
func TestQuotaNoSpace(t *testing.T) {
	bin := harness.EtcdctlBinary(t)
	args := []string{"--quota-backend-bytes", fmt.Sprint(quotaBytes)}
	var want []string
	t.Run("etcd", func(t *testing.T) {
		want = quotaScenario(t, bin, harness.StartEtcd(t, harness.Options{Args: args}))
	})
	if want == nil {
		t.Fatal("reference scenario did not complete")
	}
	t.Logf("etcd's answers:\n%s", strings.Join(want, "\n"))
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			got := quotaScenario(t, bin, harness.StartKVD(t, harness.Options{Engine: engine, Args: args}))
			if got == nil {
				return
			}
			for i := range max(len(got), len(want)) {
				var g, w string
				if i < len(got) {
					g = got[i]
				}
				if i < len(want) {
					w = want[i]
				}
				if g != w {
					t.Errorf("step %d differs:\n etcd: %s\n %s: %s", i, w, engine, g)
				}
			}
		})
	}
}

// spacesRe collapses the protobuf text format's randomised spacing.
var spacesRe = regexp.MustCompile(`\s+`)

// quotaScenario runs the scenario and returns its observations, normalised
// (member ids masked), or nil when it failed.
func quotaScenario(t *testing.T, bin string, p *harness.Process) []string {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cli := p.Client(t)
	tg := newCtlTarget(t, p)
	var obs []string
	note := func(format string, a ...any) {
		s := fmt.Sprintf(format, a...)
		obs = append(obs, strings.TrimSpace(spacesRe.ReplaceAllString(tg.replacer.Replace(s), " ")))
	}
	errStr := func(err error) string {
		if err == nil {
			return "ok"
		}
		code, msg := errCodeMsg(err)
		return fmt.Sprintf("(%v) %s", code, msg)
	}
	ctlOut := func(args ...string) string {
		r := tg.run(bin, ctl(args...))
		return fmt.Sprintf("exit %d: %s%s", r.exit, r.stdout, r.stderr)
	}
	status := func() *clientv3.StatusResponse {
		st, err := cli.Status(ctx, p.Endpoint())
		mustOK(t, "status", err)
		return st
	}

	st := status()
	note("status quota %d errors %q", st.DbSizeQuota, st.Errors)

	// Fill: 128 KiB values until refused. Every acknowledged put is kept.
	value := bytes.Repeat([]byte("0123456789abcdef"), 8<<10)
	acked := map[string]bool{}
	var fillErr error
	start := time.Now()
	for i := 0; i < 16*quotaBytes/len(value); i++ {
		k := fmt.Sprintf("fill/%04d", i)
		if _, fillErr = cli.Put(ctx, k, string(value)); fillErr != nil {
			break
		}
		acked[k] = true
	}
	t.Logf("%s: %d puts acknowledged in %v, then %v", p.Label(), len(acked), time.Since(start), fillErr)
	if fillErr == nil {
		t.Errorf("no put refused after %d puts of %d bytes under a %d-byte quota", len(acked), len(value), quotaBytes)
		return nil
	}
	note("fill ends with %s", errStr(fillErr))
	if len(acked) == 0 {
		t.Errorf("the first put was refused")
		return nil
	}

	// Under NOSPACE: growth refused, everything else served.
	checkNoSpace := func(when string) {
		_, err := cli.Put(ctx, "small", "v")
		note("%s: small put: %s", when, errStr(err))
		_, err = cli.Txn(ctx).Then(clientv3.OpPut("small", "v")).Commit()
		note("%s: txn with a put: %s", when, errStr(err))
		_, err = cli.Txn(ctx).If(clientv3.Compare(clientv3.Version("nope"), ">", 0)).Else(clientv3.OpPut("small", "v")).Commit()
		note("%s: txn with a put in else: %s", when, errStr(err))
		_, err = cli.Grant(ctx, 60)
		note("%s: lease grant: %s", when, errStr(err))
		_, err = cli.Txn(ctx).Then(clientv3.OpDelete("nope"), clientv3.OpGet("fill/0000")).Commit()
		note("%s: txn without puts: %s", when, errStr(err))
		resp, err := cli.Get(ctx, "fill/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		note("%s: range: %s", when, errStr(err))
		if err == nil {
			got := 0
			for _, kv := range resp.Kvs {
				if acked[string(kv.Key)] {
					got++
				}
			}
			if got != len(acked) {
				t.Errorf("%s: %d of %d acknowledged keys present", when, got, len(acked))
			}
		}
		note("%s: etcdctl alarm list: %s", when, ctlOut("alarm", "list"))
		note("%s: status errors %q", when, status().Errors)
		note("%s: etcdctl put: %s", when, ctlOut("put", "small", "v"))
	}
	checkNoSpace("armed")

	// The alarm is replicated state: it survives a restart.
	p.Restart()
	cli = p.Client(t)
	checkNoSpace("after restart")

	// etcd's recovery: free space, compact, defragment, disarm.
	resp, err := cli.Delete(ctx, "fill/", clientv3.WithPrefix())
	note("delete: %s", errStr(err))
	// A put over the quota when applied is applied but answered "database
	// space exceeded" (etcd's quotaApplierV3): one more key may be there.
	if err == nil && int(resp.Deleted) < len(acked) {
		t.Errorf("deleted %d keys, acknowledged %d", resp.Deleted, len(acked))
	}
	if err == nil {
		_, err = cli.Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical())
		note("compact: %s", errStr(err))
	}
	_, err = cli.Defragment(ctx, p.Endpoint())
	note("defrag: %s", errStr(err))
	if size := status().DbSize; size >= quotaBytes {
		t.Errorf("db size %d after delete, compact and defrag; quota %d", size, quotaBytes)
	}
	note("etcdctl alarm disarm: %s", ctlOut("alarm", "disarm"))
	note("etcdctl alarm list: %s", ctlOut("alarm", "list"))
	note("status errors %q", status().Errors)
	_, err = cli.Put(ctx, "after", "v")
	note("put after disarm: %s", errStr(err))
	_, err = cli.Grant(ctx, 60)
	note("lease grant after disarm: %s", errStr(err))
	g, err := cli.Get(ctx, "after")
	note("get after disarm: %s %d", errStr(err), len(g.Kvs))

	// A deactivation of an alarm that is not raised answers no alarm;
	// raw ACTIVATE of NONE is ignored.
	mc := pb.NewMaintenanceClient(cli.ActiveConnection())
	ar, err := mc.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_DEACTIVATE, MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE})
	note("deactivate absent: %s %v", errStr(err), ar.GetAlarms())
	ar, err = mc.Alarm(ctx, &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NONE})
	note("activate NONE: %s %v", errStr(err), ar.GetAlarms())
	return obs
}
