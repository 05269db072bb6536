package etcddb

import (
	"errors"
	"fmt"
	"os"

	bolt "go.etcd.io/bbolt"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// exportTxBytes bounds one bolt write transaction of Export: bolt keeps a
// transaction's dirty pages in memory until it commits.
const exportTxBytes = 16 << 20

// Export writes what tx sees as an etcd v3.7 bolt file at path, which must
// not exist. The file is not synced: it is a copy to send (Maintenance.
// Snapshot streams and removes it), and a copy to keep is synced by whoever
// keeps it. On error it is removed.
func Export(tx backend.ReadTx, path string) (err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	f.Close()
	// No fsync per transaction: one at the end. Like etcd, no freelist.
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("export: open %s: %w", path, err)
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("export: close %s: %w", path, cerr)
		}
		if err != nil {
			os.Remove(path)
		}
	}()
	w := &boltWriter{db: db}
	defer w.abort()
	if err := w.begin(); err != nil {
		return err
	}
	for _, b := range etcdBuckets {
		if _, err := w.tx.CreateBucketIfNotExists([]byte(b)); err != nil {
			return fmt.Errorf("export: create bucket %s: %w", b, err)
		}
	}
	for _, c := range []struct {
		from backend.Bucket
		to   string
	}{{backend.Key, bucketKey}, {backend.Lease, bucketLease}, {backend.Alarm, bucketAlarm}} {
		if err := w.copyBucket(tx, c.from, c.to); err != nil {
			return err
		}
	}
	if err := exportMeta(tx, w); err != nil {
		return err
	}
	if err := exportAuth(tx, w); err != nil {
		return err
	}
	if err := w.put(bucketCluster, []byte(etcdClusterVersion), []byte(StorageVersion)); err != nil {
		return err
	}
	return w.commit()
}

func exportMeta(tx backend.ReadTx, w *boltWriter) error {
	names := map[string]string{
		mvcc.MetaKeyConsistentIndex:  etcdMetaConsistentIndex,
		mvcc.MetaKeyConsistentTerm:   etcdMetaTerm,
		mvcc.MetaKeyScheduledCompact: mvcc.MetaKeyScheduledCompact,
		mvcc.MetaKeyFinishedCompact:  mvcc.MetaKeyFinishedCompact,
	}
	var werr error
	err := tx.Range(backend.Meta, nil, nil, 0, func(k, v []byte) bool {
		if name, ok := names[string(k)]; ok {
			werr = w.put(bucketMeta, []byte(name), v)
		}
		return werr == nil
	})
	if err = errors.Join(err, werr); err != nil {
		return fmt.Errorf("export: meta: %w", err)
	}
	if err := w.put(bucketMeta, []byte(etcdMetaStorageVersion), []byte(StorageVersion)); err != nil {
		return err
	}
	var ld membership.Loader
	err = tx.Range(backend.Members, nil, nil, 0, func(k, v []byte) bool {
		werr = ld.Add(string(k), v)
		return werr == nil
	})
	if err = errors.Join(err, werr); err != nil {
		return fmt.Errorf("export: members: %w", err)
	}
	return writeMembers(w, &ld)
}

// confState is raftpb.ConfState as etcd stores it in meta/confState (the
// JSON of its gogo-generated struct).
type confState struct {
	Voters         []uint64 `json:"voters,omitempty"`
	Learners       []uint64 `json:"learners,omitempty"`
	VotersOutgoing []uint64 `json:"voters_outgoing,omitempty"`
	LearnersNext   []uint64 `json:"learners_next,omitempty"`
	AutoLeave      bool     `json:"auto_leave"`
}

func exportAuth(tx backend.ReadTx, w *boltWriter) error {
	var werr error
	err := tx.Range(backend.Auth, nil, nil, 0, func(k, v []byte) bool {
		werr = writeAuthRecord(w, k, v)
		return werr == nil
	})
	if err = errors.Join(err, werr); err != nil {
		return fmt.Errorf("export: auth: %w", err)
	}
	return nil
}

// boltWriter writes into a bolt file in transactions of exportTxBytes.
type boltWriter struct {
	db    *bolt.DB
	tx    *bolt.Tx
	bytes int
}

func (w *boltWriter) begin() error {
	tx, err := w.db.Begin(true)
	if err != nil {
		return fmt.Errorf("export: begin: %w", err)
	}
	w.tx, w.bytes = tx, 0
	return nil
}

// put copies k and v: bolt keeps the slices it is given until the commit.
func (w *boltWriter) put(bucket string, k, v []byte) error {
	b := w.tx.Bucket([]byte(bucket))
	// Records arrive in key order: full pages, as a defragmented file.
	b.FillPercent = 1
	if err := b.Put(append([]byte(nil), k...), append([]byte(nil), v...)); err != nil {
		return fmt.Errorf("export: %s: %w", bucket, err)
	}
	w.bytes += len(k) + len(v)
	if w.bytes < exportTxBytes {
		return nil
	}
	if err := w.commit(); err != nil {
		return err
	}
	return w.begin()
}

func (w *boltWriter) commit() error {
	tx := w.tx
	w.tx = nil
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("export: commit: %w", err)
	}
	return nil
}

func (w *boltWriter) abort() {
	if w.tx != nil {
		_ = w.tx.Rollback()
		w.tx = nil
	}
}

func (w *boltWriter) copyBucket(tx backend.ReadTx, from backend.Bucket, to string) error {
	var werr error
	err := tx.Range(from, nil, nil, 0, func(k, v []byte) bool {
		werr = w.put(to, k, v)
		return werr == nil
	})
	if err = errors.Join(err, werr); err != nil {
		return fmt.Errorf("export: bucket %s: %w", from, err)
	}
	return nil
}
