package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestSigtermIsClean: SIGTERM stops kvd with exit status 0, and the member
// restarts on its data with every write in place.
func TestSigtermIsClean(t *testing.T) {
	if harness.Kind() != harness.KindKVD {
		t.Skip("kvd's own shutdown")
	}
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			p := harness.StartKVD(t, harness.Options{Engine: engine})
			put, err := p.Client(t).Put(context.Background(), "k", "v")
			if err != nil {
				t.Fatal(err)
			}
			p.Stop()
			// The harness reports every exit, a clean one as "exit status 0".
			if exited, err := p.Exited(); !exited || err == nil || err.Error() != "exit status 0" {
				t.Fatalf("after SIGTERM: exited=%v, status %v; want a clean exit 0\n%s", exited, err, p.LogTail(20))
			}
			p.Restart()
			got, err := p.Client(t).Get(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Kvs) != 1 || got.Kvs[0].ModRevision != put.Header.Revision {
				t.Fatalf("after restart: %v, want k at revision %d", got.Kvs, put.Header.Revision)
			}
		})
	}
}

func TestVersionFlag(t *testing.T) {
	out, err := exec.Command(harness.KVDBinary(t), "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("kvd --version: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "kvd Version:") || !strings.Contains(string(out), "etcd API Version: 3.7.3") {
		t.Fatalf("kvd --version printed:\n%s", out)
	}
}

// TestIndexFileAcrossRestarts: a clean stop leaves the key index in
// member/snap/<engine>.index and the next start serves from it (the same
// keys, revisions, history and compaction as before) and removes it; after
// kill -9 there is no file and the start rebuilds, the last write there.
func TestIndexFileAcrossRestarts(t *testing.T) {
	if harness.Kind() != harness.KindKVD {
		t.Skip("kvd's own index file")
	}
	ctx := context.Background()
	for _, engine := range harness.Engines() {
		t.Run(engine, func(t *testing.T) {
			p := harness.StartKVD(t, harness.Options{Engine: engine})
			cli := p.Client(t)
			for i := range 300 {
				if _, err := cli.Put(ctx, fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i)); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := cli.Delete(ctx, "k000", clientv3.WithRange("k050")); err != nil {
				t.Fatal(err)
			}
			for i := 100; i < 150; i++ {
				if _, err := cli.Put(ctx, fmt.Sprintf("k%03d", i), "again"); err != nil {
					t.Fatal(err)
				}
			}
			mid, err := cli.Put(ctx, "k299", "last before the compaction")
			if err != nil {
				t.Fatal(err)
			}
			compactAt := mid.Header.Revision - 20
			if _, err := cli.Compact(ctx, compactAt, clientv3.WithCompactPhysical()); err != nil {
				t.Fatal(err)
			}
			for i := 200; i < 220; i++ {
				if _, err := cli.Delete(ctx, fmt.Sprintf("k%03d", i)); err != nil {
					t.Fatal(err)
				}
			}
			now := readKeys(t, cli, 0)
			past := readKeys(t, cli, compactAt)

			indexFile := filepath.Join(p.DataDir(), "member", "snap", engine+".index")
			p.Stop()
			if _, err := os.Stat(indexFile); err != nil {
				t.Fatalf("after a clean stop: %v\n%s", err, p.LogTail(20))
			}
			p.Restart()
			if !p.LastRunLogContains(`"index-from-file":true`) {
				t.Fatalf("the start after a clean stop did not use the index file\n%s", p.LogTail(30))
			}
			if _, err := os.Stat(indexFile); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("index file after the start: %v, want it removed", err)
			}
			cli = p.Client(t)
			if got := readKeys(t, cli, 0); got != now {
				t.Fatalf("after restart from the index file:\n%s\nwant\n%s", got, now)
			}
			if got := readKeys(t, cli, compactAt); got != past {
				t.Fatalf("at revision %d after restart from the index file:\n%s\nwant\n%s", compactAt, got, past)
			}
			if _, err := cli.Get(ctx, "k", clientv3.WithPrefix(), clientv3.WithRev(compactAt-1)); !errors.Is(err, rpctypes.ErrCompacted) {
				t.Fatalf("read below the compaction after restart: %v, want %v", err, rpctypes.ErrCompacted)
			}

			if _, err := cli.Put(ctx, "k300", "after the index file"); err != nil {
				t.Fatal(err)
			}
			want := readKeys(t, cli, 0)
			p.Kill()
			p.Restart()
			if !p.LastRunLogContains(`"index-from-file":false`) {
				t.Fatalf("the start after kill -9 did not rebuild the index\n%s", p.LogTail(30))
			}
			cli = p.Client(t)
			if got := readKeys(t, cli, 0); got != want {
				t.Fatalf("after kill -9 and a rebuild:\n%s\nwant\n%s", got, want)
			}
		})
	}
}

// readKeys lists every key under "k" at rev (0: the newest) with its
// revisions, version and value, one line each.
func readKeys(t *testing.T, cli *clientv3.Client, rev int64) string {
	t.Helper()
	resp, err := cli.Get(context.Background(), "k", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatalf("get at revision %d: %v", rev, err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "count %d\n", resp.Count)
	for _, kv := range resp.Kvs {
		fmt.Fprintf(&b, "%s create %d mod %d version %d %q\n", kv.Key, kv.CreateRevision, kv.ModRevision, kv.Version, kv.Value)
	}
	return b.String()
}
