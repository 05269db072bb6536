package bolt

import (
	"testing"

	"github.com/kvd-dev/kvd/pkg/backend/internal/defrag"

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
			SetHook: func(fn func(string) error) { defrag.Hook = fn },
			SetJournalLimit: func(n int64) func() {
				defrag.JournalLimit = n
				return func() { defrag.JournalLimit = defrag.JournalMax }
			},
			SetCopyPause: func(p float64) func() {
				defrag.Pause = p
				return func() { defrag.Pause = defrag.CopyPause }
			},
		})
}
