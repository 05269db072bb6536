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
	t.Parallel()
	c := harness.StartCluster(t, 3, harness.ClusterOptions{Engine: "bolt"})
	members := c.Members()
	ctx := testCtx(t)
	admin := c.Client(t)
	_, err := admin.Put(ctx, "k", "before")
	mustOK(t, "put before the alarm", err)

	id := c.MemberID(t, members[1])
	activateNoSpace(t, ctx, admin, id)
	for _, p := range members {
		checkNoSpaceArmed(t, ctx, p.Name(), p, id, "before")
	}

	members[2].Restart()
	checkNoSpaceArmed(t, ctx, members[2].Name()+" restarted", members[2], id, "before")
	added := c.AddMember(t, "m-added", false)
	checkNoSpaceArmed(t, ctx, "added member", added, id, "before")

	disarmNoSpace(t, ctx, admin, id, append(members, added))
}

// activateNoSpace raises NOSPACE for member id through cli.
func activateNoSpace(t *testing.T, ctx context.Context, cli *clientv3.Client, id uint64) {
	t.Helper()
	_, err := pb.NewMaintenanceClient(cli.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
		Action: pb.AlarmRequest_ACTIVATE, MemberID: id, Alarm: pb.AlarmType_NOSPACE,
	})
	mustOK(t, "activate NOSPACE", err)
}

// checkNoSpaceArmed asserts, through a client on p alone, that p lists
// exactly NOSPACE of member id (waiting for it), refuses a put of k with
// etcd's error and still serves k, whose value is want.
func checkNoSpaceArmed(t *testing.T, ctx context.Context, what string, p *harness.Process, id uint64, want string) {
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
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != want {
		t.Errorf("%s: get k: %v %v, want %s", what, resp, err, want)
	}
}

// disarmNoSpace clears NOSPACE of member id through admin and waits until a
// put through each of members succeeds.
func disarmNoSpace(t *testing.T, ctx context.Context, admin *clientv3.Client, id uint64, members []*harness.Process) {
	t.Helper()
	_, err := admin.AlarmDisarm(ctx, &clientv3.AlarmMember{MemberID: id, Alarm: pb.AlarmType_NOSPACE})
	mustOK(t, "disarm", err)
	for _, p := range members {
		cli := p.Client(t)
		eventually(t, p.Name()+": put after disarm", 10*time.Second, func() error {
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err := cli.Put(pctx, "k-"+p.Name(), "after")
			return err
		})
	}
}
