package datadir

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestIdentityRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "member", IdentityFile)
	if id, err := ReadIdentity(path); id != nil || err != nil {
		t.Fatalf("no file: got %v, %v", id, err)
	}
	want := Identity{ClusterID: "cdf818194e3a8c32", MemberID: "8e9e05c52164694d", Name: "n1", Bootstrap: "new", Token: "tok"}
	if err := WriteIdentity(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadIdentity(path)
	if err != nil || *got != want {
		t.Fatalf("got %+v, %v", got, err)
	}
	cid, mid, err := got.IDs()
	if err != nil || cid != 0xcdf818194e3a8c32 || mid != 0x8e9e05c52164694d {
		t.Fatalf("IDs %x %x %v", cid, mid, err)
	}
	if err := os.WriteFile(path, []byte(`{"cluster_id":"zz","member_id":"1"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadIdentity(path); err == nil {
		t.Fatal("a bad cluster ID must be an error")
	}
}

func TestLockExcludesOtherProcesses(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "d")
	l, err := Acquire(dir)
	if err != nil {
		t.Fatal(err)
	}
	// flock is per open file: a second Acquire in this process conflicts
	// too, as another process's would.
	if _, err := Acquire(dir); !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), "pid") {
		t.Fatalf("second Acquire: %v, want ErrInUse naming the pid", err)
	}
	// And a real other process (flock(1) from util-linux) sees it held.
	if flock, err := exec.LookPath("flock"); err == nil {
		if err := exec.Command(flock, "-n", filepath.Join(dir, LockFile), "true").Run(); err == nil {
			t.Error("another process took the lock while it was held")
		}
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	l2, err := Acquire(dir)
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}
