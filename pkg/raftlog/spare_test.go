package raftlog

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"golang.org/x/sys/unix"
)

// bigEnts returns entries lo..hi of term with size-byte payloads.
func bigEnts(lo, hi, term uint64, size int) []*raftpb.Entry {
	es := ents(lo, hi, term)
	for _, e := range es {
		e.Data = append(e.Data, bytes.Repeat([]byte{'x'}, size)...)
	}
	return es
}

// saveUntil saves entries from next on, ten of 1 KB at a time, until done
// holds, and returns the next index.
func saveUntil(t *testing.T, l *Log, next uint64, done func() bool) uint64 {
	t.Helper()
	for !done() {
		mustSave(t, l, nil, bigEnts(next, next+9, 1, 1000), nil)
		next += 10
	}
	return next
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("stat: %v", err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// waitSpare waits until the Log's spare is filled.
func waitSpare(t *testing.T, l *Log) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l.mu.Lock()
		ready := l.spareReadyLocked()
		l.mu.Unlock()
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the spare segment was not filled within 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The segment after a cut is the spare the Log filled with zeros in the
// background (the same file, renamed), so its appends fdatasync written
// blocks; the entries read back after a reopen, and Close removes the spare.
func TestSpareSegmentBecomesNextSegment(t *testing.T) {
	if !canZeroFill {
		t.Skip("no spare segments on this platform")
	}
	dir := t.TempDir()
	o := testOpts{segmentSize: 1 << 20, sync: true, prealloc: true}
	l := openLog(t, dir, o)
	mustSave(t, l, hardState(1, 1, 0), bigEnts(1, 10, 1, 1000), nil)
	if l.spare != nil {
		t.Fatal("a spare started before the segment was half full")
	}
	next := saveUntil(t, l, 11, func() bool { return l.spare != nil })
	if l.size < o.segmentSize/2 {
		t.Fatalf("a spare started at %d bytes of %d", l.size, o.segmentSize)
	}
	waitSpare(t, l)
	spare := filepath.Join(dir, spareName)
	if fi, err := os.Stat(spare); err != nil || fi.Size() != o.segmentSize {
		t.Fatalf("spare %s: %v, %v; want %d bytes", spare, fi, err, o.segmentSize)
	}
	spareIno := inode(t, spare)

	// Past the segment size: the next Save cuts and takes the spare.
	saveUntil(t, l, next, func() bool { return len(l.segs) == 2 })
	seg := filepath.Join(dir, l.segs[1].name)
	if got := inode(t, seg); got != spareIno {
		t.Fatalf("second segment is inode %d, the spare was %d: it was not used", got, spareIno)
	}
	if !l.zeroed {
		t.Fatal("the Log does not know its segment was zero-filled")
	}
	want := viewOf(t, l.Storage())
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(spare); !os.IsNotExist(err) {
		t.Fatalf("spare after Close: %v; want it removed", err)
	}
	l = openLog(t, dir, o)
	defer l.Close()
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen:\n got %+v\nwant %+v", got, want)
	}
}

// A segment that was not zero-filled (here a new log's first) is cut early,
// at earlyCutSize rather than the segment size, once a spare is ready.
func TestUnfilledSegmentCutEarly(t *testing.T) {
	if !canZeroFill {
		t.Skip("no spare segments on this platform")
	}
	dir := t.TempDir()
	o := testOpts{segmentSize: 16 << 20, prealloc: true}
	l := openLog(t, dir, o)
	defer l.Close()
	mustSave(t, l, hardState(1, 1, 0), ents(1, 1, 1), nil)
	if l.zeroed {
		t.Fatal("a new log's first segment cannot have been a spare yet")
	}
	next := saveUntil(t, l, 2, func() bool { return l.spare != nil })
	waitSpare(t, l)
	next = saveUntil(t, l, next, func() bool { return l.size >= earlyCutSize })
	if len(l.segs) != 1 {
		t.Fatalf("%d segments before the early cut size; want 1", len(l.segs))
	}
	mustSave(t, l, nil, ents(next, next, 1), nil)
	if len(l.segs) != 2 || !l.zeroed {
		t.Fatalf("after %d bytes: %d segments, zeroed %v; want a cut to the spare", earlyCutSize, len(l.segs), l.zeroed)
	}
	if fi, err := os.Stat(filepath.Join(dir, l.segs[0].name)); err != nil || fi.Size() >= o.segmentSize {
		t.Fatalf("first segment: %v, %v; want it truncated to its records", fi, err)
	}
}

// A spare left by a crash is removed by Open, whatever it holds, and never
// read as a segment.
func TestLeftoverSpareRemoved(t *testing.T) {
	dir := t.TempDir()
	o := testOpts{segmentSize: 1 << 20, prealloc: true}
	l := openLog(t, dir, o)
	mustSave(t, l, hardState(1, 1, 1), ents(1, 3, 1), nil)
	want := viewOf(t, l.Storage())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	spare := filepath.Join(dir, spareName)
	if err := os.WriteFile(spare, []byte("half-written spare"), 0o600); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, o)
	defer l.Close()
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after reopen with a leftover spare:\n got %+v\nwant %+v", got, want)
	}
	if b, err := os.ReadFile(spare); err == nil && bytes.Equal(b, []byte("half-written spare")) {
		t.Fatal("the leftover spare is still there")
	}
}

