// Package migrate moves a member's data from one storage engine to the
// other, offline: `kvd migrate --data-dir DIR --to badger|bolt`.
//
// It copies every bucket (revisions, leases, members, auth, alarms, meta:
// the consistent index and term, the compaction marks) from a read view of
// the source backend straight into the target engine's bulk load
// (backend.BulkLoader), bucket by bucket in key order, into a new backend
// built beside the source in <snap>/<to>.migrate. The same pass sums every
// record (digest.go) and computes etcd's HashKV at the current revision
// from the Key bucket (kvhash.go). It then reopens the copy and checks it
// in one pass the same way (every bucket's records, bytes and checksum, and
// HashKV) before switching the member to it. recover.go explains the switch and why a crash anywhere
// leaves one complete backend.
package migrate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/backend"
	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/datadir"
	"github.com/kvd-dev/kvd/pkg/engine"
	"github.com/kvd-dev/kvd/pkg/fsutil"
	"github.com/kvd-dev/kvd/pkg/progress"
)

// Options say what to migrate.
type Options struct {
	// Config gives the data dir and the engines' options (backend.bolt,
	// backend.badger); its backend.engine is not used.
	Config *config.Config
	// From is the source engine; empty means the one the data dir holds.
	// It is needed only when the data dir holds both.
	From string
	// To is the target engine.
	To string
	// Progress receives the progress of the copy; nil discards it.
	Progress io.Writer
	// Logger may be nil.
	Logger *zap.Logger
	// BatchBytes sizes the target's updates when it has no bulk load
	// (backend.BulkLoader; both engines have one, which commits as it
	// sees fit); 0 means DefaultBatchBytes.
	BatchBytes int
}

// DefaultBatchBytes sizes the updates of a copy into a backend without a
// bulk load: 4 MiB stays under the write count of one Badger update
// engine.Open allows (24 MiB / 96 = 262144 writes) down to records of 16
// bytes.
var DefaultBatchBytes = map[string]int{
	"bolt":   4 << 20,
	"badger": 4 << 20,
}

// Result is what Run did.
type Result struct {
	From, To string
	// Buckets are the records, bytes and checksum of each bucket, equal in
	// the source and the target.
	Buckets map[backend.Bucket]BucketSum
	// Records and Bytes sum Buckets (key and value bytes).
	Records, Bytes int64
	// Keys is the number of keys live at Rev.
	Keys int
	// Rev and CompactRev are the store's current and compaction revisions.
	Rev, CompactRev int64
	// ConsistentIndex and Term are the raft index and term the backend
	// holds.
	ConsistentIndex, Term uint64
	// HashBefore and HashAfter are etcd's HashKV at Rev on the source and
	// on the target (equal, or Run fails).
	HashBefore, HashAfter uint32
	// SourceSize and TargetSize are the backends' sizes on disk.
	SourceSize, TargetSize int64
	// Copy is the time the copy took, Verify the check of the target,
	// Total the whole run.
	Copy, Verify, Total time.Duration
	// Warnings are problems that did not stop the migration (the old
	// backend could not be deleted: the next start deletes it).
	Warnings []string
}

var (
	// ErrSameEngine is returned when the data dir already holds the target
	// engine's backend and no other.
	ErrSameEngine = errors.New("already on the target engine")
	// ErrNoBackend is returned when the data dir holds no backend.
	ErrNoBackend = errors.New("no backend in the data dir")
	// ErrBothEngines is returned when the data dir holds both engines'
	// backends and Options.From does not say which one is the member's.
	ErrBothEngines = errors.New("the data dir holds a backend of each engine")
	// ErrVerify is returned when the copy does not match the source.
	ErrVerify = errors.New("the copy does not match the source")
	// ErrNoSpace is returned (wrapped) when the disk filled during the copy.
	ErrNoSpace = engine.ErrNoSpace
)

// Test hooks: openEngine opens backends; step is called at each named step
// of Run ("copied", "verified", "aside", "switched") and fails it by
// returning an error.
var (
	openEngine = engine.Open
	step       = func(string) error { return nil }
)

