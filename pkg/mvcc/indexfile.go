package mvcc

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/index"
)

// The index file is what a clean Close leaves for the next Open in place of
// a rebuild. Rebuilding the key index decodes every revision in the Key
// bucket: most of a restart on a large store (23 of 24.6 s on Badger at
// 8 GiB). Close, with every applied write committed and no compaction
// pending, writes the index beside the meta it matches (Options.IndexFile);
// Open reads the file, removes it, and uses the index when the backend's
// meta is still what the file records and it holds no revision past the
// file's, so a backend that moved on since (a file whose removal did not
// last, a backend copied in) is rebuilt as before. Anything else amiss (no
// file, a damaged one) also rebuilds. Both ends stream: an index of
// millions of keys is hundreds of MB encoded.
//
// Layout: indexFileMagic, the meta as varints (consistent index and term,
// finished and scheduled compaction, current revision), the encoded index
// (index.Encode), and a CRC-32C of all that.
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
	return writeIndexFile(path, m, s.idx)
}

// writeIndexFile writes the file through a temporary one renamed to path.
// Nothing is synced: a file a power cut leaves torn, empty or missing fails
// its checksum or is not there, and the next start rebuilds, so a stop need
// not wait for the disk (seconds for the 200 MB of an 8 GiB store).
func writeIndexFile(path string, m indexMeta, idx *index.Index) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	crc := crc32.New(crcTable)
	w := bufio.NewWriterSize(io.MultiWriter(f, crc), 256<<10)
	hdr := append([]byte(nil), indexFileMagic...)
	hdr = binary.AppendUvarint(hdr, m.consistentIndex)
	hdr = binary.AppendUvarint(hdr, m.consistentTerm)
	hdr = binary.AppendVarint(hdr, m.finished)
	hdr = binary.AppendVarint(hdr, m.scheduled)
	hdr = binary.AppendVarint(hdr, m.current)
	_, err = w.Write(hdr)
	if err == nil {
		err = idx.Encode(w)
	}
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		_, err = f.Write(binary.BigEndian.AppendUint32(nil, crc.Sum32()))
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
	return nil
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// IndexFileRead is an index file being read ahead of Open, so that the
// read overlaps the backend's opening (bolt maps its whole file with
// MAP_POPULATE, Badger replays its memtables): at 8G each takes seconds.
type IndexFileRead struct {
	path  string
	done  chan struct{}
	built *BuiltIndex
}

// ReadIndexFile starts taking the index file at path (see
// Options.IndexFile) on a goroutine of its own: the file is read and
// removed as Open would. Pass the result to Open in Options.IndexFileRead,
// or call Discard.
func ReadIndexFile(path string, lg *zap.Logger) *IndexFileRead {
	if lg == nil {
		lg = zap.NewNop()
	}
	r := &IndexFileRead{path: path, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.built = takeIndexFile(path, lg)
	}()
	return r
}

// wait returns the index read, nil if there was none to use.
func (r *IndexFileRead) wait() *BuiltIndex {
	<-r.done
	return r.built
}

// Discard waits for the read to end and drops what it read: the next Open
// rebuilds the index from the backend.
func (r *IndexFileRead) Discard() {
	<-r.done
	r.built = nil
}

// takeIndexFile reads and removes the index file at path. It returns nil,
// with the reason logged, when there is none to use: then Open rebuilds.
// The file is removed before the store writes anything. Should the removal
// not last (a power cut), the file comes back describing a state the
// backend has either kept, where it is right, or left, where restore
// refuses it.
func takeIndexFile(path string, lg *zap.Logger) *BuiltIndex {
	start := time.Now()
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	var built *BuiltIndex
	var size int64
	if err == nil {
		built, size, err = readIndexFile(f)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if rerr := removeIfExists(path); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if err != nil {
		lg.Warn("index file not used; rebuilding the index", zap.String("path", path), zap.Error(err))
		return nil
	}
	lg.Info("read index file", zap.String("path", path), zap.Int64("bytes", size),
		zap.Int("keys", built.idx.Len()), zap.Duration("took", time.Since(start)))
	return built
}

// readIndexFile decodes f as it reads it, checking the checksum at the end.
func readIndexFile(f *os.File) (*BuiltIndex, int64, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	size := st.Size()
	if size < int64(len(indexFileMagic))+4 {
		return nil, size, errors.New("not an index file")
	}
	crc := crc32.New(crcTable)
	r := bufio.NewReaderSize(io.TeeReader(io.LimitReader(f, size-4), crc), 256<<10)
	magic := make([]byte, len(indexFileMagic))
	if _, err := io.ReadFull(r, magic); err != nil || string(magic) != indexFileMagic {
		return nil, size, errors.New("not an index file")
	}
	var m indexMeta
	for _, u := range []*uint64{&m.consistentIndex, &m.consistentTerm} {
		if *u, err = binary.ReadUvarint(r); err != nil {
			return nil, size, fmt.Errorf("damaged header: %w", err)
		}
	}
	for _, i := range []*int64{&m.finished, &m.scheduled, &m.current} {
		if *i, err = binary.ReadVarint(r); err != nil {
			return nil, size, fmt.Errorf("damaged header: %w", err)
		}
	}
	idx, err := index.DecodeFrom(r, size)
	if err != nil {
		return nil, size, err
	}
	if _, err := r.ReadByte(); err != io.EOF {
		return nil, size, errors.New("bytes after the index")
	}
	var sum [4]byte
	if _, err := io.ReadFull(f, sum[:]); err != nil {
		return nil, size, fmt.Errorf("read checksum: %w", err)
	}
	if binary.BigEndian.Uint32(sum[:]) != crc.Sum32() {
		return nil, size, errors.New("checksum mismatch")
	}
	return &BuiltIndex{idx: idx, current: m.current, written: &m}, size, nil
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
