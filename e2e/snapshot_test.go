package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestSnapshotSave: the unmodified etcdctl saves a snapshot of a bolt
// member, the checksum it wants is there, and the file is a bolt database
// holding every acknowledged write (the write-back buffer was flushed).
func TestSnapshotSave(t *testing.T) {
	p := harness.StartKVD(t, harness.Options{Engine: "bolt"})
	cli := p.Client(t)
	for _, k := range []string{"a", "b", "c"} {
		if _, err := cli.Put(context.Background(), k, "v-"+k); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "snap.db")
	out, err := exec.Command(harness.EtcdctlBinary(t), "--endpoints", p.Endpoint(), "snapshot", "save", path).CombinedOutput()
	if err != nil {
		t.Fatalf("etcdctl snapshot save: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("Snapshot saved at")) {
		t.Fatalf("etcdctl snapshot save said:\n%s", out)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(data)%512 != sha256.Size {
		t.Fatalf("snapshot of %d bytes: no sha256 trailer", len(data))
	}
	db, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if h := sha256.Sum256(db); !bytes.Equal(h[:], sum) {
		t.Fatal("snapshot checksum does not match its data")
	}
	dbPath := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(dbPath, db, 0o600); err != nil {
		t.Fatal(err)
	}
	bdb, err := bolt.Open(dbPath, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatalf("snapshot is not a bolt database: %v", err)
	}
	defer bdb.Close()
	var revs int
	if err := bdb.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		if b == nil {
			t.Fatal("no key bucket in the snapshot")
		}
		revs = b.Stats().KeyN
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if revs != 3 {
		t.Fatalf("snapshot holds %d revisions, want the 3 puts", revs)
	}
}
