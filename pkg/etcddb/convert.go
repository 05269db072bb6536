package etcddb

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/backend"
	kbolt "github.com/kvd-dev/kvd/pkg/backend/bolt"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// ExportBackend writes be's current state as an etcd v3.7 bolt file at
// path, which must not exist, like Export. For the bolt engine it is much
// cheaper: the engine's own snapshot is a bolt file in which the key,
// lease, alarm and meta buckets already hold etcd's records, so the file
// is copied as it is and only the small buckets are rewritten in place
// (convertInPlace). Other engines go through Export.
func ExportBackend(be backend.Backend, path string) (err error) {
	if _, ok := be.(*kbolt.Backend); !ok {
		tx, err := be.ReadTx()
		if err != nil {
			return err
		}
		defer tx.Release()
		return Export(tx, path)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer func() {
		if err != nil {
			os.Remove(path)
		}
	}()
	_, err = be.Snapshot(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("export: copy the bolt file: %w", err)
	}
	return convertInPlace(path)
}

// convertInPlace rewrites a copy of the bolt engine's file (one bolt bucket
// per backend.Bucket, kvd's records) into etcd's layout, in one
// transaction: the meta keys etcd names differently or derives, and the
// members and auth buckets, whose records etcd keeps in buckets of their
// own.
func convertInPlace(path string) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return fmt.Errorf("export: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range etcdBuckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return err
			}
		}
		// Read the kvd records of the buckets etcd lays out otherwise,
		// then write them back etcd's way.
		members, err := takeBucket(tx, string(backend.Members))
		if err != nil {
			return err
		}
		auth, err := takeBucket(tx, string(backend.Auth))
		if err != nil {
			return err
		}
		w := &txWriter{tx: tx}
		meta := tx.Bucket([]byte(bucketMeta))
		if term := meta.Get([]byte(mvcc.MetaKeyConsistentTerm)); term != nil {
			if err := w.put(bucketMeta, []byte(etcdMetaTerm), term); err != nil {
				return err
			}
			if err := meta.Delete([]byte(mvcc.MetaKeyConsistentTerm)); err != nil {
				return err
			}
		}
		if err := w.put(bucketMeta, []byte(etcdMetaStorageVersion), []byte(StorageVersion)); err != nil {
			return err
		}
		if err := w.put(bucketCluster, []byte(etcdClusterVersion), []byte(StorageVersion)); err != nil {
			return err
		}
		var ld membership.Loader
		for _, r := range members {
			if err := ld.Add(string(r.k), r.v); err != nil {
				return err
			}
		}
		if err := writeMembers(w, &ld); err != nil {
			return err
		}
		for _, r := range auth {
			if err := writeAuthRecord(w, r.k, r.v); err != nil {
				return err
			}
		}
		return nil
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("export: convert %s to etcd's layout: %w", path, err)
	}
	return nil
}

type kv struct{ k, v []byte }

// takeBucket returns copies of the records of bucket name and empties it.
func takeBucket(tx *bolt.Tx, name string) ([]kv, error) {
	b := tx.Bucket([]byte(name))
	if b == nil {
		return nil, nil
	}
	var out []kv
	if err := b.ForEach(func(k, v []byte) error {
		out = append(out, kv{append([]byte(nil), k...), append([]byte(nil), v...)})
		return nil
	}); err != nil {
		return nil, err
	}
	if err := tx.DeleteBucket([]byte(name)); err != nil {
		return nil, err
	}
	_, err := tx.CreateBucket([]byte(name))
	return out, err
}

// txWriter puts into one bolt transaction.
type txWriter struct{ tx *bolt.Tx }

func (w *txWriter) put(bucket string, k, v []byte) error {
	if err := w.tx.Bucket([]byte(bucket)).Put(k, v); err != nil {
		return fmt.Errorf("%s: %w", bucket, err)
	}
	return nil
}

// putter is where the members and auth records go (a boltWriter or a
// txWriter).
type putter interface {
	put(bucket string, k, v []byte) error
}

// writeMembers writes the member list etcd's way: members/<id hex> (the
// same JSON), members_removed/<id hex>, and meta/confState.
func writeMembers(w putter, ld *membership.Loader) error {
	var cs confState
	for _, m := range ld.Members() {
		if err := w.put(bucketMembers, []byte(strconv.FormatUint(m.ID, 16)), m.Marshal()); err != nil {
			return err
		}
		if m.IsLearner {
			cs.Learners = append(cs.Learners, m.ID)
		} else {
			cs.Voters = append(cs.Voters, m.ID)
		}
	}
	for _, id := range ld.Removed() {
		if err := w.put(bucketMembersRemoved, []byte(strconv.FormatUint(id, 16)), removedValue); err != nil {
			return err
		}
	}
	if len(cs.Voters)+len(cs.Learners) == 0 {
		return nil
	}
	b, err := json.Marshal(cs)
	if err != nil {
		return err
	}
	return w.put(bucketMeta, []byte(etcdMetaConfState), b)
}

// writeAuthRecord writes one kvd auth record etcd's way.
func writeAuthRecord(w putter, k, v []byte) error {
	key := string(k)
	switch {
	case key == authz.KeyEnabled:
		return w.put(bucketAuth, []byte(etcdAuthEnabled), v)
	case key == authz.KeyRevision:
		return w.put(bucketAuth, []byte(etcdAuthRevision), v)
	case strings.HasPrefix(key, authz.UserKeyPrefix):
		return w.put(bucketAuthUsers, []byte(key[len(authz.UserKeyPrefix):]), v)
	case strings.HasPrefix(key, authz.RoleKeyPrefix):
		return w.put(bucketAuthRoles, []byte(key[len(authz.RoleKeyPrefix):]), v)
	}
	return fmt.Errorf("unknown auth record %q", key)
}
