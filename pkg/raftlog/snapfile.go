package raftlog

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/kvd-dev/kvd/pkg/fsutil"
)

const (
	snapMagic = "KVDSNAP1"
	// snapHeaderSize is magic(8) + payload length(8) + crc32c(4).
	snapHeaderSize = 20
	snapSuffix     = ".snap"
	tmpSuffix      = ".tmp"
)

// snapName is <term>-<index>.snap in fixed-width hex, so names sort by term
// and listings can be filtered without opening files.
func snapName(term, index uint64) string {
	return fmt.Sprintf("%016x-%016x%s", term, index, snapSuffix)
}

type snapFile struct {
	name        string
	term, index uint64
}

func parseSnapName(name string) (snapFile, bool) {
	if !strings.HasSuffix(name, snapSuffix) {
		return snapFile{}, false
	}
	var term, index uint64
	if n, err := fmt.Sscanf(name, "%016x-%016x.snap", &term, &index); err != nil || n != 2 || snapName(term, index) != name {
		return snapFile{}, false
	}
	return snapFile{name: name, term: term, index: index}, true
}

// listSnapFiles returns the snapshot files in dir, newest (highest index)
// first.
func listSnapFiles(dir string) ([]snapFile, error) {
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list snapshot dir %s: %w", dir, err)
	}
	var out []snapFile
	for _, de := range des {
		if sf, ok := parseSnapName(de.Name()); ok {
			out = append(out, sf)
		}
	}
	slices.SortFunc(out, func(a, b snapFile) int {
		if a.index != b.index {
			if a.index > b.index {
				return -1
			}
			return 1
		}
		if a.term > b.term {
			return -1
		}
		if a.term < b.term {
			return 1
		}
		return 0
	})
	return out, nil
}

// writeSnapFile stores snap durably: a temporary file is written and
// fsynced, renamed into place, and the directory fsynced, so a crash leaves
// either no file or a complete one under the final name.
func writeSnapFile(dir string, snap *raftpb.Snapshot, noSync bool) (string, error) {
	md := snap.GetMetadata()
	name := snapName(md.GetTerm(), md.GetIndex())
	payload, err := proto.Marshal(snap)
	if err != nil {
		return "", fmt.Errorf("marshal snapshot %s: %w", name, err)
	}
	buf := make([]byte, snapHeaderSize, snapHeaderSize+len(payload))
	copy(buf, snapMagic)
	binary.LittleEndian.PutUint64(buf[8:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(buf[16:], crc32.Checksum(payload, crcTable))
	buf = append(buf, payload...)

	final := filepath.Join(dir, name)
	tmp := final + tmpSuffix
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return "", fmt.Errorf("create snapshot file %s: %w", tmp, err)
	}
	if _, err := f.Write(buf); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", fmt.Errorf("write snapshot file %s: %w", tmp, err)
	}
	if !noSync {
		if err := f.Sync(); err != nil {
			f.Close()
			os.Remove(tmp)
			return "", fmt.Errorf("fsync snapshot file %s: %w", tmp, err)
		}
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("close snapshot file %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, final); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("rename snapshot file %s: %w", tmp, err)
	}
	if !noSync {
		if err := fsutil.SyncDir(dir); err != nil {
			return "", err
		}
	}
	return name, nil
}

// readSnapFile loads and verifies one snapshot file. Damage is reported as
// an error wrapping ErrCorrupt.
func readSnapFile(dir string, sf snapFile) (*raftpb.Snapshot, error) {
	path := filepath.Join(dir, sf.name)
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read snapshot file %s: %w", path, err)
	}
	if len(data) < snapHeaderSize || string(data[:8]) != snapMagic {
		return nil, fmt.Errorf("%w: snapshot file %s: bad header", ErrCorrupt, path)
	}
	n := binary.LittleEndian.Uint64(data[8:])
	if n != uint64(len(data)-snapHeaderSize) {
		return nil, fmt.Errorf("%w: snapshot file %s: payload length %d, file holds %d", ErrCorrupt, path, n, len(data)-snapHeaderSize)
	}
	payload := data[snapHeaderSize:]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(data[16:]) {
		return nil, fmt.Errorf("%w: snapshot file %s: bad crc", ErrCorrupt, path)
	}
	snap := &raftpb.Snapshot{}
	if err := proto.Unmarshal(payload, snap); err != nil {
		return nil, fmt.Errorf("%w: snapshot file %s: %v", ErrCorrupt, path, err)
	}
	md := snap.GetMetadata()
	if md.GetIndex() != sf.index || md.GetTerm() != sf.term {
		return nil, fmt.Errorf("%w: snapshot file %s holds index %d term %d", ErrCorrupt, path, md.GetIndex(), md.GetTerm())
	}
	raftpb.EnsureSnapshot(snap)
	return snap, nil
}

// purgeSnapFiles removes all but the newest keep snapshot files.
func purgeSnapFiles(dir string, keep int) ([]string, error) {
	files, err := listSnapFiles(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	for i := keep; i < len(files); i++ {
		path := filepath.Join(dir, files[i].name)
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return removed, fmt.Errorf("remove old snapshot %s: %w", path, err)
		}
		removed = append(removed, files[i].name)
	}
	return removed, nil
}

// removeTmpFiles deletes leftovers of interrupted snapshot writes.
func removeTmpFiles(dir string) error {
	des, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", dir, err)
	}
	for _, de := range des {
		if strings.HasSuffix(de.Name(), tmpSuffix) {
			path := filepath.Join(dir, de.Name())
			if err := os.Remove(path); err != nil {
				return fmt.Errorf("remove leftover %s: %w", path, err)
			}
		}
	}
	return nil
}
