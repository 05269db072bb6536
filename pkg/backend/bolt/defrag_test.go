package bolt

import (
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/backendtest"
)

func TestDefragOnline(t *testing.T) {
	backendtest.RunDefragOnline(t,
		func(t *testing.T, dir string) backend.Backend {
			be, err := Open(backend.Options{Dir: dir}, Options{})
			if err != nil {
				t.Fatalf("open bolt: %v", err)
			}
			return be
		},
		backendtest.DefragHooks{
			SetHook: func(fn func(string) error) { defragHook = fn },
			SetJournalLimit: func(n int64) func() {
				journalLimit = n
				return func() { journalLimit = defragJournalMax }
			},
			SetCopyPause: func(p float64) func() {
				copyPause = p
				return func() { copyPause = defragCopyPause }
			},
		})
}
