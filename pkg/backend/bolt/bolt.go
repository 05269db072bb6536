// Package bolt implements backend.Backend on bbolt: one B+tree file, Dir/db,
// with one bolt bucket per backend.Bucket.
//
// Durability: bolt's commit writes the dirty pages, fsyncs, then writes the
// meta page and fsyncs again; the two fsyncs are what make a commit atomic
// across a power loss. Without them a crash can leave a meta page that points
// at pages never written, a corrupt file rather than an older state. The
// backend contract wants every commit crash-consistent, so this engine always
// fsyncs on commit: backend.Options.Sync changes nothing here (every commit is
// durable anyway), and only the explicitly unsafe Options.NoSync turns it off.
//
// A ReadTx is a bolt read transaction and holds bolt's mmap lock: a commit
// that must grow the memory map waits until every open ReadTx is released.
// Options.InitialMmapSize makes that rare; keeping ReadTx short keeps it
// harmless.
//
// Defrag copies the live data into a new file from a read transaction while
// writers go on committing, replays the writes they committed meanwhile, and
// renames the new file over Dir/db; writers wait only for the last replay and
// the swap (see defrag.go). The old file stays open (and mapped) until the
// last ReadTx begun on it is released, so Defrag never waits for readers.
package bolt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/backend/internal/gate"
	"github.com/kvd-dev/kvd/pkg/backend/internal/readview"
	"github.com/kvd-dev/kvd/pkg/fsutil"
)

const (
	// FileName is the bolt file inside backend.Options.Dir.
	FileName = "db"
	// defragSuffix names the file Defrag builds before renaming it over
	// FileName; a leftover one is an interrupted Defrag and is removed on Open.
	defragSuffix = ".defrag"
	// restoreSuffix is Restore's equivalent of defragSuffix.
	restoreSuffix = ".restore"
	// defragTxBytes bounds the size of one copy or replay transaction during
	// Defrag.
	defragTxBytes = 10 << 20
)

// FreelistType values, named as in etcd's backend-bbolt-freelist-type.
const (
	FreelistMap   = "map"
	FreelistArray = "array"
)

// Options tune bolt. The zero value gives the defaults (etcd's choices).
type Options struct {
	// InitialMmapSize is the size of the first memory map. A writer that needs
	// a larger map must wait for every open read transaction, so a map that
	// is big from the start keeps writers from stalling behind readers. It
	// reserves address space only. Default: 10 GiB (1 GiB on 32-bit).
	InitialMmapSize int
	// FreelistType is FreelistMap (default: fast on large files) or
	// FreelistArray.
	FreelistType string
	// SyncFreelist writes the freelist on every commit. Off (etcd's default)
	// commits are cheaper and Open rebuilds the freelist by scanning the file.
	SyncFreelist bool
	// NoSync skips the fsyncs of a commit. UNSAFE: a power loss can corrupt
	// the file (see the package comment). For tests and benchmarks only.
	NoSync bool
	// LockTimeout is how long Open waits for the file lock held by another
	// process. Default: 10s.
	LockTimeout time.Duration
	// Logger receives what Defrag reclaimed and how long it took. Nil
	// discards it.
	Logger *zap.Logger
}

func (o Options) withDefaults() (Options, error) {
	if o.InitialMmapSize <= 0 {
		o.InitialMmapSize = 10 << 30
		if strconv.IntSize == 32 {
			o.InitialMmapSize = 1 << 30
		}
	}
	switch o.FreelistType {
	case "":
		o.FreelistType = FreelistMap
	case FreelistMap, FreelistArray:
	default:
		return o, fmt.Errorf("bolt freelist type %q: want %q or %q", o.FreelistType, FreelistMap, FreelistArray)
	}
	if o.LockTimeout <= 0 {
		o.LockTimeout = 10 * time.Second
	}
	return o, nil
}

func (o Options) boltOptions() *bolt.Options {
	ft := bolt.FreelistMapType
	if o.FreelistType == FreelistArray {
		ft = bolt.FreelistArrayType
	}
	return &bolt.Options{
		Timeout:         o.LockTimeout,
		NoFreelistSync:  !o.SyncFreelist,
		FreelistType:    ft,
		InitialMmapSize: o.InitialMmapSize,
		MmapFlags:       mmapFlags,
		NoSync:          o.NoSync,
	}
}

