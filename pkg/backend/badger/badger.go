// Package badger implements backend.Backend on Badger, an LSM tree with a
// separate value log.
//
// Buckets are key prefixes. A stored key is
//
//	0x01 | len(bucket) | bucket | key
//
// The leading namespace byte keeps clear of Badger's internal "!badger!" keys;
// the length byte makes the prefixes prefix-free, so bucket "key" never sees
// the keys of "keyx" and ("ke", "yx") never meets ("key", "x").
//
// An Update is one Badger transaction, committed all or nothing. Badger bounds
// a transaction by its memtable size; Options.MaxUpdateBytes sizes the
// memtables so that one Update holds at least that much (see there). A bigger
// Update fails with backend.ErrUpdateTooLarge and commits nothing.
//
// Files live in Dir/<name>, where Dir/CURRENT names the live subdirectory
// (default "data"). Restore and Defrag build a new subdirectory and switch
// CURRENT, so a crash during either leaves the old data in place, and Open
// removes whatever subdirectory CURRENT does not name. Defrag copies from a
// snapshot while writers go on committing, and holds them only for its last
// replay of what they committed meanwhile and the switch (see defrag.go).
package badger

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/internal/gate"
	"github.com/kvd-dev/kvd/pkg/backend/internal/readview"
	"github.com/kvd-dev/kvd/pkg/fsutil"
)

const (
	// nsData is the first byte of every key kvd stores.
	nsData = 0x01

	currentFile    = "CURRENT"
	defaultDataDir = "data"

	// sizeTTL bounds how often Size walks the directory; between walks it
	// adds the bytes committed since the last one.
	sizeTTL = time.Second
)

// Options tune Badger. The zero value gives the defaults.
type Options struct {
	// Logger receives Badger's warnings and errors; its info and debug
	// messages go to Debug. Nil discards everything.
	Logger *zap.Logger
	// MaxUpdateBytes is the least one Update is guaranteed to hold, counted
	// as the sum over its writes of len(key) + len(value) + len(bucket) + 14
	// (a value of ValueThreshold bytes or more counts 12, as it goes to the
	// value log); an Update also holds at most MaxUpdateBytes/96 writes.
	// Badger needs memtables of 100/15 of this size: the default, 64 MiB,
	// gives ~430 MiB memtables (heap arenas touched only as they fill, and
	// sparse files). At most 256 MiB. Default: 64 MiB.
	MaxUpdateBytes int64
	// NumMemtables is how many full memtables may wait for flushing before
	// writes stall. Default: 2.
	NumMemtables int
	// ValueThreshold: values this size or larger are kept in the value log
	// instead of the LSM tree. Default: 32 KiB.
	ValueThreshold int64
	// BlockCacheSize is the cache for LSM blocks. Default: Badger's (256 MiB).
	BlockCacheSize int64
	// MemTableSize is Badger's memtable size. It is raised to what
	// MaxUpdateBytes needs, so it only ever raises the Update limit.
	MemTableSize int64
	// ValueLogFileSize is the size of one value log file, which bounds one
	// value (1 MiB to 2 GiB-1). Default: Badger's (1 GiB-1).
	ValueLogFileSize int64
	// NumCompactors is the number of LSM compaction goroutines, at least 2.
	// Default: Badger's (4).
	NumCompactors int
}

func (o Options) withDefaults() (Options, error) {
	if o.MaxUpdateBytes <= 0 {
		o.MaxUpdateBytes = 64 << 20
	}
	if o.MaxUpdateBytes > 256<<20 {
		return o, fmt.Errorf("badger max update bytes %d: at most %d", o.MaxUpdateBytes, 256<<20)
	}
	if o.NumMemtables <= 0 {
		o.NumMemtables = 2
	}
	if o.ValueThreshold <= 0 {
		o.ValueThreshold = 32 << 10
	}
	if o.ValueThreshold > 1<<20 || o.ValueThreshold > o.MaxUpdateBytes {
		return o, fmt.Errorf("badger value threshold %d: at most 1 MiB and at most max update bytes", o.ValueThreshold)
	}
	if o.ValueLogFileSize != 0 && (o.ValueLogFileSize < 1<<20 || o.ValueLogFileSize >= 2<<30) {
		return o, fmt.Errorf("badger value log file size %d: want 1 MiB to 2 GiB-1", o.ValueLogFileSize)
	}
	if o.NumCompactors == 1 || o.NumCompactors < 0 {
		return o, fmt.Errorf("badger num compactors %d: want at least 2", o.NumCompactors)
	}
	// Badger maps a memtable's log at twice its size with 32-bit offsets.
	if o.MemTableSize < 0 || o.MemTableSize >= 2<<30 {
		return o, fmt.Errorf("badger memtable size %d: want less than 2 GiB", o.MemTableSize)
	}
	return o, nil
}

