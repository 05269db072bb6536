package transport

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// member is one transport on a loopback listener, recording what it gets.
type member struct {
	*Transport
	id   uint64
	url  string
	addr string

	mu          sync.Mutex
	got         []*raftpb.Message
	snapDir     string   // where ReceiveSnapshot writes what it reads
	snaps       []string // files ReceiveSnapshot accepted
	unreachable map[uint64]int
	snapStatus  map[uint64][]bool
}

func (m *member) Received() []*raftpb.Message {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]*raftpb.Message(nil), m.got...)
}

func (m *member) Unreachables(id uint64) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unreachable[id]
}

func (m *member) SnapStatus(id uint64) []bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]bool(nil), m.snapStatus[id]...)
}

func (m *member) Health(id uint64) PeerStatus {
	for _, s := range m.PeerHealth() {
		if s.ID == id {
			return s
		}
	}
	return PeerStatus{}
}

// startMember starts a transport for id in cluster at addr ("" picks a port).
func startMember(t testing.TB, id, cluster uint64, addr string, tweak func(*Config)) *member {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	m := &member{id: id, addr: lis.Addr().String(), url: "http://" + lis.Addr().String(),
		unreachable: map[uint64]int{}, snapStatus: map[uint64][]bool{}, snapDir: t.TempDir()}
	cfg := Config{
		ID: id, ClusterID: cluster,
		Receive: func(msgs []*raftpb.Message) {
			m.mu.Lock()
			m.got = append(m.got, msgs...)
			m.mu.Unlock()
		},
		ReceiveSnapshot: func(_ *raftpb.Message, data io.Reader) error {
			path, err := receiveToFile(m.snapDir, data)
			if err != nil {
				return err
			}
			m.mu.Lock()
			m.snaps = append(m.snaps, path)
			m.mu.Unlock()
			return nil
		},
		Unreachable: func(id uint64) {
			m.mu.Lock()
			m.unreachable[id]++
			m.mu.Unlock()
		},
		SnapshotStatus: func(id uint64, ok bool) {
			m.mu.Lock()
			m.snapStatus[id] = append(m.snapStatus[id], ok)
			m.mu.Unlock()
		},
	}
	if tweak != nil {
		tweak(&cfg)
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Transport = tr
	tr.Start(lis)
	t.Cleanup(tr.Stop)
	return m
}

// waitFor polls cond until it holds or 20 s pass.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func connect(t testing.TB, ms ...*member) {
	t.Helper()
	for _, a := range ms {
		for _, b := range ms {
			if a != b {
				if err := a.AddPeer(b.id, []string{b.url}); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, a := range ms {
		for _, b := range ms {
			if a != b {
				waitFor(t, fmt.Sprintf("stream %x->%x", a.id, b.id), func() bool { return a.Health(b.id).Active })
			}
		}
	}
}

func msg(from, to, seq, stream uint64) *raftpb.Message {
	return &raftpb.Message{
		Type: raftpb.MsgApp.Enum(), From: proto.Uint64(from), To: proto.Uint64(to),
		Index: proto.Uint64(seq), Commit: proto.Uint64(stream),
		Entries: []*raftpb.Entry{{Index: proto.Uint64(seq), Data: []byte(fmt.Sprintf("entry %d/%d", stream, seq))}},
	}
}

func TestOrderedDeliveryBetweenThree(t *testing.T) {
	const senders, perSender = 4, 500
	ms := []*member{startMember(t, 1, 7, "", nil), startMember(t, 2, 7, "", nil), startMember(t, 3, 7, "", nil)}
	connect(t, ms...)
	var wg sync.WaitGroup
	for _, a := range ms {
		for g := range uint64(senders) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(a.id, g))
				for seq := uint64(1); seq <= perSender; {
					var batch []*raftpb.Message
					for n := rng.IntN(8) + 1; n > 0 && seq <= perSender; n-- {
						for _, b := range ms {
							if b != a {
								batch = append(batch, msg(a.id, b.id, seq, g))
							}
						}
						seq++
					}
					a.Send(batch)
				}
			}()
		}
	}
	wg.Wait()
	for _, b := range ms {
		waitFor(t, fmt.Sprintf("member %x gets every message", b.id), func() bool {
			return len(b.Received()) == 2*senders*perSender
		})
		last := map[[2]uint64]uint64{}
		for _, m := range b.Received() {
			if m.GetTo() != b.id {
				t.Fatalf("member %x got a message for %x", b.id, m.GetTo())
			}
			k := [2]uint64{m.GetFrom(), m.GetCommit()}
			if m.GetIndex() != last[k]+1 {
				t.Fatalf("member %x: from %x stream %d: got seq %d after %d", b.id, k[0], k[1], m.GetIndex(), last[k])
			}
			if want := fmt.Sprintf("entry %d/%d", k[1], m.GetIndex()); string(m.GetEntries()[0].GetData()) != want {
				t.Fatalf("entry data %q, want %q", m.GetEntries()[0].GetData(), want)
			}
			last[k] = m.GetIndex()
		}
	}
	for _, a := range ms {
		for _, s := range a.PeerHealth() {
			if s.Dropped != 0 || s.SentMsgs != senders*perSender {
				t.Errorf("member %x peer %x: %+v", a.id, s.ID, s)
			}
		}
	}
}

