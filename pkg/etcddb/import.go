package etcddb

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strconv"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/authpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/authz"
	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/membership"
	"github.com/kvd-dev/kvd/pkg/mvcc"
)

// Imported is what Import found in the etcd file.
type Imported struct {
	// Revisions are the records of the key bucket; Revision the newest
	// revision among them (0 when there is none).
	Revisions int
	Revision  int64
	// CompactRevision is the file's newest compaction mark (scheduled or
	// finished), 0 when there is none.
	CompactRevision int64
	// ConsistentIndex and Term are the file's meta/consistent_index and
	// meta/term.
	ConsistentIndex, Term uint64
	// Members and Removed are the file's member list. Import does not
	// write them unless ImportOptions.KeepMembers is set.
	Members []membership.Member
	Removed []uint64
	// Skipped names the buckets Import did not know and left out.
	Skipped []string
}

// ImportOptions tune Import.
type ImportOptions struct {
	// BatchBytes bounds one backend update (default 4 MiB, under Badger's
	// update limit).
	BatchBytes int
	// KeepMembers writes the file's member list too. A restore writes the
	// new cluster's members instead, as etcdutl does.
	KeepMembers bool
	// Progress, if set, is told the bytes of every record written.
	Progress func(n int64)
}

// Import loads the etcd bolt file db into be, which must be empty, in kvd's
// layout (see the package comment). It checks every record it translates
// (revision keys, member, user and role records) and fails on the first bad
// one, naming it; what it wrote before then is for the caller to discard.
func Import(db *bolt.DB, be backend.Backend, opts ImportOptions) (Imported, error) {
	if opts.BatchBytes <= 0 {
		opts.BatchBytes = 4 << 20
	}
	var res Imported
	load := func(put func(b backend.Bucket, k, v []byte) error) error {
		return db.View(func(tx *bolt.Tx) (err error) {
			// Check the file first (bolt.CheckReadable); should a damaged
			// page still get past that, bolt panics here, on this goroutine.
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("damaged bolt file: %v", p)
				}
			}()
			if tx.Bucket([]byte(bucketKey)) == nil || tx.Bucket([]byte(bucketMeta)) == nil {
				return fmt.Errorf("not an etcd backend: no %q or %q bucket", bucketKey, bucketMeta)
			}
			return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
				tr, ok := translators[string(name)]
				if !ok {
					res.Skipped = append(res.Skipped, string(name))
					return nil
				}
				return b.ForEach(func(k, v []byte) error {
					if v == nil && b.Bucket(k) != nil {
						return fmt.Errorf("bucket %s: nested bucket %q", name, k)
					}
					r, err := tr(&res, &opts, k, v)
					if err != nil {
						return fmt.Errorf("bucket %s: %w", name, err)
					}
					if r.bucket == "" {
						return nil
					}
					if opts.Progress != nil {
						opts.Progress(int64(len(k) + len(v)))
					}
					return put(r.bucket, r.key, r.value)
				})
			})
		})
	}
	var err error
	if bl, ok := be.(backend.BulkLoader); ok {
		err = bl.BulkLoad(load)
	} else {
		err = updateInBatches(be, opts.BatchBytes, load)
	}
	if err != nil {
		return res, fmt.Errorf("import etcd db: %w", err)
	}
	return res, nil
}

