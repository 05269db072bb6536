package e2e

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

const (
	// alarmSnapshotCount and alarmCatchupEntries make the leader snapshot
	// and truncate its raft log every hundred entries, keeping ten.
	alarmSnapshotCount  = 100
	alarmCatchupEntries = 10
	// alarmSnapshotDeletes is how many raft entries follow the alarm: far
	// past a snapshot plus the entries kept after it.
	alarmSnapshotDeletes = 4 * alarmSnapshotCount
)

// TestAlarmSnapshot: a member added after the leader's raft log was
// truncated past a NOSPACE alarm catches up from a raft snapshot, not from
// the log, and has the alarm from it: it lists NOSPACE of the same member,
// refuses puts with etcd's error and serves reads; a disarm lets every
// member, the new one too, write again. The new member's log must show it
// installed a snapshot at an index at or past the alarm's entry.
func TestAlarmSnapshot(t *testing.T) {
	t.Parallel()
	forEachClusterEngine(t, func(t *testing.T, engine string) {
		args := []string{"--snapshot-catchup-entries", strconv.Itoa(alarmCatchupEntries)}
		if harness.Kind() == harness.KindEtcd {
			// The harness runs etcd at warn; its snapshot receipt is
			// logged at info (the later flag wins).
			args = append(args, "--log-level", "info")
		}
		c := harness.StartCluster(t, 3, harness.ClusterOptions{
			Engine:        engine,
			SnapshotCount: alarmSnapshotCount,
			Args:          args,
		})
		members := c.Members()
		ctx := testCtx(t)
		admin := c.Client(t)
		_, err := admin.Put(ctx, "k", "before")
		mustOK(t, "put before the alarm", err)

		id := c.MemberID(t, members[1])
		activateNoSpace(t, ctx, admin, id)
		// The alarm's entry is at or below every raft index reported now
		// by the leader, so at or below the highest one reported.
		var alarmIndex uint64
		for _, p := range members {
			st, err := c.Status(p, 5*time.Second)
			mustOK(t, "status of "+p.Name(), err)
			alarmIndex = max(alarmIndex, st.RaftIndex)
		}

		// Puts are refused now; deletes of absent keys still go through
		// raft and move the leader's snapshots and log truncation on.
		deleteParallel(t, admin, "absent/", alarmSnapshotDeletes, 8)

		added := c.AddMember(t, "m3", false)
		snapIndex := installedSnapshotIndex(t, added)
		if snapIndex < alarmIndex {
			t.Fatalf("%s installed a snapshot at index %d, below the alarm's entry (<= %d): the alarm came from the log", added.Name(), snapIndex, alarmIndex)
		}
		// The senders' side too (etcd's metric, on the original members,
		// which AddMember never restarts; the new member's receive counter
		// restarts with it when AddMember unwedges an etcd member).
		addedID := strconv.FormatUint(c.MemberID(t, added), 16)
		sent := 0.0
		for _, p := range members {
			sent += max(0, plMetric(t, p.Endpoint(), "etcd_network_snapshot_send_success", "To", addedID))
		}
		if sent < 1 {
			t.Errorf("etcd_network_snapshot_send_success{To=%q} is %v over the original members, want >= 1", addedID, sent)
		}
		t.Logf("alarm at raft index <= %d, %s joined by a snapshot at index %d", alarmIndex, added.Name(), snapIndex)

		checkNoSpaceArmed(t, ctx, added.Name()+" (joined by snapshot)", added, id, "before")
		disarmNoSpace(t, ctx, admin, id, c.Members())
	})
}

// deleteParallel deletes n absent keys under prefix with the given number
// of concurrent clients' requests, each one raft entry.
func deleteParallel(t *testing.T, cli *clientv3.Client, prefix string, n, workers int) {
	t.Helper()
	ctx := testCtx(t)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := w; i < n; i += workers {
				if _, err := cli.Delete(ctx, fmt.Sprintf("%s%06d", prefix, i)); err != nil {
					errs <- fmt.Errorf("delete %s%06d: %w", prefix, i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		mustOK(t, "deletes", <-errs)
	}
}

// snapshotInstalledLine is the log line of a member that received the
// leader's snapshot (kvd: after installing it; etcd: after saving it,
// before applying it), and the index in it.
var snapshotInstalledLine = map[bool]*regexp.Regexp{
	false: regexp.MustCompile(`backend replaced by the leader's snapshot.*"index":\s*(\d+)`),
	true:  regexp.MustCompile(`received and saved database snapshot.*"incoming-snapshot-index":\s*(\d+)`),
}

// installedSnapshotIndex is the highest index of a raft snapshot p's logs
// (of every run) say it received; the test fails when there is none.
func installedSnapshotIndex(t *testing.T, p *harness.Process) uint64 {
	t.Helper()
	re := snapshotInstalledLine[p.IsEtcd()]
	var idx uint64
	found := false
	for _, l := range strings.Split(p.LogTail(1<<20), "\n") {
		m := re.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		v, err := strconv.ParseUint(m[1], 10, 64)
		mustOK(t, "snapshot index in "+strconv.Quote(l), err)
		idx, found = max(idx, v), true
	}
	if !found {
		t.Fatalf("%s: no raft snapshot received (no %q in its log)\n%s", p.Name(), re, p.LogTail(40))
	}
	return idx
}
