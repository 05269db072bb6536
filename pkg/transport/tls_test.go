package transport

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.etcd.io/raft/v3/raftpb"
	"google.golang.org/grpc"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
	"github.com/kvd-dev/kvd/pkg/tlsconf/tlstest"
)

// startTLSMember starts a transport serving and dialing https with the
// peer block c (mutual TLS when c asks for client certificates).
func startTLSMember(t *testing.T, id uint64, c config.TLS) *member {
	t.Helper()
	info, err := tlsconf.New(tlsconf.Options{Block: tlsconf.PeerBlock, TLS: c})
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &member{id: id, addr: lis.Addr().String(), url: "https://" + lis.Addr().String(),
		unreachable: map[uint64]int{}, snapStatus: map[uint64][]bool{}}
	cfg := Config{
		ID: id, ClusterID: 7,
		Receive: func(msgs []*raftpb.Message) {
			m.mu.Lock()
			m.got = append(m.got, msgs...)
			m.mu.Unlock()
		},
		ReceiveSnapshot: func(_ *raftpb.Message, data io.Reader) error {
			if _, err := io.Copy(io.Discard, data); err != nil {
				return err
			}
			m.mu.Lock()
			path := "accepted"
			m.snaps = append(m.snaps, path)
			m.mu.Unlock()
			return nil
		},
		SnapshotStatus: func(id uint64, ok bool) {
			m.mu.Lock()
			m.snapStatus[id] = append(m.snapStatus[id], ok)
			m.mu.Unlock()
		},
		TLS:           info.ClientCredentials(),
		ServerOptions: []grpc.ServerOption{grpc.Creds(tlsconf.ServerCredentials(nil))},
	}
	tr, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Transport = tr
	tr.Start(tls.NewListener(lis, info.ServerConfig("h2")))
	t.Cleanup(tr.Stop)
	return m
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := tlstest.NewCA(t, "peer-ca")
	caFile := ca.WriteCA(t, dir, "ca")
	peerTLS := func(name string, mod func(*config.TLS)) config.TLS {
		cert, key := ca.WriteCert(t, dir, name, name)
		c := config.TLS{CertFile: cert, KeyFile: key, TrustedCAFile: caFile, ClientCertAuth: true, AllowedCNs: []string{"m1", "m2"}}
		if mod != nil {
			mod(&c)
		}
		return c
	}
	a := startTLSMember(t, 1, peerTLS("m1", nil))
	b := startTLSMember(t, 2, peerTLS("m2", nil))
	connect(t, a, b)
	a.Send([]*raftpb.Message{msg(1, 2, 1, 0)})
	b.Send([]*raftpb.Message{msg(2, 1, 1, 0)})
	waitFor(t, "messages both ways", func() bool { return len(a.Received()) == 1 && len(b.Received()) == 1 })

	// A snapshot goes over TLS too.
	data := bytes.Repeat([]byte("snap"), 1<<18)
	a.SendSnapshot(snapMsg(1, 2, 100), io.NopCloser(bytes.NewReader(data)), int64(len(data)))
	waitFor(t, "snapshot status", func() bool { return len(a.SnapStatus(2)) == 1 })
	if !a.SnapStatus(2)[0] {
		t.Fatal("snapshot over TLS failed")
	}

	// Members b refuses: one with a certificate of another CA, one whose CN
	// is not allowed, one dialing in plaintext.
	other := tlstest.NewCA(t, "other-ca")
	oc, ok := other.WriteCert(t, dir, "m3-other", "m1")
	c := startTLSMember(t, 3, peerTLS("m3", func(c *config.TLS) {
		c.ClientCertFile, c.ClientKeyFile = oc, ok
		c.AllowedCNs = nil
	}))
	d := startTLSMember(t, 4, peerTLS("intruder", func(c *config.TLS) { c.AllowedCNs = nil }))
	e := startMember(t, 5, 7, "", nil)
	for _, x := range []*member{c, d, e} {
		u := b.url
		if x == e {
			u = "http://" + b.addr
		}
		if err := x.AddPeer(2, []string{u}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	for _, x := range []*member{c, d, e} {
		t.Logf("member %x: %v", x.id, x.Health(2).LastError)
		if h := x.Health(2); h.Active || h.LastError == nil {
			t.Errorf("member %x: stream to b active %v (last error %v); want refused", x.id, h.Active, h.LastError)
		}
	}
	if n := len(b.Received()); n != 1 {
		t.Errorf("b received %d messages, want only a's one", n)
	}

	// FetchMembers dials https with the given credentials.
	info, err := tlsconf.New(tlsconf.Options{Block: tlsconf.PeerBlock, TLS: peerTLS("m2", nil)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := FetchMembers(ctx, []string{a.url}, info.ClientCredentials()); err == nil || !strings.Contains(err.Error(), "share") {
		// a has no Members callback: the answer is a refusal from a,
		// which proves the TLS connection was made.
		t.Errorf("fetch members over TLS: %v", err)
	}
}
