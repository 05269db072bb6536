// Package datadir owns what a member's data directory says about itself:
// whom it belongs to (the identity file, written once at the first start)
// and who is using it now (the lock every process that opens it takes).
package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/kvd-dev/kvd/pkg/fsutil"
)

// IdentityFile is the identity's file name inside <data-dir>/member.
const IdentityFile = "identity.json"

// Identity is who a data dir belongs to (etcd keeps the same in its WAL
// metadata). IDs are hexadecimal, as etcd prints them.
type Identity struct {
	ClusterID string `json:"cluster_id"`
	MemberID  string `json:"member_id"`
	Name      string `json:"name"`
	// Bootstrap is the initial-cluster-state the member started with.
	Bootstrap string `json:"bootstrap"`
	// Token is the initial-cluster-token of a member that started a cluster.
	Token string `json:"token,omitempty"`
}

// IDs parses the cluster and member IDs.
func (id *Identity) IDs() (clusterID, memberID uint64, err error) {
	cid, err1 := strconv.ParseUint(id.ClusterID, 16, 64)
	mid, err2 := strconv.ParseUint(id.MemberID, 16, 64)
	return cid, mid, errors.Join(err1, err2)
}

// ReadIdentity reads the identity file at path; it returns nil and no error
// when there is none.
func ReadIdentity(path string) (*Identity, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read member identity: %w", err)
	}
	var id Identity
	if err := json.Unmarshal(b, &id); err != nil {
		return nil, fmt.Errorf("member identity %s: %w", path, err)
	}
	if _, _, err := id.IDs(); err != nil {
		return nil, fmt.Errorf("member identity %s: %w", path, err)
	}
	return &id, nil
}

// WriteIdentity writes id to path durably: a temporary file, fsynced, then
// renamed into place and the directory fsynced.
func WriteIdentity(path string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	if err := fsutil.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write member identity: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("write member identity: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write member identity %s: %w", path, err)
	}
	return nil
}