// Run migrates the data dir of o.Config to o.To. It holds the data dir's
// lock (datadir.Acquire) while it runs, so it fails with datadir.ErrInUse
// when a member runs on it. On error the source backend is the member's,
// untouched, and no partial target is left; the one exception returns a
// Result with the error: the switch was done but its fsync failed.
func Run(o Options) (res *Result, err error) {
	start := time.Now()
	c := o.Config
	lg := o.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	to, err := engine.Canonical(o.To)
	if err != nil {
		return nil, fmt.Errorf("--to: %w", err)
	}
	if c.DataDir == "" {
		return nil, errors.New("no data dir given")
	}
	// Acquire would create a missing data dir: a typo must not pass.
	if fi, err := os.Stat(c.DataDir); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("data dir %s is not a directory", c.DataDir)
	}
	lock, err := datadir.Acquire(c.DataDir)
	if err != nil {
		return nil, err
	}
	defer func() { _ = lock.Release() }()

	snap := c.SnapDir()
	if err := Recover(snap, lg); err != nil {
		return nil, err
	}
	from, stale, err := source(snap, o.From, to)
	if err != nil {
		return nil, fmt.Errorf("data dir %s: %w", c.DataDir, err)
	}
	res = &Result{From: from, To: to}
	srcDir, tmp, dst := filepath.Join(snap, from), filepath.Join(snap, to+tempSuffix), filepath.Join(snap, to)
	batch := o.BatchBytes
	if batch <= 0 {
		batch = DefaultBatchBytes[to]
	}

	// Until the source is set aside, a failure removes the partial copy.
	switched := false
	defer func() {
		if err == nil || switched {
			return
		}
		if rerr := Recover(snap, lg); rerr != nil {
			err = errors.Join(err, fmt.Errorf("clean up: %w", rerr))
		}
	}()

	src, err := openEngine(c, from, srcDir, lg)
	if err != nil {
		return nil, err
	}
	srcOpen := true
	closeSrc := func() error {
		if !srcOpen {
			return nil
		}
		srcOpen = false
		return src.Close()
	}
	defer func() {
		if cerr := closeSrc(); cerr != nil && err == nil {
			err = fmt.Errorf("close %s backend: %w", from, cerr)
		}
	}()
	res.SourceSize = src.Size()
	if err := checkSpace(c, to, snap, src.SizeInUse(), o.Progress); err != nil {
		return nil, err
	}
	// The copy, from one read view of the source, which is summed and
	// hashed as it is read.
	tx, err := src.ReadTx()
	if err != nil {
		return nil, fmt.Errorf("read the %s backend: %w", from, err)
	}
	defer tx.Release() // before the source closes
	srcScan, err := newScan(tx)
	if err != nil {
		return nil, fmt.Errorf("read the %s backend: %w", from, err)
	}

	// The copy: the target need not be durable commit by commit (a crash
	// discards it), so it opens without fsyncs and is synced once.
	t0 := time.Now()
	nc := *c
	nc.UnsafeNoFsync = true
	tgt, err := openEngine(&nc, to, tmp, lg)
	if err != nil {
		return nil, err
	}
	w := o.Progress
	if w == nil {
		w = io.Discard
	}
	meter := progress.New(w, fmt.Sprintf("copy %s -> %s", from, to), res.SourceSize)
	err = copyBackend(tx, srcScan, tgt, batch, meter)
	meter.Done()
	tx.Release()
	if err == nil {
		err = tgt.Sync()
	}
	if cerr := tgt.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = step("copied")
	}
	if err != nil {
		return nil, noSpace(fmt.Errorf("copy %s to %s: %w", from, to, err), snap, res.SourceSize)
	}
	before, err := srcScan.kv.result()
	if err != nil {
		return nil, fmt.Errorf("read the %s backend: %w", from, err)
	}
	sums := srcScan.d.result()
	res.Copy, res.Buckets = time.Since(t0), sums
	res.Rev, res.CompactRev, res.Keys = before.rev, before.compactRev, before.keys
	res.ConsistentIndex, res.Term, res.HashBefore = before.ci, before.term, before.hash
	for _, s := range sums {
		res.Records += s.Records
		res.Bytes += s.Bytes
	}

	// The check, on the copy reopened as kvd will open it.
	t0 = time.Now()
	if err := verify(c, to, tmp, sums, before, res, lg); err != nil {
		return nil, err
	}
	if err := syncTree(tmp); err != nil {
		return nil, noSpace(fmt.Errorf("sync %s: %w", tmp, err), snap, res.SourceSize)
	}
	res.Verify = time.Since(t0)
	if err := step("verified"); err != nil {
		return nil, err
	}

	// The switch (see recover.go).
	if err := closeSrc(); err != nil {
		return nil, fmt.Errorf("close %s backend: %w", from, err)
	}
	if stale {
		// --from named the source beside a <to> backend: that one is
		// stale and goes first, so at most one .migrated exists.
		if err := renameSync(dst, dst+migratedSuffix); err != nil {
			return nil, err
		}
		if err := removeAll(dst + migratedSuffix); err != nil {
			return nil, fmt.Errorf("remove the stale %s backend: %w", to, err)
		}
	}
	if err := renameSync(srcDir, srcDir+migratedSuffix); err != nil {
		return nil, err
	}
	if err := step("aside"); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return nil, err
	}
	switched = true // the commit point, whether or not the fsync below works
	if err := fsutil.SyncDir(snap); err != nil {
		return res, fmt.Errorf("the data dir uses %s now, but making that durable failed (after a power cut it may be back on %s): %w", to, from, err)
	}
	if err := step("switched"); err != nil {
		return nil, err
	}
	// Each cleanup is independent; what fails here, the next start's
	// Recover finishes.
	if err := removeAll(srcDir + migratedSuffix); err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("remove the old %s backend %s: %v (kvd removes it at its next start)", from, srcDir+migratedSuffix, err))
	}
	if err := removeIndexFiles(snap, nil); err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%v (kvd removes it, or checks it against the backend, at its next start)", err))
	}
	if err := fsutil.SyncDir(snap); err != nil {
		res.Warnings = append(res.Warnings, err.Error())
	}
	res.Total = time.Since(start)
	return res, nil
}

