package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestAlarmCluster: a NOSPACE alarm raised for one member of three is
// replicated state. Every member refuses puts and serves reads while it is
// armed and lists it; a restarted member and a member added afterwards list
// it and refuse puts too; a disarm lets every member write again.
func TestAlarmCluster(t *testing.T) {
	c := harness.StartCluster(t, 3, harness.ClusterOptions{Engine: "bolt"})
	members := c.Members()
	ctx := testCtx(t)
	admin := c.Client(t)
	_, err := admin.Put(ctx, "k", "before")
	mustOK(t, "put before the alarm", err)

	id := c.MemberID(t, members[1])
	_, err = pb.NewMaintenanceClient(admin.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: pb.AlarmType_NOSPACE,
	})
	mustOK(t, "activate NOSPACE", err)

	armed := func(what string, p *harness.Process) {
		t.Helper()
		cli := p.Client(t)
		eventually(t, what+": alarm listed", 10*time.Second, func() error {
			resp, err := cli.AlarmList(ctx)
			if err != nil {
				return err
			}
			if len(resp.Alarms) != 1 || resp.Alarms[0].MemberID != id || resp.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
				return fmt.Errorf("alarms %v, want NOSPACE of %x", resp.Alarms, id)
			}
			return nil
		})
		_, err := cli.Put(ctx, "k", "during")
		wantErr(t, what+": put", err, rpctypes.ErrNoSpace)
		resp, err := cli.Get(ctx, "k")
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "before" {
			t.Errorf("%s: get k: %v %v, want before", what, resp, err)
		}
	}
	for _, p := range members {
		armed(p.Name(), p)
	}

	members[2].Restart()
	armed(members[2].Name()+" restarted", members[2])
	added := c.AddMember(t, "m-added", false)
	armed("added member", added)

	_, err = admin.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: id, Alarm: pb.AlarmType_NOSPACE})
	mustOK(t, "disarm", err)
	for _, p := range append(members, added) {
		cli := p.Client(t)
		eventually(t, p.Name()+": put after disarm", 10*time.Second, func() error {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := cli.Put(pctx, "k-"+p.Name(), "after")
			return err
		})
	}
}