// memTableSize is the memtable Badger gets. Badger's transaction limit is
// 15% of it; round up so that limit is at least MaxUpdateBytes.
func (o Options) memTableSize() int64 {
	return max((o.MaxUpdateBytes*100+14)/15, o.MemTableSize)
}

func (o Options) badgerOptions(dir string, sync bool) badger.Options {
	memTable := o.memTableSize()
	bo := badger.DefaultOptions(dir).
		WithLogger(newLogger(o.Logger)).
		WithSyncWrites(sync).
		WithMemTableSize(memTable).
		WithNumMemtables(o.NumMemtables).
		WithValueThreshold(o.ValueThreshold).
		WithNumVersionsToKeep(1).
		// Update serialises writers itself, so there is nothing to detect.
		WithDetectConflicts(false).
		// Metrics are process-global expvars keyed by directory; Size walks
		// the directory instead.
		WithMetricsEnabled(false)
	if o.BlockCacheSize > 0 {
		bo = bo.WithBlockCacheSize(o.BlockCacheSize)
	}
	if o.ValueLogFileSize > 0 {
		bo = bo.WithValueLogFileSize(o.ValueLogFileSize)
	}
	if o.NumCompactors > 0 {
		bo = bo.WithNumCompactors(o.NumCompactors)
	}
	return bo
}

// Backend is a Badger-backed backend.Backend.
type Backend struct {
	root string // opts.Dir: CURRENT and the data subdirectories
	sync bool
	opts Options // with defaults applied
	// arena is the size of one memtable's skiplist arena (HeapArenaBytes).
	arena int64

	gate gate.Gate // every operation and every open ReadTx holds it
	// writeMu serialises Updates, so transactions never conflict. It also
	// guards the replacement of cur, and the start and end of a Defrag's
	// journal; Defrag holds it for those, never for its copy. It blocks
	// views (no shared read transaction) while held.
	writeMu readview.WriteLock[*view]
	// journal records the writes committed while a Defrag runs; nil when
	// none does. It changes only under writeMu.
	journal atomic.Pointer[journal]
	// defragMu lets one Defrag run at a time; a second one waits.
	defragMu sync.Mutex
	// curMu guards cur for readers, which pin the store they read.
	curMu sync.RWMutex
	cur   *store

	sizeMu sync.Mutex
	sizeAt time.Time
	size   int64
	// written counts the bytes committed since size was measured.
	written atomic.Int64
	// retiring counts stores replaced by Defrag and not yet closed.
	retiring sync.WaitGroup
	lg       *zap.Logger
	// views shares one read transaction between commits: beginning one per
	// reader costs two round trips through Badger's read watermark.
	// Everything that commits to or replaces the live store holds writeMu,
	// which blocks it.
	views readview.Cache[*view]
}

// view is a read transaction readers share, and the store it pins.
type view struct {
	txn *badger.Txn
	s   *store
}

// store is one open database. Defrag replaces the live store with a copy;
// the old one closes once the readers that pinned it are done.
type store struct {
	db      *badger.DB
	dir     string
	readers sync.WaitGroup
}

// pin returns the live store, which stays open until unpinned.
func (be *Backend) pin() *store {
	be.curMu.RLock()
	defer be.curMu.RUnlock()
	s := be.cur
	s.readers.Add(1)
	return s
}

var _ backend.Backend = (*Backend)(nil)

