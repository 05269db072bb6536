package mvcc

import (
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

// rebuildChunk is how many revisions the reader hands the index builder at
// a time.
const rebuildChunk = 1024

// restoredRev is one revision of the Key bucket as the index needs it.
type restoredRev struct {
	key          []byte // in its chunk's arena
	rev          index.Revision
	created, ver int64
	tomb         bool
}

// rebuildIndex fills idx from the Key bucket of tx and returns the newest
// revision it holds (at least 1). Reading and decoding the bucket runs on
// this goroutine and inserting into the index on another, as etcd's restore
// does: on two cores a restart or snapshot install pays for the slower of
// the two instead of both.
//
// The bucket is in revision order, so each key's revisions arrive in order.
// A key's first revision may follow compacted ones: the KeyValue carries the
// generation's create revision and version. A tombstone first is one
// compaction kept (at the compaction revision) or one an unfinished
// compaction has not reached yet; it is restored as a deleted key so watches
// and the resumed compaction see it, as etcd does.
func rebuildIndex(tx backend.ReadTx, idx *index.Index) (int64, error) {
	chunks := make(chan []restoredRev, 4)
	built := make(chan struct{})
	go func() {
		defer close(built)
		for chunk := range chunks {
			for _, r := range chunk {
				if r.tomb {
					idx.RestoreTombstone(r.key, r.rev)
				} else {
					// Restore appends a put when the key is already indexed.
					idx.Restore(r.key, index.Revision{Main: r.created}, r.rev, r.ver)
				}
			}
		}
	}()
	current := int64(1)
	var (
		kv       mvccpb.KeyValue
		rangeErr error
		chunk    []restoredRev
		arena    []byte
	)
	flush := func() {
		if len(chunk) > 0 {
			chunks <- chunk
			chunk, arena = nil, nil
		}
	}
	err := tx.Range(backend.Key, nil, nil, 0, func(k, v []byte) bool {
		rev, tomb, err := bytesToRev(k)
		if err != nil {
			rangeErr = err
			return false
		}
		// kv aliases v, which is valid only during this call: the key is
		// copied into the chunk's arena, the rest is not kept.
		if err := decodeKV(v, &kv); err != nil {
			rangeErr = fmt.Errorf("unmarshal key value at %v: %w", rev, err)
			return false
		}
		current = max(current, rev.Main)
		if chunk == nil {
			chunk = make([]restoredRev, 0, rebuildChunk)
			arena = make([]byte, 0, 64*rebuildChunk)
		}
		if cap(arena)-len(arena) < len(kv.Key) {
			arena = make([]byte, 0, max(64*rebuildChunk, len(kv.Key)))
		}
		arena = append(arena, kv.Key...)
		key := arena[len(arena)-len(kv.Key) : len(arena) : len(arena)]
		chunk = append(chunk, restoredRev{key: key, rev: rev, created: kv.CreateRevision, ver: kv.Version, tomb: tomb})
		if len(chunk) == rebuildChunk {
			flush()
		}
		return true
	})
	flush()
	close(chunks)
	<-built
	if err == nil {
		err = rangeErr
	}
	if err != nil {
		return 0, fmt.Errorf("open mvcc store: rebuild index: %w", err)
	}
	return current, nil
}