// source picks the engine to migrate from. stale reports a backend of the
// target engine beside it (only when from was given).
func source(snap, from, to string) (src string, stale bool, err error) {
	present, err := engine.Present(snap)
	if err != nil {
		return "", false, err
	}
	if from != "" {
		if from, err = engine.Canonical(from); err != nil {
			return "", false, fmt.Errorf("--from: %w", err)
		}
		if from == to {
			return "", false, fmt.Errorf("%w: --from and --to are both %s", ErrSameEngine, to)
		}
		if !contains(present, from) {
			return "", false, fmt.Errorf("%w: no %s backend in %s (found: %s)", ErrNoBackend, from, snap, list(present))
		}
		return from, contains(present, to), nil
	}
	switch {
	case len(present) == 0:
		return "", false, fmt.Errorf("%w: no bolt or badger backend in %s", ErrNoBackend, snap)
	case len(present) > 1:
		return "", false, fmt.Errorf("%w (%s): say which one the member uses with --from", ErrBothEngines, list(present))
	case present[0] == to:
		return "", false, fmt.Errorf("%w: it holds a %s backend and no other", ErrSameEngine, to)
	}
	return present[0], false, nil
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

func list(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// progressEvery is how many bytes the copy counts before it tells the
// progress meter.
const progressEvery = 1 << 20

// copyBackend copies every record of tx into dst, which is empty, bucket by
// bucket in key order, and hands each to sc on the way (sc.async). It uses dst's bulk
// load, else updates of about batchBytes.
func copyBackend(tx backend.ReadTx, sc *scan, dst backend.Backend, batchBytes int, m *progress.Meter) error {
	load := func(put func(b backend.Bucket, k, v []byte) error) error {
		a := sc.async()
		defer a.wait()
		var n int64
		err := forEach(tx, func(b backend.Bucket, k, v []byte) error {
			a.add(b, k, v)
			if n += int64(len(k) + len(v)); n >= progressEvery {
				m.Add(n)
				n = 0
			}
			return put(b, k, v)
		})
		m.Add(n)
		return err
	}
	if bl, ok := dst.(backend.BulkLoader); ok {
		return bl.BulkLoad(load)
	}
	return updateInBatches(dst, batchBytes, load)
}

// updateInBatches loads what load puts with Updates of about batchBytes.
// It copies the records: a read view's slices last only as long as the
// call that hands them over.
func updateInBatches(be backend.Backend, batchBytes int, load func(put func(b backend.Bucket, k, v []byte) error) error) error {
	type record struct {
		b    backend.Bucket
		k, v []byte
	}
	var (
		batch []record
		buf   []byte
		n     int
	)
	flush := func() error {
		err := be.Update(func(w backend.WriteTx) error {
			for _, r := range batch {
				if err := w.Put(r.b, r.k, r.v); err != nil {
					return err
				}
			}
			return nil
		})
		batch, buf, n = batch[:0], nil, 0
		return err
	}
	err := load(func(b backend.Bucket, k, v []byte) error {
		if len(buf)+len(k)+len(v) > cap(buf) {
			// A new buffer: the old one backs records of the batch.
			buf = make([]byte, 0, max(batchBytes, len(k)+len(v)))
		}
		buf = append(append(buf, k...), v...)
		kv := buf[len(buf)-len(k)-len(v):]
		batch = append(batch, record{b, kv[:len(k):len(k)], kv[len(k):]})
		if n += len(kv); n >= batchBytes {
			return flush()
		}
		return nil
	})
	if err == nil && len(batch) > 0 {
		err = flush()
	}
	return err
}

// verify reopens the copy in dir with the member's options and checks it
// against the source's digest and store state.
func verify(c *config.Config, to, dir string, sums map[backend.Bucket]BucketSum, before state, res *Result, lg *zap.Logger) (err error) {
	be, err := openEngine(c, to, dir, lg)
	if err != nil {
		return fmt.Errorf("verify: reopen the copy: %w", err)
	}
	defer func() {
		if cerr := be.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("verify: close the copy: %w", cerr)
		}
	}()
	got, after, err := scanBackend(be)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if d := compareDigests(sums, got); d != "" {
		return fmt.Errorf("%w: %s", ErrVerify, d)
	}
	res.HashAfter = after.hash
	if after != before {
		return fmt.Errorf("%w: source store %+v, copy %+v", ErrVerify, before, after)
	}
	res.TargetSize = be.Size()
	return nil
}

// renameSync renames old to new and makes it durable.
func renameSync(old, new string) error {
	if err := os.Rename(old, new); err != nil {
		return err
	}
	return fsutil.SyncDir(filepath.Dir(new))
}

// noSpace makes a full disk's error say so, and what the copy needs.
func noSpace(err error, snap string, need int64) error {
	if !errors.Is(err, syscall.ENOSPC) && !strings.Contains(err.Error(), "no space left on device") {
		return err
	}
	return fmt.Errorf("%w: %w (%s: the copy needs about the source's size, %s; the partial copy is removed, the source untouched)",
		ErrNoSpace, err, snap, progress.Bytes(need))
}

// checkSpace compares the free space of snap's file system with what the
// copy needs, about the source's live data (inUse). Bolt reports a full
// disk as a write error, which Run turns into ErrNoSpace, so for it a
// shortfall is only a warning. Badger writes its memtable log through a
// memory map, where a full disk is a SIGBUS that kills the process (the
// next migrate or kvd start removes the partial copy): for it Run refuses
// up front unless there is room for the data and for the memtables it
// fills on the way (two of them at most, each ~100/15 of the 24 MiB update
// limit engine.Open sets, or backend.badger.mem-table-size).
func checkSpace(c *config.Config, to, snap string, inUse int64, w io.Writer) error {
	if err := engine.CheckLoadSpace(c, to, snap, inUse); err != nil {
		return err
	}
	if free, ok := fsutil.FreeBytes(snap); ok && free < inUse && w != nil {
		fmt.Fprintf(w, "warning: %s has %s free, the source holds %s: the copy may not fit\n", snap, progress.Bytes(free), progress.Bytes(inUse))
	}
	return nil
}