// Backend is a bolt-backed backend.Backend.
type Backend struct {
	path string
	bo   Options

	gate gate.Gate // every operation and every open ReadTx holds it

	// writeMu serialises Update and Defrag's swap, and blocks views (no
	// shared read transaction) while held; bolt has one writer
	// anyway. Defrag holds it to open its snapshot and start the journal,
	// and for its last replay and the swap, never for the copy.
	writeMu readview.WriteLock[*view]
	// journal records the writes committed while a Defrag runs; nil when
	// none does. It changes only under writeMu, so an Update holding writeMu
	// records into the journal of the Defrag whose snapshot it follows.
	journal atomic.Pointer[journal]
	// defragMu lets one Defrag run at a time; a second one waits.
	defragMu sync.Mutex
	lg       *zap.Logger
	// mu guards db. It is held only to read the pointer and begin a bolt
	// transaction, never across a callback.
	mu sync.RWMutex
	db *bolt.DB
	// retired counts old files (replaced by Defrag) still closing: their
	// close waits for the ReadTx begun on them. Close waits for retired.
	retired sync.WaitGroup
	// views shares one read transaction between commits. Everything that
	// writes to the live file holds writeMu, which blocks it: a commit that
	// grows the file remaps it and waits for every open read transaction.
	views readview.Cache[*view]
}

// view is a read transaction readers share, with the buckets opened once.
type view struct {
	tx      *bolt.Tx
	buckets map[backend.Bucket]*bolt.Bucket
	// keyCursors are cursors on the Key bucket for Get to reuse: bolt's
	// Bucket.Cursor allocates one, and its stack grows by appends on every
	// seek, four allocations a 1-key range, and counts it with an atomic
	// add on the shared tx's stats that every core contends on.
	keyCursors sync.Pool
}

var _ backend.Backend = (*Backend)(nil)

// Open opens (creating if needed) the bolt file in opts.Dir and creates every
// bucket in backend.AllBuckets.
func Open(opts backend.Options, bo Options) (*Backend, error) {
	bo, err := bo.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := fsutil.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create bolt dir %s: %w", opts.Dir, err)
	}
	path := filepath.Join(opts.Dir, FileName)
	for _, leftover := range []string{path + defragSuffix, path + restoreSuffix} {
		if err := os.Remove(leftover); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove leftover %s: %w", leftover, err)
		}
	}
	db, err := openDB(path, bo)
	if err != nil {
		return nil, err
	}
	// bolt fsyncs a new file but not its directory entry.
	if err := fsutil.SyncDir(opts.Dir); err != nil {
		return nil, errors.Join(err, db.Close())
	}
	lg := bo.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	be := &Backend{path: path, bo: bo, db: db, lg: lg}
	be.writeMu.Views = &be.views
	return be, nil
}

func openDB(path string, bo Options) (*bolt.DB, error) {
	db, err := bolt.Open(path, 0o600, bo.boltOptions())
	if err != nil {
		return nil, fmt.Errorf("open bolt db %s: %w", path, err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		for _, b := range backend.AllBuckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(b)); err != nil {
				return fmt.Errorf("create bucket %s: %w", b, err)
			}
		}
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("init bolt db %s: %w", path, err)
	}
	return db, nil
}

func (be *Backend) current() *bolt.DB {
	be.mu.RLock()
	defer be.mu.RUnlock()
	return be.db
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
	return &readTx{tx: v.Tx.tx, buckets: v.Tx.buckets, view: v, gate: &be.gate}, nil
}

func (be *Backend) beginView() (*view, error) {
	be.mu.RLock()
	tx, err := be.db.Begin(false)
	be.mu.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("begin bolt read tx: %w", err)
	}
	v := &view{tx: tx, buckets: make(map[backend.Bucket]*bolt.Bucket, len(backend.AllBuckets))}
	for _, b := range backend.AllBuckets {
		v.buckets[b] = tx.Bucket([]byte(b))
	}
	return v, nil
}

func endView(v *view) { _ = v.tx.Rollback() }

// Update implements backend.Backend.
func (be *Backend) Update(fn func(backend.WriteTx) error) (err error) {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	if j := be.journal.Load(); j != nil {
		j.WaitRoom() // a full journal holds writers until Defrag drains it
	}
	be.writeMu.Lock()
	defer be.writeMu.Unlock()
	// Under writeMu the pointer cannot change: Defrag swaps it holding
	// writeMu, and starts and ends its journal holding it.
	j := be.journal.Load()
	tx, err := be.db.Begin(true)
	if err != nil {
		return fmt.Errorf("begin bolt write tx: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			_ = tx.Rollback()
		}
	}()
	w := &writeTx{readTx: readTx{tx: tx}, record: j != nil}
	ferr := fn(w)
	w.done = true
	if ferr != nil {
		return ferr
	}
	if w.err != nil {
		return w.err
	}
	committed = true
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit bolt tx: %w", err)
	}
	if j != nil {
		j.Add(w.ops, w.opBytes)
	}
	return nil
}

