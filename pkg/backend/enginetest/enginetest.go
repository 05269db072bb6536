// Package enginetest opens every storage engine for tests above the backend
// (mvcc, apply, watch hub, ...), so that each runs on bolt and on Badger with
// the same test-friendly options.
package enginetest

import (
	"fmt"
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/badger"
	"github.com/kvd-dev/kvd/pkg/backend/bolt"
)

// Names are the engines every storage-touching test runs on.
var Names = []string{"bolt", "badger"}

// Open opens engine in dir for a test: bolt without fsync (tests reopen
// after Close or a simulated crash of the process, not of the machine) and
// Badger with 4 MiB updates, whose small memtables open fast.
func Open(engine, dir string) (backend.Backend, error) {
	opts := backend.Options{Dir: dir}
	switch engine {
	case "bolt":
		return bolt.Open(opts, bolt.Options{NoSync: true})
	case "badger":
		return badger.Open(opts, badger.Options{MaxUpdateBytes: 4 << 20})
	}
	return nil, fmt.Errorf("enginetest: unknown engine %q", engine)
}

// OpenT opens engine in a fresh temporary directory, closed when the test
// ends.
func OpenT(t testing.TB, engine string) backend.Backend {
	t.Helper()
	be, err := Open(engine, t.TempDir())
	if err != nil {
		t.Fatalf("open %s: %v", engine, err)
	}
	t.Cleanup(func() { be.Close() })
	return be
}
