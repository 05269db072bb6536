//go:build failpoints

package failpoint

import "testing"

func TestParse(t *testing.T) {
	ps, err := parse("wal-after-write=kill@3, backend-before-commit=panic")
	if err != nil {
		t.Fatal(err)
	}
	if p := ps[WALAfterWrite]; p == nil || p.action != "kill" || p.at != 3 {
		t.Fatalf("wal-after-write: %+v", p)
	}
	if p := ps[BackendBeforeCommit]; p == nil || p.action != "panic" || p.at != 1 {
		t.Fatalf("backend-before-commit: %+v", p)
	}
	for _, bad := range []string{"nope=kill", "wal-after-write", "wal-after-write=exit", "wal-after-write=kill@0", "wal-after-write=kill@x"} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse(%q) accepted", bad)
		}
	}
}

func TestPanicOnNthHit(t *testing.T) {
	points = map[string]*point{WALAfterSync: {action: "panic", at: 2}}
	defer func() { points = map[string]*point{} }()
	Hit(WALAfterSync)
	defer func() {
		if recover() == nil {
			t.Fatal("second hit did not panic")
		}
	}()
	Hit(WALAfterSync)
}
