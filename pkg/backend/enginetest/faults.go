package enginetest

import (
	"errors"
	"sync/atomic"

	"github.com/kvd-dev/kvd/pkg/backend"
)

// ErrInjected is what a KeyDeleteFaults backend's failing deletes return.
var ErrInjected = errors.New("enginetest: injected delete failure")

// KeyDeleteFaults wraps a backend so that, while Fail is set, every Delete
// in the Key bucket fails with ErrInjected (and its Update with it). Only a
// physical compaction deletes there, so it makes compactions fail.
type KeyDeleteFaults struct {
	backend.Backend
	Fail *atomic.Bool
}

// Update implements backend.Backend.
func (f KeyDeleteFaults) Update(fn func(backend.WriteTx) error) error {
	return f.Backend.Update(func(tx backend.WriteTx) error {
		if f.Fail.Load() {
			tx = keyDeleteFaultTx{tx}
		}
		return fn(tx)
	})
}

type keyDeleteFaultTx struct{ backend.WriteTx }

func (t keyDeleteFaultTx) Delete(b backend.Bucket, k []byte) error {
	if b == backend.Key {
		return ErrInjected
	}
	return t.WriteTx.Delete(b, k)
}