// updateInBatches loads what load puts with Updates of about batchBytes.
// The slices put must stay valid until load returns (bolt's do, for the
// read transaction).
func updateInBatches(be backend.Backend, batchBytes int, load func(put func(b backend.Bucket, k, v []byte) error) error) error {
	var batch []record
	n := 0
	flush := func() error {
		err := be.Update(func(w backend.WriteTx) error {
			for _, r := range batch {
				if err := w.Put(r.bucket, r.key, r.value); err != nil {
					return err
				}
			}
			return nil
		})
		batch, n = batch[:0], 0
		return err
	}
	err := load(func(b backend.Bucket, k, v []byte) error {
		batch = append(batch, record{b, k, v})
		if n += len(k) + len(v); n >= batchBytes {
			return flush()
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = flush()
	}
	return err
}

// record is one kvd record to write; a zero bucket writes nothing.
type record struct {
	bucket backend.Bucket
	key    []byte
	value  []byte
}

type translator func(res *Imported, opts *ImportOptions, k, v []byte) (record, error)

var translators = map[string]translator{
	bucketKey: func(res *Imported, _ *ImportOptions, k, v []byte) (record, error) {
		if len(k) != 17 && !(len(k) == 18 && k[17] == 't') || k[8] != '_' {
			return record{}, fmt.Errorf("bad revision key %x", k)
		}
		// kvd decodes every record when it opens the store: a record that
		// is not a KeyValue fails the import, not the member's start.
		if err := mvcc.CheckKV(v); err != nil {
			return record{}, fmt.Errorf("revision %x: %w", k, err)
		}
		res.Revisions++
		res.Revision = max(res.Revision, int64(binary.BigEndian.Uint64(k)))
		return record{backend.Key, k, v}, nil
	},
	bucketLease: func(_ *Imported, _ *ImportOptions, k, v []byte) (record, error) {
		if len(k) != 8 {
			return record{}, fmt.Errorf("bad lease key %x", k)
		}
		return record{backend.Lease, k, v}, nil
	},
	bucketAlarm: func(_ *Imported, _ *ImportOptions, k, v []byte) (record, error) {
		return record{backend.Alarm, k, v}, nil
	},
	bucketMeta: func(res *Imported, _ *ImportOptions, k, v []byte) (record, error) {
		switch string(k) {
		case etcdMetaConsistentIndex:
			n, err := uint64Of(k, v)
			res.ConsistentIndex = n
			return record{backend.Meta, []byte(mvcc.MetaKeyConsistentIndex), v}, err
		case etcdMetaTerm:
			n, err := uint64Of(k, v)
			res.Term = n
			return record{backend.Meta, []byte(mvcc.MetaKeyConsistentTerm), v}, err
		case mvcc.MetaKeyScheduledCompact, mvcc.MetaKeyFinishedCompact:
			if len(v) != 17 || v[8] != '_' {
				return record{}, fmt.Errorf("meta %s: bad revision %x", k, v)
			}
			res.CompactRevision = max(res.CompactRevision, int64(binary.BigEndian.Uint64(v)))
			return record{backend.Meta, k, v}, nil
		}
		return record{}, nil // confState, storageVersion: kvd derives them
	},
	bucketCluster: func(*Imported, *ImportOptions, []byte, []byte) (record, error) { return record{}, nil },
	bucketMembers: func(res *Imported, opts *ImportOptions, k, v []byte) (record, error) {
		id, err := strconv.ParseUint(string(k), 16, 64)
		if err != nil {
			return record{}, fmt.Errorf("member key %q: %w", k, err)
		}
		m, err := membership.Unmarshal(v)
		if err != nil {
			return record{}, fmt.Errorf("member %q: %w", k, err)
		}
		if m.ID != id {
			return record{}, fmt.Errorf("member record %q holds member %x", k, m.ID)
		}
		res.Members = append(res.Members, m)
		if !opts.KeepMembers {
			return record{}, nil
		}
		return record{backend.Members, []byte(membership.MemberKey(id)), v}, nil
	},
	bucketMembersRemoved: func(res *Imported, opts *ImportOptions, k, _ []byte) (record, error) {
		id, err := strconv.ParseUint(string(k), 16, 64)
		if err != nil {
			return record{}, fmt.Errorf("removed member key %q: %w", k, err)
		}
		res.Removed = append(res.Removed, id)
		if !opts.KeepMembers {
			return record{}, nil
		}
		return record{backend.Members, []byte(membership.RemovedKey(id)), []byte{}}, nil
	},
	bucketAuth: func(_ *Imported, _ *ImportOptions, k, v []byte) (record, error) {
		switch string(k) {
		case etcdAuthEnabled:
			if len(v) != 1 {
				return record{}, fmt.Errorf("auth %s: %d bytes, want 1", k, len(v))
			}
			return record{backend.Auth, []byte(authz.KeyEnabled), v}, nil
		case etcdAuthRevision:
			_, err := uint64Of(k, v)
			return record{backend.Auth, []byte(authz.KeyRevision), v}, err
		}
		return record{}, fmt.Errorf("unknown auth record %q", k)
	},
	bucketAuthUsers: func(_ *Imported, _ *ImportOptions, k, v []byte) (record, error) {
		var u authpb.User
		if err := proto.Unmarshal(v, &u); err != nil || !bytes.Equal(u.Name, k) {
			return record{}, fmt.Errorf("auth user %q: bad record (%v)", k, err)
		}
		return record{backend.Auth, append([]byte(authz.UserKeyPrefix), k...), v}, nil
	},
	bucketAuthRoles: func(_ *Imported, _ *ImportOptions, k, v []byte) (record, error) {
		var r authpb.Role
		if err := proto.Unmarshal(v, &r); err != nil || !bytes.Equal(r.Name, k) {
			return record{}, fmt.Errorf("auth role %q: bad record (%v)", k, err)
		}
		return record{backend.Auth, append([]byte(authz.RoleKeyPrefix), k...), v}, nil
	},
}

func uint64Of(k, v []byte) (uint64, error) {
	if len(v) != 8 {
		return 0, fmt.Errorf("%s: %d bytes, want 8", k, len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}
