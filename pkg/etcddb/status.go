package etcddb

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"strings"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/proto"
)

// Status is what etcdutl snapshot status reports of a file, with its JSON
// names.
type Status struct {
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKey  int    `json:"totalKey"`
	TotalSize int64  `json:"totalSize"`
	// Version is the file's storage version, empty before etcd v3.6.
	Version string `json:"version"`
}

// ReadStatus computes db's Status as etcdutl does: a CRC-32C over every
// bucket name, key and value in bolt's order, the newest revision, the
// number of live keys, the file's size and storage version. It fails if
// bolt's consistency check finds anything.
func ReadStatus(db *bolt.DB) (Status, error) {
	var st Status
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	live := map[string]struct{}{}
	err := db.View(func(tx *bolt.Tx) error {
		var problems []string
		for err := range tx.Check() {
			problems = append(problems, err.Error())
		}
		if len(problems) > 0 {
			return fmt.Errorf("snapshot file integrity check failed: %d errors found:\n%s", len(problems), strings.Join(problems, "\n"))
		}
		st.TotalSize = tx.Size()
		if b := tx.Bucket([]byte(bucketMeta)); b != nil {
			st.Version = string(b.Get([]byte(etcdMetaStorageVersion)))
		}
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			h.Write(name)
			isKey := bytes.Equal(name, []byte(bucketKey))
			return b.ForEach(func(k, v []byte) error {
				h.Write(k)
				h.Write(v)
				if !isKey {
					return nil
				}
				if len(k) < 17 || k[8] != '_' {
					return fmt.Errorf("bad revision key %x", k)
				}
				st.Revision = int64(binary.BigEndian.Uint64(k))
				var kv mvccpb.KeyValue
				if err := proto.Unmarshal(v, &kv); err != nil {
					return fmt.Errorf("revision %x: %w", k, err)
				}
				if len(k) == 18 && k[17] == 't' {
					delete(live, string(kv.Key))
				} else {
					live[string(kv.Key)] = struct{}{}
				}
				return nil
			})
		})
	})
	if err != nil {
		return Status{}, err
	}
	st.TotalKey = len(live)
	st.Hash = h.Sum32()
	return st, nil
}

// ErrNoHash is returned by VerifyHash for a file without the sha256
// trailer etcd appends to a snapshot.
var ErrNoHash = errors.New("snapshot missing hash but --skip-hash-check=false")