func TestReconnectAfterPeerRestart(t *testing.T) {
	a := startMember(t, 1, 7, "", nil)
	b := startMember(t, 2, 7, "", nil)
	connect(t, a, b)
	a.Send([]*raftpb.Message{msg(1, 2, 1, 0)})
	waitFor(t, "first message", func() bool { return len(b.Received()) == 1 })
	up := a.ActiveSince(2)
	if up.IsZero() || up.After(time.Now()) {
		t.Fatalf("ActiveSince(2) with the stream up: %v", up)
	}
	if got := a.ActiveSince(9); !got.IsZero() {
		t.Errorf("ActiveSince of a stranger: %v, want zero", got)
	}

	b.Stop()
	waitFor(t, "stream down", func() bool { h := a.Health(2); return !h.Active && h.LastError != nil })
	if got := a.ActiveSince(2); !got.IsZero() {
		t.Errorf("ActiveSince(2) with the stream down: %v, want zero", got)
	}
	a.Send([]*raftpb.Message{msg(1, 2, 2, 0)}) // lost: nobody listens
	waitFor(t, "dropped message reported", func() bool { return a.Unreachables(2) > 0 })

	b2 := startMember(t, 2, 7, b.addr, nil)
	waitFor(t, "stream back up", func() bool { return a.Health(2).Active })
	if got := a.ActiveSince(2); !got.After(up) {
		t.Errorf("ActiveSince(2) after the stream came back: %v, want after the first stream's %v", got, up)
	}
	var batch []*raftpb.Message
	for seq := uint64(3); seq < 103; seq++ {
		batch = append(batch, msg(1, 2, seq, 0))
	}
	a.Send(batch[:50])
	a.Send(batch[50:])
	// Seq 2 may arrive or not; everything after it must, in order.
	after := func() []*raftpb.Message {
		var out []*raftpb.Message
		for _, m := range b2.Received() {
			if m.GetIndex() >= 3 {
				out = append(out, m)
			}
		}
		return out
	}
	waitFor(t, "messages after reconnect", func() bool { return len(after()) == 100 })
	for i, m := range after() {
		if m.GetIndex() != uint64(i+3) {
			t.Fatalf("message %d has seq %d", i, m.GetIndex())
		}
	}
}

// silentListener accepts connections and never answers.
func silentListener(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "http://" + lis.Addr().String()
}

func TestFullQueueDropsAndReportsUnreachable(t *testing.T) {
	a := startMember(t, 1, 7, "", func(c *Config) { c.QueueSize = 8; c.DialTimeout = time.Hour })
	if err := a.AddPeer(2, []string{silentListener(t)}); err != nil {
		t.Fatal(err)
	}
	var batch []*raftpb.Message
	for seq := range uint64(100) {
		batch = append(batch, msg(1, 2, seq, 0))
	}
	a.Send(batch) // must return although nothing drains the queue
	if got := a.Unreachables(2); got != 1 {
		t.Fatalf("Unreachable(2) called %d times, want once per Send", got)
	}
	if h := a.Health(2); h.Dropped != 92 || h.Active {
		t.Fatalf("health %+v, want 92 dropped and not active", h)
	}
	a.Send(batch[:1])
	if got := a.Unreachables(2); got != 2 {
		t.Fatalf("Unreachable(2) called %d times after a second full Send, want 2", got)
	}
}