// Size is the extent of the file bolt uses (what etcd reports as db size).
// The file itself may be up to 16 MiB longer: bolt grows it ahead in steps.
func (be *Backend) Size() int64 {
	size, _ := be.sizes()
	return size
}

// SizeInUse is Size minus the pages on bolt's freelist, counting the pages
// freed by recent commits that old readers may still see (etcd's
// dbSizeInUse counts only the former). The stats behind it are as of the
// last Update.
func (be *Backend) SizeInUse() int64 {
	_, inUse := be.sizes()
	return inUse
}

func (be *Backend) sizes() (size, inUse int64) {
	if !be.gate.Enter() {
		return 0, 0
	}
	defer be.gate.Exit()
	db := be.current()
	// Inside the transaction: an open tx keeps a retired db from closing.
	err := db.View(func(tx *bolt.Tx) error {
		size = tx.Size()
		st := db.Stats()
		free := int64(st.FreePageN+st.PendingPageN) * int64(db.Info().PageSize)
		inUse = max(size-free, 0)
		return nil
	})
	if err != nil {
		return 0, 0
	}
	return size, inUse
}

// Snapshot writes the whole bolt file as of one read transaction; the stream
// is itself a valid bolt file (see Restore).
func (be *Backend) Snapshot(w io.Writer) (int64, error) {
	rtx, err := be.ReadTx()
	if err != nil {
		return 0, err
	}
	defer rtx.Release()
	n, err := rtx.(*readTx).tx.WriteTo(w)
	if err != nil {
		return n, fmt.Errorf("write bolt snapshot of %s: %w", be.path, err)
	}
	return n, nil
}

// Sync implements backend.Backend.
func (be *Backend) Sync() error {
	if !be.gate.Enter() {
		return backend.ErrClosed
	}
	defer be.gate.Exit()
	if err := be.current().Sync(); err != nil {
		return fmt.Errorf("sync bolt db %s: %w", be.path, err)
	}
	return nil
}

// Close implements backend.Backend.
func (be *Backend) Close() error {
	if !be.gate.Close() {
		return nil
	}
	be.views.Block() // for good: bolt's Close waits for open read transactions
	be.writeFreelist()
	err := be.db.Close()
	be.retired.Wait()
	if err != nil {
		return fmt.Errorf("close bolt db %s: %w", be.path, err)
	}
	return nil
}

// writeFreelist ends a closing backend with one more commit that writes
// bolt's freelist, so that the next Open reads it from its page instead of
// rebuilding it by walking every page of the file (a quarter of the CPU of
// a 1 GiB member's restart). Only this commit writes it: the others skip it
// (SyncFreelist off, as etcd's), and the first commit after the next Open
// marks the file as having none again, so a file left by a crash is one
// whose freelist bolt rebuilds, as before. A failed commit leaves the file
// as it was.
func (be *Backend) writeFreelist() {
	if be.bo.SyncFreelist {
		return // every commit wrote it
	}
	be.db.NoFreelistSync = false
	defer func() { be.db.NoFreelistSync = true }()
	if err := be.db.Update(func(*bolt.Tx) error { return nil }); err != nil {
		be.lg.Warn("bolt freelist not written at close; the next open rebuilds it", zap.String("path", be.path), zap.Error(err))
	}
}

// Restore replaces the bolt file in opts.Dir with a stream written by
// Snapshot. The backend on opts.Dir must be closed. The stream is checked to
// open as a bolt file before it replaces the old one.
func Restore(opts backend.Options, bo Options, r io.Reader) error {
	bo, err := bo.withDefaults()
	if err != nil {
		return err
	}
	if err := fsutil.MkdirAll(opts.Dir, 0o700); err != nil {
		return fmt.Errorf("restore: create bolt dir %s: %w", opts.Dir, err)
	}
	path := filepath.Join(opts.Dir, FileName)
	tmpPath := path + restoreSuffix
	if err := writeFileSync(tmpPath, r); err != nil {
		_ = os.Remove(tmpPath)
		return fmt.Errorf("restore: %w", err)
	}
	if err := checkFile(tmpPath, bo); err != nil {
		_ = os.Remove(tmpPath)
		return fmt.Errorf("restore: snapshot is not a sound bolt file: %w", err)
	}
	if err := os.Rename(tmpPath, path); err != nil {
		_ = os.Remove(tmpPath)
		return fmt.Errorf("restore: rename %s: %w", tmpPath, err)
	}
	if err := fsutil.SyncDir(opts.Dir); err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	return nil
}