// Open opens (creating if needed) the Badger database in opts.Dir. opts.Sync
// maps to Badger's SyncWrites. Without it a commit is still atomic and
// crash-consistent: replay after a crash stops at the first incomplete
// transaction in the memtable log.
func Open(opts backend.Options, bo Options) (*Backend, error) {
	bo, err := bo.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := fsutil.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create badger dir %s: %w", opts.Dir, err)
	}
	name, err := readCurrent(opts.Dir)
	if err != nil {
		return nil, err
	}
	if err := removeStale(opts.Dir, name); err != nil {
		return nil, err
	}
	dir := filepath.Join(opts.Dir, name)
	db, err := badger.Open(bo.badgerOptions(dir, opts.Sync))
	if err != nil {
		return nil, fmt.Errorf("open badger db %s: %w", dir, err)
	}
	// Badger creates dir and its first files without syncing the entries.
	if err := errors.Join(fsutil.SyncDir(opts.Dir), fsutil.SyncDir(dir)); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	be := &Backend{
		root: opts.Dir, sync: opts.Sync, opts: bo, arena: bo.arenaBytes(),
		cur: &store{db: db, dir: dir}, lg: bo.logger(),
	}
	be.writeMu.Views = &be.views
	return be, nil
}

// arenaBytes is the size of the arena Badger allocates on the Go heap for
// each memtable: the memtable plus room for one maximal batch and its nodes
// (Badger's arenaSize, where a batch is at most 15% of the memtable).
func (o Options) arenaBytes() int64 {
	memTable := o.memTableSize()
	return memTable + 2*(15*memTable/100)
}

// HeapArenaBytes is the pointer-free memory the open database keeps on the Go
// heap for as long as it is open: its active memtable's arena. (While a full
// memtable is flushed there are briefly two.) See pkg/gcpace.
func (be *Backend) HeapArenaBytes() int64 { return be.arena }

// readCurrent returns the live subdirectory named by Dir/CURRENT.
func readCurrent(dir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dir, currentFile))
	if errors.Is(err, os.ErrNotExist) {
		return defaultDataDir, nil
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", filepath.Join(dir, currentFile), err)
	}
	name := strings.TrimSpace(string(b))
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return "", fmt.Errorf("read %s: bad subdirectory name %q", filepath.Join(dir, currentFile), name)
	}
	return name, nil
}

// removeStale deletes what an interrupted Restore left: data subdirectories
// other than the live one, and a half-written CURRENT.
func removeStale(dir, live string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list badger dir %s: %w", dir, err)
	}
	for _, e := range entries {
		n := e.Name()
		stale := n == currentFile+".tmp" ||
			(e.IsDir() && n != live && (n == defaultDataDir || strings.HasPrefix(n, defaultDataDir+"-")))
		if !stale {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, n)); err != nil {
			return fmt.Errorf("remove stale %s: %w", filepath.Join(dir, n), err)
		}
	}
	return nil
}

// ReadTx implements backend.Backend.
func (be *Backend) ReadTx() (backend.ReadTx, error) {
	if !be.gate.Enter() {
		return nil, backend.ErrClosed
	}
	v, err := be.views.Get(be.beginView, endView)
	if err != nil {
		be.gate.Exit()
		return nil, err
	}
	r := &readTx{txn: v.Tx.txn, view: v, gate: &be.gate}
	r.scratch = r.scratchBuf[:0]
	return r, nil
}

func (be *Backend) beginView() (*view, error) {
	s := be.pin()
	return &view{txn: s.db.NewTransaction(false), s: s}, nil
}

func endView(v *view) {
	v.txn.Discard()
	v.s.readers.Done()
}

// Update implements backend.Backend.
func (be *Backend) Update(fn func(backend.WriteTx) error) error {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	if j := be.journal.Load(); j != nil {
		j.WaitRoom() // a full journal holds writers until Defrag drains it
	}
	be.writeMu.Lock()
	defer be.writeMu.Unlock()
	// Holding writeMu, cur and journal cannot change under us.
	j := be.journal.Load()
	txn := be.cur.db.NewTransaction(true)
	defer txn.Discard()
	w := &writeTx{readTx: readTx{txn: txn}, record: j != nil}
	ferr := fn(w)
	w.done = true
	if ferr != nil {
		return ferr
	}
	if w.err != nil {
		return w.err
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("commit badger txn in %s: %w", be.cur.dir, err)
	}
	be.written.Add(w.bytes)
	if j != nil {
		j.Add(w.ops, w.opBytes)
	}
	return nil
}