func TestRefusedStreams(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster uint64 // of the receiver; the sender is in cluster 7
		peerID  uint64 // the ID the sender gives the receiver
		remove  bool   // the receiver removed the sender
		want    string
	}{
		{name: "cluster ID mismatch", cluster: 8, peerID: 2, want: "cluster ID mismatch: member 2 of cluster 8 refuses member 1 of cluster 7"},
		{name: "member ID mismatch", cluster: 7, peerID: 3, want: "member ID mismatch"},
		{name: "removed member", cluster: 7, peerID: 2, remove: true, want: "member 1 was removed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startMember(t, 1, 7, "", nil)
			b := startMember(t, 2, tc.cluster, "", nil)
			if tc.remove {
				if err := b.AddPeer(1, []string{a.url}); err != nil {
					t.Fatal(err)
				}
				b.RemovePeer(1)
			}
			if err := a.AddPeer(tc.peerID, []string{b.url}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "refusal recorded", func() bool {
				err := a.Health(tc.peerID).LastError
				return err != nil && strings.Contains(err.Error(), tc.want)
			})
			snap := &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: proto.Uint64(1), To: proto.Uint64(tc.peerID),
				Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(5), Term: proto.Uint64(1)}}}
			a.SendSnapshot(snap, io.NopCloser(strings.NewReader("data")), 4)
			waitFor(t, "snapshot failure", func() bool { return len(a.SnapStatus(tc.peerID)) == 1 })
			if got := a.SnapStatus(tc.peerID); got[0] {
				t.Fatal("refused snapshot reported ok")
			}
			if h := a.Health(tc.peerID); h.Active {
				t.Fatalf("refused stream is active: %+v", h)
			}
			if n := len(b.Received()); n != 0 {
				t.Fatalf("receiver got %d messages over a refused stream", n)
			}
			if ents, _ := os.ReadDir(b.snapDir); len(ents) != 0 {
				t.Fatalf("snapshot dir holds %v", ents)
			}
		})
	}
}

func TestUpdatePeerMovesStream(t *testing.T) {
	a := startMember(t, 1, 7, "", nil)
	b := startMember(t, 2, 7, "", nil)
	if err := a.AddPeer(2, []string{silentListener(t)}); err != nil {
		t.Fatal(err)
	}
	if err := a.UpdatePeer(2, []string{b.url}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "stream to the new URL", func() bool { return a.Health(2).Active })
	a.Send([]*raftpb.Message{msg(1, 2, 1, 0)})
	waitFor(t, "delivery", func() bool { return len(b.Received()) == 1 })
	// A dead first URL falls over to the second.
	c := startMember(t, 3, 7, "", nil)
	if err := a.AddPeer(3, []string{"http://" + deadAddr(t), c.url}); err != nil {
		t.Fatal(err)
	}
	a.Send([]*raftpb.Message{msg(1, 3, 1, 0)})
	waitFor(t, "stream to the second URL", func() bool { return a.Health(3).Active })
	a.Send([]*raftpb.Message{msg(1, 3, 2, 0)})
	waitFor(t, "delivery over the second URL", func() bool {
		got := c.Received()
		return len(got) > 0 && got[len(got)-1].GetIndex() == 2
	})
	if err := a.UpdatePeer(9, []string{b.url}); err == nil {
		t.Fatal("UpdatePeer of an unknown peer succeeded")
	}
	if err := a.AddPeer(2, []string{"127.0.0.1:80"}); err == nil {
		t.Fatal("AddPeer accepted a URL without scheme")
	}
}