// checkFile opens the bolt file at path and walks every page, so that a
// truncated or damaged snapshot is refused before it replaces good data.
func checkFile(path string, bo Options) (err error) {
	if err := checkExtent(path); err != nil {
		return err
	}
	if err := checkPages(path); err != nil {
		return err
	}
	bo.InitialMmapSize = 0
	bo.LockTimeout = time.Second
	opts := bo.boltOptions()
	// Read-only, bolt does not rebuild the freelist on open. Rebuilding it
	// (here by Check, and by every read-write open of a file written without
	// a freelist) walks the page tree on a goroutine of bolt's own, where a
	// damaged page panics beyond recovery and kills the process: walkFile
	// visits the same pages first, on this goroutine, where a panic is an
	// error.
	opts.ReadOnly = true
	db, err := bolt.Open(path, 0o600, opts)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	if err := walkFile(db); err != nil {
		return err
	}
	return db.View(func(tx *bolt.Tx) error {
		var first error
		for err := range tx.Check() {
			if first == nil {
				first = err
			}
		}
		return first
	})
}

// walkFile reads every key of every bucket, nested ones included, so that
// each branch and leaf page is loaded (and checked by bolt) once.
func walkFile(db *bolt.DB) error {
	return db.View(func(tx *bolt.Tx) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("damaged bolt file: %v", p)
			}
		}()
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return walkBucket(b, 0) })
	})
}

func walkBucket(b *bolt.Bucket, depth int) error {
	if depth > 16 {
		return errors.New("damaged bolt file: buckets nested too deep")
	}
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			if c := b.Bucket(k); c != nil {
				return walkBucket(c, depth+1)
			}
		}
		return nil
	})
}

// Offsets in bolt's meta page (page header, then the meta struct), on disk
// in the machine's byte order, which is little-endian wherever kvd runs.
const (
	metaMagicOff    = 16
	metaPageSizeOff = 24
	metaPgidOff     = 56
	metaEnd         = 64
	boltMagic       = 0xED0CDAED
)

// checkExtent refuses a file shorter than its meta pages claim. bolt maps the
// file without comparing the two, and touching a mapped page past the end of
// the file kills the process (SIGBUS) rather than returning an error: a
// snapshot stream cut short must be caught here.
func checkExtent(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	hdr := make([]byte, metaEnd)
	if _, err := f.ReadAt(hdr, 0); err != nil {
		return fmt.Errorf("read meta page 0: %w", err)
	}
	pageSize := int64(binary.LittleEndian.Uint32(hdr[metaPageSizeOff:]))
	if binary.LittleEndian.Uint32(hdr[metaMagicOff:]) != boltMagic || pageSize < 512 || pageSize > 1<<20 {
		return errors.New("not a bolt file (bad magic or page size in meta page 0)")
	}
	for i := int64(0); i < 2; i++ {
		if _, err := f.ReadAt(hdr, i*pageSize); err != nil {
			return fmt.Errorf("read meta page %d: %w", i, err)
		}
		if binary.LittleEndian.Uint32(hdr[metaMagicOff:]) != boltMagic {
			continue // bolt falls back to the other meta page
		}
		if need := int64(binary.LittleEndian.Uint64(hdr[metaPgidOff:])) * pageSize; need > fi.Size() {
			return fmt.Errorf("file is %d bytes, meta page %d needs %d: truncated", fi.Size(), i, need)
		}
	}
	return nil
}

func writeFileSync(path string, r io.Reader) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	return nil
}

type readTx struct {
	tx *bolt.Tx
	// buckets are the shared view's open buckets, or those a writeTx has
	// written (bolt's lookup clones the name and may seek: two allocations
	// a Put); view is nil for a writeTx.
	buckets map[backend.Bucket]*bolt.Bucket
	view    *readview.View[*view]
	gate    *gate.Gate // exited by Release; nil for a writeTx
	// done is set by Release (readTx) or when Update returns (writeTx).
	done bool
}

