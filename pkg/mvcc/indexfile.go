package mvcc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/fsutil"
	"github.com/kvd-dev/kvd/pkg/index"
)

// The index file is what a clean Close leaves for the next Open in place of
// a rebuild. Rebuilding the key index decodes every revision in the Key
// bucket: most of a restart on a large store (23 of 24.6 s on Badger at
// 8 GiB). Close, with every applied write committed and no compaction
// pending, writes the index beside the meta it matches (Options.IndexFile);
// Open reads the file, removes it, and uses the index when the backend's
// meta is still what the file records, so a backend that moved on since
// (the file left behind by a crash after a later start, a backend copied
// in) is rebuilt as before. Anything else amiss (no file, a damaged one)
// also rebuilds.
//
// Layout: indexFileMagic, the meta as varints (consistent index and term,
// finished and scheduled compaction, current revision), the encoded index
// (index.AppendEncoded), and a CRC-32C of all that.
const indexFileMagic = "kvd index file 1\n"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// indexMeta is the backend state an index file was written for.
type indexMeta struct {
	consistentIndex, consistentTerm uint64
	finished, scheduled             int64 // compaction marks, -1: none
	current                         int64
}

// saveIndexFile writes the index for the next Open. It runs in Close, after
// the last commit, when nothing writes any more.
func (s *Store) saveIndexFile(path string) error {
	tx, err := s.be.ReadTx()
	if err != nil {
		return err
	}
	finished, err := readCompactMark(tx, metaFinishedCompact)
	var scheduled int64
	if err == nil {
		scheduled, err = readCompactMark(tx, metaScheduledCompact)
	}
	tx.Release()
	if err != nil {
		return err
	}
	if scheduled > finished {
		// The next Open resumes the compaction on a rebuilt index.
		return nil
	}
	m := indexMeta{consistentIndex: s.consistentIndex.Load(), consistentTerm: s.consistentTerm.Load(),
		finished: finished, scheduled: scheduled, current: s.rev.Load()}
	b := append([]byte(nil), indexFileMagic...)
	b = binary.AppendUvarint(b, m.consistentIndex)
	b = binary.AppendUvarint(b, m.consistentTerm)
	b = binary.AppendVarint(b, m.finished)
	b = binary.AppendVarint(b, m.scheduled)
	b = binary.AppendVarint(b, m.current)
	b = s.idx.AppendEncoded(b)
	b = binary.BigEndian.AppendUint32(b, crc32.Checksum(b, crcTable))
	return writeFileSynced(path, b)
}

// writeFileSynced writes b to path through a temporary file, renamed over
// path once synced, and syncs the directory.
func writeFileSynced(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		return errors.Join(err, removeIfExists(tmp))
	}
	return fsutil.SyncDir(filepath.Dir(path))
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// takeIndexFile reads and removes the index file at path. It returns nil,
// with the reason logged, when there is none to use: then Open rebuilds.
// The file is removed before the store writes anything, so it never
// outlives the backend state it was written for.
func takeIndexFile(path string, lg *zap.Logger) *BuiltIndex {
	start := time.Now()
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err == nil {
		err = removeIfExists(path)
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(path))
	}
	var built *BuiltIndex
	if err == nil {
		built, err = decodeIndexFile(b)
	}
	if err != nil {
		lg.Warn("index file not used; rebuilding the index", zap.String("path", path), zap.Error(err))
		return nil
	}
	lg.Info("read index file", zap.String("path", path), zap.Int("bytes", len(b)),
		zap.Int("keys", built.idx.Len()), zap.Duration("took", time.Since(start)))
	return built
}

func decodeIndexFile(b []byte) (*BuiltIndex, error) {
	if len(b) < len(indexFileMagic)+4 || !bytes.HasPrefix(b, []byte(indexFileMagic)) {
		return nil, errors.New("not an index file")
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, errors.New("checksum mismatch")
	}
	r := body[len(indexFileMagic):]
	var m indexMeta
	for _, u := range []*uint64{&m.consistentIndex, &m.consistentTerm} {
		v, n := binary.Uvarint(r)
		if n <= 0 {
			return nil, errors.New("damaged header")
		}
		*u, r = v, r[n:]
	}
	for _, i := range []*int64{&m.finished, &m.scheduled, &m.current} {
		v, n := binary.Varint(r)
		if n <= 0 {
			return nil, errors.New("damaged header")
		}
		*i, r = v, r[n:]
	}
	idx, err := index.Decode(r)
	if err != nil {
		return nil, err
	}
	return &BuiltIndex{idx: idx, current: m.current, written: &m}, nil
}

// mismatch says how the backend's meta differs from what the index file
// was written for ("" when it does not).
func (m *indexMeta) mismatch(consistentIndex, consistentTerm uint64, finished, scheduled int64) string {
	if m.consistentIndex != consistentIndex || m.consistentTerm != consistentTerm {
		return fmt.Sprintf("written at consistent index %d term %d, the backend is at %d term %d",
			m.consistentIndex, m.consistentTerm, consistentIndex, consistentTerm)
	}
	if m.finished != finished || m.scheduled != scheduled {
		return fmt.Sprintf("written at compaction marks %d/%d, the backend has %d/%d",
			m.finished, m.scheduled, finished, scheduled)
	}
	return ""
}

// revisionsBeyond says which revision the Key bucket holds past current,
// the newest an index file knows ("" when none): a backend written to
// without a new consistent index, as a test's store or a tool would.
func revisionsBeyond(tx backend.ReadTx, current int64) (string, error) {
	var found []byte
	err := tx.Range(backend.Key, revToBytes(index.Revision{Main: current + 1}, false), nil, 1, func(k, _ []byte) bool {
		found = bytes.Clone(k)
		return false
	})
	if err != nil {
		return "", fmt.Errorf("open mvcc store: %w", err)
	}
	if found == nil {
		return "", nil
	}
	rev, _, err := bytesToRev(found)
	if err != nil {
		return "", fmt.Errorf("open mvcc store: %w", err)
	}
	return fmt.Sprintf("written at revision %d, the backend holds revision %d", current, rev.Main), nil
}
