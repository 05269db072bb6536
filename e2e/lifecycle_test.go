package e2e

import (
	"context"
	"os/exec"
	"strings"
	"testing"

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