// Size is the disk space of the data directory: blocks actually allocated,
// since Badger's memtable and value logs are large sparse files. Walking the
// directory is costly, so between walks (at most one a second) Size adds the
// key and value bytes committed since the last walk: an estimate that errs
// high, so a quota is not overshot by a second of writes.
func (be *Backend) Size() int64 {
	if !be.gate.Enter() {
		return 0
	}
	defer be.gate.Exit()
	be.sizeMu.Lock()
	defer be.sizeMu.Unlock()
	if now := time.Now(); now.Sub(be.sizeAt) >= sizeTTL {
		s := be.pin()
		written := be.written.Load()
		n, err := diskUsage(s.dir)
		s.readers.Done()
		if err == nil {
			be.size, be.sizeAt = n, now
			be.written.Add(-written)
		}
	}
	return be.size + be.written.Load()
}

// remeasure makes the next Size walk the directory.
func (be *Backend) remeasure() {
	be.sizeMu.Lock()
	be.sizeAt = time.Time{}
	be.sizeMu.Unlock()
}

// SizeInUse is Size: Badger cannot tell live from dead bytes cheaply.
func (be *Backend) SizeInUse() int64 { return be.Size() }

func diskUsage(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil // removed by a compaction while we walked
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		total += allocated(fi)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", dir, err)
	}
	return total, nil
}

// Snapshot streams every live key at one read timestamp in Badger's backup
// format (DB.Backup), framed with a length and checksum (see snapshot.go);
// Restore loads it.
func (be *Backend) Snapshot(w io.Writer) (int64, error) {
	if !be.gate.Enter() {
		return 0, backend.ErrClosed
	}
	defer be.gate.Exit()
	s := be.pin()
	defer s.readers.Done()
	sw, err := newSnapshotWriter(w)
	if err != nil {
		return sw.n, fmt.Errorf("badger snapshot of %s: %w", s.dir, err)
	}
	stream := s.db.NewStream()
	stream.Prefix = []byte{nsData}
	stream.LogPrefix = "kvd snapshot"
	// Each stream goroutine allocates its own multi-MiB buffers; a snapshot
	// is rare and bound by the writer it feeds, not by iteration.
	stream.NumGo = 2
	if _, err := stream.Backup(sw, 0); err != nil {
		return sw.n, fmt.Errorf("badger snapshot of %s: %w", s.dir, err)
	}
	if err := sw.finish(); err != nil {
		return sw.n, fmt.Errorf("badger snapshot of %s: %w", s.dir, err)
	}
	return sw.n, nil
}

// Sync implements backend.Backend.
func (be *Backend) Sync() error {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	s := be.pin()
	defer s.readers.Done()
	if err := s.db.Sync(); err != nil {
		return fmt.Errorf("sync badger db %s: %w", s.dir, err)
	}
	// Unlinks (replaced memtable logs, compacted tables) are not synced by
	// Badger; sync them before a raft snapshot lets the WAL be truncated.
	// The names of new files are synced as they are created (the patched
	// ristretto in third_party).
	return fsutil.SyncDir(s.dir)
}

// Close implements backend.Backend. Every Badger goroutine has ended when it
// returns.
func (be *Backend) Close() error {
	if !be.gate.Close() {
		return nil
	}
	// Every holder has left, so no Defrag is running, and once the shared
	// view is dropped no reader pins cur or a replaced store.
	be.views.Block() // for good
	be.retiring.Wait()
	if err := be.cur.db.Close(); err != nil {
		return fmt.Errorf("close badger db %s: %w", be.cur.dir, err)
	}
	return nil
}

// Restore replaces the database in opts.Dir with a stream written by
// Snapshot. The backend on opts.Dir must be closed. The stream is loaded into
// a new subdirectory, which CURRENT then names; the old data is removed only
// after that switch, so a failed or interrupted Restore keeps it.
func Restore(opts backend.Options, bo Options, r io.Reader) error {
	bo, err := bo.withDefaults()
	if err != nil {
		return err
	}
	if err := fsutil.MkdirAll(opts.Dir, 0o700); err != nil {
		return fmt.Errorf("restore: create badger dir %s: %w", opts.Dir, err)
	}
	old, err := readCurrent(opts.Dir)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	sr, err := newSnapshotReader(r)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	name := newDataName()
	dir := filepath.Join(opts.Dir, name)
	db, err := badger.Open(bo.badgerOptions(dir, true))
	if err != nil {
		return fmt.Errorf("restore: open badger db %s: %w", dir, err)
	}
	if err := load(db, sr); err != nil {
		_ = db.Close()
		_ = os.RemoveAll(dir)
		return fmt.Errorf("restore: load snapshot into %s: %w", dir, err)
	}
	if err := sr.verify(); err != nil {
		_ = db.Close()
		_ = os.RemoveAll(dir)
		return fmt.Errorf("restore: %w", err)
	}
	if err := db.Close(); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("restore: close %s: %w", dir, err)
	}
	if err := writeCurrent(opts.Dir, name); err != nil {
		_ = os.RemoveAll(dir)
		return fmt.Errorf("restore: %w", err)
	}
	// The restore is done; what fails to go now, Open removes.
	_ = os.RemoveAll(filepath.Join(opts.Dir, old))
	return nil
}

