// Package migrate moves a member's data from one storage engine to the
// other, offline: `kvd migrate --data-dir DIR --to badger|bolt`.
//
// It copies every bucket (revisions, leases, members, auth, alarms, meta:
// the consistent index and term, the compaction marks) from a read view of
// the source backend into a new backend of the target engine, built beside
// it in <snap>/<to>.migrate, through the engine-neutral dump that members
// also send each other as raft snapshots (backend.DumpTx into backend.Load).
// It then reopens the copy and checks it (every bucket's records, bytes and
// checksum, and etcd's HashKV at the current revision) before switching the
// member to it. recover.go explains the switch and why a crash anywhere
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
	"github.com/kvd-dev/kvd/pkg/mvcc"
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
	// BatchBytes sizes the target's updates; 0 means the engine's default
	// (DefaultBatchBytes).
	BatchBytes int
}

// DefaultBatchBytes sizes the updates of a bulk load into each engine.
// Measured with BenchmarkBatchBytes on 256 MiB of 1 KiB values (2 cores):
// Badger loads at 77, 112 and 102 MiB/s with 1, 4 and 16 MiB updates, bolt
// at 92, 96, 94 and 59 MiB/s with 1, 4, 16 and 64 MiB (a bigger bolt
// commit rebalances and spills more at once). Badger's is also bounded by
// the write count of one update engine.Open allows (24 MiB / 96 = 262144
// writes): at the smallest record Load counts (18 bytes) 4 MiB stays under
// it.
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
	// DumpBytes is the size of the dump stream the copy went through.
	DumpBytes int64
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
	// The source's store state (index rebuilt, HashKV) is read beside the
	// copy: both only read, and each alone leaves a core idle.
	var before state
	stateDone := make(chan error, 1)
	go func() {
		var err error
		before, err = storeState(src, lg)
		stateDone <- err
	}()
	waited := false
	waitState := func() error {
		if waited {
			return nil
		}
		waited = true
		if err := <-stateDone; err != nil {
			return fmt.Errorf("read the %s backend: %w", from, err)
		}
		return nil
	}
	defer func() { _ = waitState() }() // before the source closes

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
	sums, n, err := copyBackend(src, tgt, batch, meter)
	meter.Done()
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
	res.Copy, res.DumpBytes, res.Buckets = time.Since(t0), n, sums
	if err := waitState(); err != nil {
		return nil, err
	}
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
	if err := removeAll(srcDir + migratedSuffix); err != nil {
		res.Warnings = append(res.Warnings, fmt.Sprintf("remove the old %s backend %s: %v (kvd removes it at its next start)", from, srcDir+migratedSuffix, err))
	} else if err := fsutil.SyncDir(snap); err != nil {
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

// errLoadEnded stops the dump when the load stopped first.
var errLoadEnded = errors.New("load ended")

// copyBackend streams a dump of one read view of src into dst and returns
// the source's digest and the dump's size.
func copyBackend(src, dst backend.Backend, batchBytes int, m *progress.Meter) (map[backend.Bucket]BucketSum, int64, error) {
	tx, err := src.ReadTx()
	if err != nil {
		return nil, 0, fmt.Errorf("read tx: %w", err)
	}
	defer tx.Release()
	d := newDigest()
	pr, pw := io.Pipe()
	type dumped struct {
		n   int64
		err error
	}
	done := make(chan dumped, 1)
	go func() {
		n, err := backend.DumpTx(digestTx{ReadTx: tx, d: d}, m.Writer(pw))
		_ = pw.CloseWithError(err)
		done <- dumped{n, err}
	}()
	lerr := backend.Load(dst, pr, batchBytes)
	_ = pr.CloseWithError(errLoadEnded)
	dr := <-done
	if dr.err != nil && !errors.Is(dr.err, errLoadEnded) {
		return nil, 0, dr.err
	}
	if lerr != nil {
		return nil, 0, lerr
	}
	return d.result(), dr.n, nil
}

// state is what the mvcc store reads from a backend.
type state struct {
	hash            uint32
	rev, compactRev int64
	keys            int
	ci, term        uint64
}

// storeState opens the mvcc store on be (it writes nothing: no compaction
// runs, nothing is applied) and reads its HashKV at the current revision.
func storeState(be backend.Backend, lg *zap.Logger) (st state, err error) {
	s, err := mvcc.OpenWithOptions(be, mvcc.Options{Logger: lg.Named("mvcc"), ExternalCompactor: true})
	if err != nil {
		return st, err
	}
	defer func() { err = errors.Join(err, s.Close()) }()
	st.hash, st.rev, st.compactRev, err = s.HashByRev(0)
	if err != nil {
		return st, err
	}
	st.ci, st.term = s.ConsistentIndex(), s.ConsistentTerm()
	r := s.Read()
	defer r.End()
	rr, err := r.Range([]byte{0}, []byte{0}, mvcc.RangeOptions{Count: true})
	if err != nil {
		return st, err
	}
	st.keys = rr.Count
	return st, nil
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
	var (
		after state
		serr  error
		done  = make(chan struct{})
	)
	go func() {
		defer close(done)
		after, serr = storeState(be, lg)
	}()
	got, err := digestBackend(be)
	<-done
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if d := compareDigests(sums, got); d != "" {
		return fmt.Errorf("%w: %s", ErrVerify, d)
	}
	if serr != nil {
		return fmt.Errorf("verify: open the copy's store: %w", serr)
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
	if free, ok := engine.FreeBytes(snap); ok && free < inUse && w != nil {
		fmt.Fprintf(w, "warning: %s has %s free, the source holds %s: the copy may not fit\n", snap, progress.Bytes(free), progress.Bytes(inUse))
	}
	return nil
}