func snapMsg(from, to, index uint64) *raftpb.Message {
	return &raftpb.Message{Type: raftpb.MsgSnap.Enum(), From: proto.Uint64(from), To: proto.Uint64(to), Term: proto.Uint64(3),
		Snapshot: &raftpb.Snapshot{Metadata: &raftpb.SnapshotMetadata{Index: proto.Uint64(index), Term: proto.Uint64(3)}}}
}

func TestSnapshot50MiB(t *testing.T) {
	const size = 50 << 20
	a := startMember(t, 1, 7, "", nil)
	var gotMsg atomic.Pointer[raftpb.Message]
	b := startMember(t, 2, 7, "", func(c *Config) {
		// Chunks must respect a 2 MiB gRPC message limit.
		c.MaxMessageBytes = 2 << 20
		next := c.ReceiveSnapshot
		c.ReceiveSnapshot = func(m *raftpb.Message, data io.Reader) error {
			gotMsg.Store(m)
			return next(m, data)
		}
	})
	connect(t, a, b)

	sum := sha256.New()
	data := io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{1}), size), sum)
	a.SendSnapshot(snapMsg(1, 2, 1000), io.NopCloser(data), size)
	path := acceptedSnapshot(t, a, b)
	if m := gotMsg.Load(); m.GetSnapshot().GetMetadata().GetIndex() != 1000 || m.GetFrom() != 1 {
		t.Fatalf("receiver got message %v", m)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if n, err := io.Copy(h, f); err != nil || n != size {
		t.Fatalf("snapshot file: %d bytes, %v", n, err)
	}
	if string(h.Sum(nil)) != string(sum.Sum(nil)) {
		t.Fatal("snapshot file differs from the data sent")
	}
	if ents, _ := os.ReadDir(b.snapDir); len(ents) != 1 {
		t.Fatalf("snapshot dir holds %v, want only the snapshot", ents)
	}
	// The snapshot's frames count in the peer byte counters, as etcd
	// counts a snapshot's bytes.
	peerBytes := func(tr *Transport, id uint64, sent bool) uint64 {
		for _, s := range tr.PeerHealth() {
			if s.ID == id {
				if sent {
					return s.SentBytes
				}
				return s.ReceivedBytes
			}
		}
		t.Fatalf("no peer %x", id)
		return 0
	}
	if got := peerBytes(a.Transport, 2, true); got < size {
		t.Errorf("sender counted %d bytes sent to the peer, want at least %d", got, size)
	}
	if got := peerBytes(b.Transport, 1, false); got < size {
		t.Errorf("receiver counted %d bytes received from the peer, want at least %d", got, size)
	}
}

// TestSnapshotStreamedUnknownSize: a sender that streams a dump as it is
// made announces no size; the receiver reads it all as it arrives.
func TestSnapshotStreamedUnknownSize(t *testing.T) {
	const size = 3<<20 + 17
	a := startMember(t, 1, 7, "", nil)
	b := startMember(t, 2, 7, "", nil)
	connect(t, a, b)
	pr, pw := io.Pipe()
	want := sha256.New()
	go func() {
		_, err := io.Copy(pw, io.TeeReader(io.LimitReader(rand.NewChaCha8([32]byte{2}), size), want))
		pw.CloseWithError(err)
	}()
	a.SendSnapshot(snapMsg(1, 2, 1000), pr, -1)
	got, err := os.ReadFile(acceptedSnapshot(t, a, b))
	if err != nil {
		t.Fatal(err)
	}
	if h := sha256.Sum256(got); len(got) != size || string(h[:]) != string(want.Sum(nil)) {
		t.Fatalf("receiver read %d bytes that differ from the %d sent", len(got), size)
	}
}

// failingReader yields n bytes, waits for the receiver's partial file, then
// fails.
type failingReader struct {
	n    int
	wait func()
}

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		r.wait()
		return 0, errors.New("backend snapshot broke")
	}
	k := min(len(p), r.n)
	r.n -= k
	return k, nil
}