// load runs DB.Load, which panics on some malformed streams (it trusts the
// length prefixes it reads); a bad snapshot from a peer must be an error.
func load(db *badger.DB, r io.Reader) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed snapshot: %v", p)
		}
	}()
	return db.Load(&backupGuard{r: r}, 256)
}

// maxBackupList bounds one record of Badger's backup stream: Badger's Load
// allocates whatever length prefix it reads, so a damaged prefix (the
// checksum is only checked after the load) would ask for terabytes. Badger
// writes batches of at most ~100 MB (its stream's soft limit plus one
// entry); kvd's values are far below that.
const maxBackupList = 256 << 20

// backupGuard passes a backup stream through, checking every record's
// 8-byte little-endian length prefix against maxBackupList before Load
// sees it.
type backupGuard struct {
	r      io.Reader
	hdr    [8]byte
	nhdr   int    // bytes of the current length prefix seen
	remain uint64 // bytes of the current record still to pass
}

func (g *backupGuard) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	for b := p[:n]; len(b) > 0; {
		if g.remain > 0 {
			k := min(uint64(len(b)), g.remain)
			g.remain -= k
			b = b[k:]
			continue
		}
		c := copy(g.hdr[g.nhdr:], b)
		g.nhdr += c
		b = b[c:]
		if g.nhdr == len(g.hdr) {
			g.nhdr = 0
			g.remain = binary.LittleEndian.Uint64(g.hdr[:])
			if g.remain > maxBackupList {
				return 0, fmt.Errorf("malformed snapshot: a record of %d bytes (at most %d)", g.remain, maxBackupList)
			}
		}
	}
	return n, err
}

// writeCurrent atomically points Dir/CURRENT at name.
func writeCurrent(dir, name string) error {
	tmp := filepath.Join(dir, currentFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", tmp, err)
	}
	_, err = f.WriteString(name + "\n")
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, currentFile)); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return fsutil.SyncDir(dir)
}

// bucketPrefix returns the key prefix of bucket b, with spare capacity for
// n more bytes.
func bucketPrefix(b backend.Bucket, n int) ([]byte, error) {
	return appendPrefix(make([]byte, 0, 2+len(b)+n), b)
}

func appendPrefix(dst []byte, b backend.Bucket) ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, err
	}
	dst = append(dst, nsData, byte(len(b)))
	return append(dst, b...), nil
}

type readTx struct {
	txn  *badger.Txn
	view *readview.View[*view] // the shared view txn belongs to; nil for a writeTx
	gate *gate.Gate            // exited by Release; nil for a writeTx
	// done is set by Release (readTx) or when Update returns (writeTx).
	done bool
	// scratch builds lookup keys; Badger does not keep the key passed to Get.
	// scratchBuf backs it for the keys of mvcc's revisions.
	scratch    []byte
	scratchBuf [48]byte
}

// ValuesOwned implements backend.OwnedValues: Get copies every value out
// of Badger (item.ValueCopy).
func (r *readTx) ValuesOwned() {}

