package harness

import (
	"bufio"
	"io"
	"net"
	"os"
	"strconv"
	"testing"
	"time"
)

// echoServer echoes every line back until the connection closes.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return l.Addr().String()
}

func startProxy(t *testing.T, target string, identify func(remote, local net.Addr) string) *Proxy {
	t.Helper()
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewProxy(net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), target, identify)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

// roundTrip sends a line through c and reports whether it came back
// within d.
func roundTrip(c net.Conn, d time.Duration) bool {
	c.SetDeadline(time.Now().Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "ping\n"
}

// dialWorks reports whether a fresh connection through p carries a line.
func dialWorks(p *Proxy) bool {
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	return roundTrip(c, 2*time.Second)
}

func TestProxyBlackholeAndHeal(t *testing.T) {
	p := startProxy(t, echoServer(t), nil)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !roundTrip(c, 2*time.Second) {
		t.Fatalf("no echo through a healthy proxy")
	}
	p.Blackhole()
	if roundTrip(c, 500*time.Millisecond) {
		t.Errorf("an open connection still carries data after Blackhole")
	}
	if dialWorks(p) {
		t.Errorf("a new connection carries data after Blackhole")
	}
	p.Heal()
	if !dialWorks(p) {
		t.Errorf("no echo on a new connection after Heal")
	}
}

func TestProxyPauseHoldsBytes(t *testing.T) {
	p := startProxy(t, echoServer(t), nil)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p.Pause()
	if roundTrip(c, 300*time.Millisecond) {
		t.Fatalf("data passed a paused proxy")
	}
	p.Heal()
	// The line written while paused arrives after Heal, then a new one.
	c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if line, err := r.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("held line after Heal: %q, %v", line, err)
	}
}

func TestProxyBlockByDialer(t *testing.T) {
	// This process dials, so it is the member to block: found via /proc.
	self := os.Getpid()
	identify := func(remote, local net.Addr) string {
		if socketOwner(remote, local, []int{self}) == self {
			return "self"
		}
		return ""
	}
	p := startProxy(t, echoServer(t), identify)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if !roundTrip(c, 2*time.Second) {
		t.Fatalf("no echo through a healthy proxy")
	}
	p.Block("other")
	if !roundTrip(c, 2*time.Second) {
		t.Errorf("blocking another member cut this one")
	}
	p.Block("self")
	if roundTrip(c, 500*time.Millisecond) {
		t.Errorf("a blocked dialer's open connection still carries data")
	}
	if dialWorks(p) {
		t.Errorf("a blocked dialer's new connection carries data")
	}
	p.Heal()
	if !dialWorks(p) {
		t.Errorf("no echo after Heal")
	}
}