func TestSnapshotFailures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		data    func(dir string) io.Reader
		size    int64
		receive error
	}{
		{name: "reader fails mid-stream", size: 8 << 20, data: func(dir string) io.Reader {
			return &failingReader{n: 3 << 20, wait: func() {
				waitFor(t, "partial file", func() bool { ents, _ := os.ReadDir(dir); return len(ents) == 1 })
			}}
		}},
		{name: "data shorter than announced", size: 4 << 20, data: func(string) io.Reader { return strings.NewReader("short") }},
		{name: "data longer than announced", size: 3, data: func(string) io.Reader { return strings.NewReader("longer") }},
		{name: "receiver rejects", size: 5, data: func(string) io.Reader { return strings.NewReader("hello") }, receive: errors.New("no thanks")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startMember(t, 1, 7, "", nil)
			b := startMember(t, 2, 7, "", func(c *Config) {
				if tc.receive != nil {
					c.ReceiveSnapshot = func(*raftpb.Message, io.Reader) error { return tc.receive }
				}
			})
			connect(t, a, b)
			a.SendSnapshot(snapMsg(1, 2, 10), io.NopCloser(tc.data(b.snapDir)), tc.size)
			waitFor(t, "snapshot status", func() bool { return len(a.SnapStatus(2)) == 1 })
			if a.SnapStatus(2)[0] {
				t.Fatal("broken snapshot reported ok")
			}
			// Stop waits for the receiving handler, so its cleanup is done.
			b.Stop()
			if ents, _ := os.ReadDir(b.snapDir); len(ents) != 0 {
				t.Fatalf("snapshot dir holds %v after a failed snapshot", ents)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if len(b.snaps) != 0 {
				t.Fatalf("receiver accepted %v", b.snaps)
			}
		})
	}
}

func TestStopEndsEveryGoroutine(t *testing.T) {
	// Registered first, so it runs after every other cleanup.
	t.Cleanup(func() { goleak.VerifyNone(t) })
	a := startMember(t, 1, 7, "", nil)
	b := startMember(t, 2, 7, "", nil)
	c := startMember(t, 3, 7, "", nil)
	connect(t, a, b, c)
	if err := a.AddPeer(4, []string{silentListener(t)}); err != nil {
		t.Fatal(err)
	}
	a.Send([]*raftpb.Message{msg(1, 2, 1, 0), msg(1, 3, 1, 0), msg(1, 4, 1, 0)})
	waitFor(t, "delivery", func() bool { return len(b.Received()) == 1 && len(c.Received()) == 1 })
	// A snapshot whose reader never ends: Stop must cancel it.
	pr, pw := io.Pipe()
	a.SendSnapshot(snapMsg(1, 2, 10), pr, 1<<30)
	if _, err := pw.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	b.RemovePeer(1)
	a.Stop()
	pw.Close()
	if got := a.SnapStatus(2); len(got) != 1 || got[0] {
		t.Fatalf("snapshot status after Stop %v, want one failure", got)
	}
	a.Send([]*raftpb.Message{msg(1, 2, 2, 0)}) // after Stop: dropped, no panic
	b.Stop()
	c.Stop()
}

