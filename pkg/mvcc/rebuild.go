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

// IndexBuilder builds the key index from the records of the Key bucket, in
// the bucket's (revision) order, as a restart's scan or a snapshot being
// loaded yields them. Decoding runs on the caller's goroutine and inserting
// into the index on another, as etcd's restore does: on two cores the
// rebuild pays for the slower of the two instead of both. A snapshot install
// hands what it built to Reset, which then need not scan the new backend.
//
// A key's first revision may follow compacted ones: the KeyValue carries the
// generation's create revision and version. A tombstone first is one
// compaction kept (at the compaction revision) or one an unfinished
// compaction has not reached yet; it is restored as a deleted key so watches
// and the resumed compaction see it, as etcd does.
type IndexBuilder struct {
	idx     *index.Index
	current int64
	chunks  chan []restoredRev
	built   chan struct{}
	kv      mvccpb.KeyValue
	chunk   []restoredRev
	arena   []byte
	err     error
	done    bool
}

// BuiltIndex is a finished IndexBuilder's index and the newest revision it
// saw.
type BuiltIndex struct {
	idx     *index.Index
	current int64
	// written is the backend state an index file was written for: restore
	// uses the index only if the backend is still there (nil: built from
	// the backend being opened).
	written *indexMeta
}

// Keys is how many keys the index holds, deleted ones included.
func (b *BuiltIndex) Keys() int { return b.idx.Len() }

// NewIndexBuilder starts a builder; Finish or Abort ends its goroutine.
func NewIndexBuilder() *IndexBuilder {
	b := &IndexBuilder{idx: index.New(), current: 1, chunks: make(chan []restoredRev, 4), built: make(chan struct{})}
	go func() {
		defer close(b.built)
		for chunk := range b.chunks {
			for _, r := range chunk {
				if r.tomb {
					b.idx.RestoreTombstone(r.key, r.rev)
				} else {
					// Restore appends a put when the key is already indexed.
					b.idx.Restore(r.key, index.Revision{Main: r.created}, r.rev, r.ver)
				}
			}
		}
	}()
	return b
}

// Add takes the next record of the Key bucket. k and v are not kept.
func (b *IndexBuilder) Add(k, v []byte) error {
	if b.err != nil {
		return b.err
	}
	rev, tomb, err := bytesToRev(k)
	if err == nil && (rev.Sub < 0 || rev.Sub > index.MaxSub) {
		err = fmt.Errorf("revision %v: sub revision out of range", rev)
	}
	if err == nil {
		// kv aliases v: the key is copied into the chunk's arena, the rest
		// is not kept.
		if err = decodeKV(v, &b.kv); err != nil {
			err = fmt.Errorf("unmarshal key value at %v: %w", rev, err)
		}
	}
	if err != nil {
		b.err = fmt.Errorf("rebuild index: %w", err)
		return b.err
	}
	b.current = max(b.current, rev.Main)
	key := b.kv.Key
	if b.chunk == nil {
		b.chunk = make([]restoredRev, 0, rebuildChunk)
	}
	if cap(b.arena)-len(b.arena) < len(key) {
		b.arena = make([]byte, 0, max(64*rebuildChunk, len(key)))
	}
	b.arena = append(b.arena, key...)
	key = b.arena[len(b.arena)-len(key) : len(b.arena) : len(b.arena)]
	b.chunk = append(b.chunk, restoredRev{key: key, rev: rev, created: b.kv.CreateRevision, ver: b.kv.Version, tomb: tomb})
	if len(b.chunk) == rebuildChunk {
		b.chunks <- b.chunk
		b.chunk = nil
	}
	return nil
}

// Finish waits for the index and returns it, or the first error of Add.
func (b *IndexBuilder) Finish() (*BuiltIndex, error) {
	if !b.done && b.err == nil && len(b.chunk) > 0 {
		b.chunks <- b.chunk
		b.chunk = nil
	}
	b.Abort()
	if b.err != nil {
		return nil, b.err
	}
	return &BuiltIndex{idx: b.idx, current: b.current}, nil
}

// Abort ends the builder's goroutine; what it built is dropped.
func (b *IndexBuilder) Abort() {
	if !b.done {
		b.done = true
		close(b.chunks)
		<-b.built
	}
}

// rebuildIndex builds the index from the Key bucket of tx.
func rebuildIndex(tx backend.ReadTx) (*BuiltIndex, error) {
	b := NewIndexBuilder()
	var addErr error
	err := tx.Range(backend.Key, nil, nil, 0, func(k, v []byte) bool {
		addErr = b.Add(k, v)
		return addErr == nil
	})
	if err == nil {
		err = addErr
	}
	if err != nil {
		b.Abort()
		return nil, fmt.Errorf("open mvcc store: rebuild index: %w", err)
	}
	return b.Finish()
}