func (r *readTx) Get(b backend.Bucket, key []byte) ([]byte, bool, error) {
	if r.done {
		return nil, false, backend.ErrTxDone
	}
	if need := 2 + len(b) + len(key); cap(r.scratch) < need {
		r.scratch = make([]byte, 0, max(need, 64))
	}
	k, err := appendPrefix(r.scratch[:0], b)
	if err != nil || len(key) == 0 {
		return nil, false, err
	}
	k = append(k, key...)
	r.scratch = k
	item, err := r.txn.Get(k)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("badger get in bucket %s: %w", b, err)
	}
	// Badger's value slices are valid only inside item.Value's callback.
	v, err := item.ValueCopy(nil)
	if err != nil {
		return nil, false, fmt.Errorf("badger read value in bucket %s: %w", b, err)
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

func (r *readTx) Range(b backend.Bucket, start, end []byte, limit int, fn func(k, v []byte) bool) error {
	if r.done {
		return backend.ErrTxDone
	}
	prefix, err := bucketPrefix(b, len(start))
	if err != nil {
		return err
	}
	if end != nil && bytes.Compare(start, end) >= 0 {
		return nil
	}
	it := r.txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	n := 0
	for it.Seek(append(prefix, start...)); it.Valid(); it.Next() {
		item := it.Item()
		k := item.Key()[len(prefix):]
		if end != nil && bytes.Compare(k, end) >= 0 {
			return nil
		}
		cont := true
		err := item.Value(func(v []byte) error {
			if v == nil {
				v = []byte{}
			}
			cont = fn(k, v)
			return nil
		})
		if err != nil {
			return fmt.Errorf("badger read value in bucket %s: %w", b, err)
		}
		if n++; !cont || (limit > 0 && n >= limit) {
			return nil
		}
	}
	return nil
}

func (r *readTx) Release() {
	if r.done || r.gate == nil {
		return
	}
	r.done = true
	r.view.Release()
	r.gate.Exit()
}

type writeTx struct {
	readTx
	err   error // first failed write; Update then commits nothing
	bytes int64 // stored key and value bytes written, for Size
	// record keeps the writes in ops for a running Defrag's journal.
	record  bool
	ops     []op
	opBytes int64
}

func (w *writeTx) Release() {}

func (w *writeTx) fail(err error) error {
	if w.err == nil {
		w.err = err
	}
	return err
}

func (w *writeTx) Put(b backend.Bucket, key, value []byte) error {
	if w.done {
		return backend.ErrTxDone
	}
	if len(key) == 0 {
		return w.fail(fmt.Errorf("badger put in bucket %s: empty key", b))
	}
	// One allocation holds the stored key and a copy of the value: Badger
	// keeps both slices until commit, and callers may reuse theirs.
	buf, err := bucketPrefix(b, len(key)+len(value))
	if err != nil {
		return w.fail(err)
	}
	buf = append(buf, key...)
	k := buf[:len(buf):len(buf)]
	buf = append(buf, value...)
	if err := w.txn.Set(k, buf[len(k):]); err != nil {
		return w.fail(writeErr("put", b, err))
	}
	w.bytes += int64(len(buf))
	if w.record {
		// Badger does not modify k and v, and nobody else holds them.
		w.ops = append(w.ops, op{key: k, value: buf[len(k):]})
		w.opBytes += int64(len(buf))
	}
	return nil
}

func (w *writeTx) Delete(b backend.Bucket, key []byte) error {
	if w.done {
		return backend.ErrTxDone
	}
	k, err := bucketPrefix(b, len(key))
	if err != nil {
		return w.fail(err)
	}
	if len(key) == 0 {
		return nil
	}
	k = append(k, key...)
	if err := w.txn.Delete(k); err != nil {
		return w.fail(writeErr("delete", b, err))
	}
	if w.record {
		w.ops = append(w.ops, op{key: k, del: true})
		w.opBytes += int64(len(k))
	}
	return nil
}

func writeErr(op string, b backend.Bucket, err error) error {
	if errors.Is(err, badger.ErrTxnTooBig) {
		return fmt.Errorf("badger %s in bucket %s: %w (raise badger MaxUpdateBytes or split the update): %w",
			op, b, backend.ErrUpdateTooLarge, err)
	}
	return fmt.Errorf("badger %s in bucket %s: %w", op, b, err)
}

// logger routes Badger's log to zap, demoting its chatty info to debug.
type logger struct{ s *zap.SugaredLogger }

func newLogger(l *zap.Logger) logger {
	if l == nil {
		l = zap.NewNop()
	}
	return logger{s: l.Named("badger").Sugar()}
}

// logger is kvd's own logger for this backend (never nil).
func (o Options) logger() *zap.Logger {
	if o.Logger == nil {
		return zap.NewNop()
	}
	return o.Logger
}

func (l logger) Errorf(f string, a ...any)   { l.s.Errorf(strings.TrimSpace(f), a...) }
func (l logger) Warningf(f string, a ...any) { l.s.Warnf(strings.TrimSpace(f), a...) }
func (l logger) Infof(f string, a ...any)    { l.s.Debugf(strings.TrimSpace(f), a...) }
func (l logger) Debugf(f string, a ...any)   { l.s.Debugf(strings.TrimSpace(f), a...) }