func TestFrameRoundTrip(t *testing.T) {
	var frame []byte
	var want []*raftpb.Message
	for i := range uint64(300) {
		m := msg(1, 2, i, 3)
		m.Entries[0].Data = make([]byte, i*i) // sizes across uvarint lengths
		n, _ := frameSize(m)
		var err error
		if frame, err = appendMessage(frame, m, n); err != nil {
			t.Fatal(err)
		}
		want = append(want, m)
	}
	got, err := decodeFrame(frame)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("decoded %d messages, want %d", len(got), len(want))
	}
	for i := range got {
		if !proto.Equal(got[i], want[i]) {
			t.Fatalf("message %d: got %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := decodeFrame(frame[:len(frame)-1]); err == nil {
		t.Fatal("truncated frame decoded")
	}
}

// deadAddr returns a loopback address where nothing listens.
func deadAddr(t *testing.T) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

func TestRemovedPeerStreamEnds(t *testing.T) {
	var told atomic.Int32
	a := startMember(t, 1, 7, "", func(c *Config) { c.Removed = func() { told.Add(1) } })
	b := startMember(t, 2, 7, "", nil)
	connect(t, a, b)
	b.RemovePeer(1)
	if len(b.PeerHealth()) != 0 {
		t.Fatal("removed peer still listed")
	}
	// The open stream from 1 ends at its next frame, and stays refused.
	a.Send([]*raftpb.Message{msg(1, 2, 1, 0)})
	waitFor(t, "refusal", func() bool {
		err := a.Health(2).LastError
		return err != nil && strings.Contains(err.Error(), "member 1 was removed")
	})
	if n := len(b.Received()); n != 0 {
		t.Fatalf("removed member delivered %d messages", n)
	}
	// The removed member is told, once, however often it is refused.
	waitFor(t, "Removed callback", func() bool { return told.Load() > 0 })
	time.Sleep(300 * time.Millisecond) // several retries (backoff from 20 ms), each refused
	if n := told.Load(); n != 1 {
		t.Fatalf("Removed called %d times, want 1", n)
	}
}

// A refusal for another reason (cluster ID mismatch) is not a removal.
func TestOtherRefusalIsNotRemoval(t *testing.T) {
	var told atomic.Int32
	a := startMember(t, 1, 7, "", func(c *Config) { c.Removed = func() { told.Add(1) } })
	b := startMember(t, 2, 8, "", nil)
	if err := a.AddPeer(2, []string{b.url}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "refusal", func() bool {
		err := a.Health(2).LastError
		return err != nil && strings.Contains(err.Error(), "cluster ID mismatch")
	})
	if told.Load() != 0 {
		t.Fatal("Removed called for a cluster ID mismatch")
	}
}

// receiveToFile is a ReceiveSnapshot body: it writes data into a new file in
// dir as it arrives and keeps the file only when data ended with io.EOF.
func receiveToFile(dir string, data io.Reader) (path string, err error) {
	f, err := os.CreateTemp(dir, "snap-*")
	if err != nil {
		return "", err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(f.Name())
		}
	}()
	_, err = io.Copy(f, data)
	return f.Name(), err
}

// acceptedSnapshot waits for a's one snapshot to b to be reported and
// returns the file b accepted it into.
func acceptedSnapshot(t *testing.T, a, b *member) string {
	t.Helper()
	waitFor(t, "snapshot status", func() bool { return len(a.SnapStatus(b.id)) == 1 })
	if !a.SnapStatus(b.id)[0] {
		t.Fatal("snapshot reported failed")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.snaps) != 1 {
		t.Fatalf("receiver accepted %d snapshots", len(b.snaps))
	}
	return b.snaps[0]
}

// PeerFeatures is what the peer said when the open stream began: gone
// while the stream is down, and afresh after the peer restarts.
func TestPeerFeaturesFollowTheStream(t *testing.T) {
	a := startMember(t, 1, 7, "", nil)
	b := startMember(t, 2, 7, "", func(c *Config) { c.Features = "entrybatch/1,other" })
	connect(t, a, b)
	a.Send([]*raftpb.Message{msg(1, 2, 1, 0)})
	waitFor(t, "stream up", func() bool { _, ok := a.PeerFeatures(2); return ok })
	if f, _ := a.PeerFeatures(2); f != "entrybatch/1,other" {
		t.Fatalf("PeerFeatures(2) = %q", f)
	}
	if f, ok := a.PeerFeatures(9); ok || f != "" {
		t.Errorf("PeerFeatures of a stranger: %q %v", f, ok)
	}
	b.Stop()
	waitFor(t, "stream down", func() bool { _, ok := a.PeerFeatures(2); return !ok })
	if f, _ := a.PeerFeatures(2); f != "" {
		t.Errorf("PeerFeatures(2) with the stream down: %q", f)
	}
	startMember(t, 2, 7, b.addr, nil) // restarted, a build that says nothing
	a.Send([]*raftpb.Message{msg(1, 2, 2, 0)})
	waitFor(t, "stream back up", func() bool { _, ok := a.PeerFeatures(2); return ok })
	if f, _ := a.PeerFeatures(2); f != "" {
		t.Errorf("PeerFeatures(2) after a restart without features: %q", f)
	}
}