func (r *readTx) bucket(b backend.Bucket) (*bolt.Bucket, error) {
	if r.done {
		return nil, backend.ErrTxDone
	}
	if bkt, ok := r.buckets[b]; ok {
		return bkt, nil
	}
	if err := b.Validate(); err != nil {
		return nil, err
	}
	return r.tx.Bucket([]byte(b)), nil
}

func (r *readTx) Get(b backend.Bucket, key []byte) ([]byte, bool, error) {
	bkt, err := r.bucket(b)
	if err != nil || bkt == nil || len(key) == 0 {
		return nil, false, err
	}
	// A cursor tells an empty value from a missing key; Bucket.Get does not.
	var k, v []byte
	if r.view != nil && b == backend.Key {
		c, _ := r.view.Tx.keyCursors.Get().(*bolt.Cursor)
		if c == nil {
			c = bkt.Cursor()
		}
		// k and v point into the map, not into the cursor.
		k, v = c.Seek(key)
		r.view.Tx.keyCursors.Put(c)
	} else {
		k, v = bkt.Cursor().Seek(key)
	}
	if k == nil || !bytes.Equal(k, key) {
		return nil, false, nil
	}
	if v == nil {
		v = []byte{}
	}
	return v, true, nil
}

func (r *readTx) Range(b backend.Bucket, start, end []byte, limit int, fn func(k, v []byte) bool) error {
	bkt, err := r.bucket(b)
	if err != nil || bkt == nil {
		return err
	}
	c := bkt.Cursor()
	var k, v []byte
	if len(start) == 0 {
		k, v = c.First()
	} else {
		k, v = c.Seek(start)
	}
	for n := 0; k != nil; k, v = c.Next() {
		if end != nil && bytes.Compare(k, end) >= 0 {
			return nil
		}
		if v == nil {
			v = []byte{}
		}
		if !fn(k, v) {
			return nil
		}
		if n++; limit > 0 && n >= limit {
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
	err error // first failed write; Update then commits nothing
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
	if err := b.Validate(); err != nil {
		return w.fail(err)
	}
	if len(key) == 0 {
		return w.fail(fmt.Errorf("bolt put in bucket %s: empty key", b))
	}
	bkt := w.buckets[b]
	if bkt == nil {
		var err error
		if bkt, err = w.tx.CreateBucketIfNotExists([]byte(b)); err != nil {
			return w.fail(fmt.Errorf("bolt create bucket %s: %w", b, err))
		}
		bkt.FillPercent = fillPercent(b)
		if w.buckets == nil {
			w.buckets = make(map[backend.Bucket]*bolt.Bucket, 2)
		}
		w.buckets[b] = bkt
	}
	// bolt keeps the caller's slices until commit; copy so callers may reuse.
	buf := make([]byte, len(key)+len(value))
	copy(buf, key)
	copy(buf[len(key):], value)
	k, v := buf[:len(key):len(key)], buf[len(key):]
	if err := bkt.Put(k, v); err != nil {
		return w.fail(fmt.Errorf("bolt put in bucket %s: %w", b, err))
	}
	if w.record {
		// bolt does not modify k and v, and nobody else holds them.
		w.ops = append(w.ops, op{bucket: b, key: k, value: v})
		w.opBytes += int64(len(buf))
	}
	return nil
}

// fillPercent is how full bolt leaves the pages it splits. The MVCC store
// writes the Key bucket in key order (revisions only grow), so no insert
// ever lands in the middle of a page it filled: pack those pages to 90%, as
// etcd's UnsafeSeqPut does, rather than leave half of each one empty (which
// made kvd's bolt file 1.5x etcd's at 1 GiB of values).
func fillPercent(b backend.Bucket) float64 {
	if b == backend.Key {
		return 0.9
	}
	return bolt.DefaultFillPercent
}

func (w *writeTx) Delete(b backend.Bucket, key []byte) error {
	bkt, err := w.bucket(b)
	if err != nil {
		if errors.Is(err, backend.ErrTxDone) {
			return err
		}
		return w.fail(err)
	}
	if bkt == nil || len(key) == 0 {
		return nil
	}
	if err := bkt.Delete(key); err != nil {
		return w.fail(fmt.Errorf("bolt delete in bucket %s: %w", b, err))
	}
	if w.record {
		w.ops = append(w.ops, op{bucket: b, key: bytes.Clone(key), del: true})
		w.opBytes += int64(len(key))
	}
	return nil
}