// A log written a little, as a tool or a short-lived member writes it,
// never fills a spare.
func TestNoSpareForSmallLog(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testOpts{prealloc: true})
	mustSave(t, l, hardState(1, 1, 3), bigEnts(1, 100, 1, 1000), nil)
	if l.spare != nil {
		t.Fatal("a spare started for 100 KB of a 64 MiB segment")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, spareName)); !os.IsNotExist(err) {
		t.Fatalf("spare file: %v", err)
	}
}

// Without preallocation there is no spare.
func TestNoSpareWithoutPreallocation(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, testOpts{segmentSize: 1 << 20})
	defer l.Close()
	mustSave(t, l, hardState(1, 1, 0), bigEnts(1, 1000, 1, 1000), nil)
	if l.spare != nil {
		t.Fatal("a Log without preallocation prepares a spare")
	}
}

// A crash after a spare became the last segment but before the first write
// into it was synced leaves a segment of zeros: Open removes it and the log
// ends at the previous segment, where the last acknowledged Save ended.
func TestSpareSegmentOfZerosAfterCrash(t *testing.T) {
	if !canZeroFill {
		t.Skip("no spare segments on this platform")
	}
	dir := t.TempDir()
	o := testOpts{segmentSize: 64 << 10, sync: true, prealloc: true}
	l := openLog(t, dir, o)
	var next uint64 = 1
	var want logView
	for len(l.segs) < 2 {
		want = viewOf(t, l.Storage())
		waitSpareIfStarted(t, l)
		mustSave(t, l, hardState(1, 1, next-1), bigEnts(next, next+9, 1, 1000), nil)
		next += 10
	}
	if !l.zeroed {
		t.Fatal("the second segment was not the spare")
	}
	last := filepath.Join(dir, l.segs[1].name)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// What the disk holds if the records never got there: the spare's zeros.
	if err := os.WriteFile(last, make([]byte, o.segmentSize), 0o600); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, o)
	defer l.Close()
	if got := viewOf(t, l.Storage()); !reflect.DeepEqual(got, want) {
		t.Fatalf("after losing the new segment's first write:\n got %+v\nwant %+v", got, want)
	}
	if _, err := os.Stat(last); !os.IsNotExist(err) {
		t.Fatalf("the segment of zeros is still there: %v", err)
	}
}

func waitSpareIfStarted(t *testing.T, l *Log) {
	t.Helper()
	l.mu.Lock()
	started := l.spare != nil
	l.mu.Unlock()
	if started {
		waitSpare(t, l)
	}
}

// On a file system with less than two segments free, no spare is written
// (it would take the last bytes another writer needs): the cut reserves its
// segment as before and the log goes on.
func TestNoSpareOnNearlyFullDisk(t *testing.T) {
	if !canZeroFill {
		t.Skip("no spare segments on this platform")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=2560k"); err != nil {
		t.Skipf("mount a tmpfs (needs root): %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	o := testOpts{segmentSize: 1 << 20, prealloc: true}
	l := openLog(t, dir, o)
	defer l.Close()
	next := saveUntil(t, l, 1, func() bool { return l.spare != nil })
	<-l.spare.done
	if l.spare.err == nil {
		t.Fatal("a spare was written with less than two segments free")
	}
	if _, err := os.Stat(filepath.Join(dir, spareName)); !os.IsNotExist(err) {
		t.Fatalf("spare file after the refusal: %v", err)
	}
	saveUntil(t, l, next, func() bool { return len(l.segs) == 2 })
	if l.zeroed {
		t.Fatal("the new segment claims to be a spare")
	}
}

// Close stops a spare still being written, waits for its goroutine and
// removes its file.
func TestCloseStopsSpare(t *testing.T) {
	if !canZeroFill {
		t.Skip("no spare segments on this platform")
	}
	dir := t.TempDir()
	// 64 MiB at spareWriteRate takes 2 s: Close comes long before.
	l := openLog(t, dir, testOpts{segmentSize: 64 << 20, prealloc: true})
	saveUntil(t, l, 1, func() bool { return l.spare != nil })
	s := l.spare
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-s.done:
	default:
		t.Fatal("Close returned before the spare's goroutine ended")
	}
	if !errors.Is(s.err, errSpareStopped) {
		t.Fatalf("spare ended with %v, want it stopped", s.err)
	}
	if _, err := os.Stat(filepath.Join(dir, spareName)); !os.IsNotExist(err) {
		t.Fatalf("spare file after Close: %v", err)
	}
}
