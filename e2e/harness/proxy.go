package harness

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Proxy is a TCP proxy in front of one member's peer listener. The member
// advertises the proxy's address, so every peer connection to the member
// passes through it and can be stalled or cut.
//
// Cutting a member's proxy only cuts connections to that member: a member
// still reaches its peers over the connections it dials itself (etcd's
// rafthttp sends over those as well), so a full partition also blocks the
// member's connections at every other proxy; see Block and Cluster.Isolate.
type Proxy struct {
	l      net.Listener
	target string
	// identify names the member that dialed a connection ("" when unknown).
	identify func(remote, local net.Addr) string

	mu         sync.Mutex
	cond       *sync.Cond // signalled when paused clears or a conn closes
	paused     bool
	blackholed bool
	blocked    map[string]bool
	conns      map[*proxyConn]struct{}
	closed     bool
	wg         sync.WaitGroup
}

type proxyConn struct {
	in, out net.Conn
	from    string
	once    sync.Once
	gone    bool // guarded by Proxy.mu; set when closed
}

// NewProxy listens on listenAddr ("127.0.0.1:port") and forwards every
// connection to target. identify, when not nil, names the member that
// dialed a connection, for Block.
func NewProxy(listenAddr, target string, identify func(remote, local net.Addr) string) (*Proxy, error) {
	l, err := net.Listen("tcp", listenAddr)
	if err != nil {
		return nil, fmt.Errorf("proxy listen %s: %w", listenAddr, err)
	}
	p := &Proxy{l: l, target: target, identify: identify, blocked: map[string]bool{}, conns: map[*proxyConn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the proxy's listening address, host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Pause stalls traffic in both directions on every connection, present and
// future, without closing any: bytes are held until Heal.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = true
}

// Blackhole closes every connection and refuses new ones until Heal.
func (p *Proxy) Blackhole() {
	p.mu.Lock()
	p.blackholed = true
	victims := p.takeLocked(func(*proxyConn) bool { return true })
	p.mu.Unlock()
	closeAll(victims)
}

// Block closes the connections dialed by the named members and refuses
// their new ones until Heal.
func (p *Proxy) Block(names ...string) {
	p.mu.Lock()
	for _, n := range names {
		p.blocked[n] = true
	}
	victims := p.takeLocked(func(c *proxyConn) bool { return p.blocked[c.from] })
	p.mu.Unlock()
	closeAll(victims)
}

// Heal undoes Pause, Blackhole and Block.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.paused = false
	p.blackholed = false
	p.blocked = map[string]bool{}
	p.cond.Broadcast()
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	victims := p.takeLocked(func(*proxyConn) bool { return true })
	p.mu.Unlock()
	p.l.Close()
	closeAll(victims)
	p.wg.Wait()
}

// takeLocked unregisters and returns the connections that match; the
// caller closes them outside the lock.
func (p *Proxy) takeLocked(match func(*proxyConn) bool) []*proxyConn {
	var out []*proxyConn
	for c := range p.conns {
		if match(c) {
			c.gone = true
			delete(p.conns, c)
			out = append(out, c)
		}
	}
	p.cond.Broadcast()
	return out
}

func closeAll(cs []*proxyConn) {
	for _, c := range cs {
		c.close()
	}
}

func (c *proxyConn) close() {
	c.once.Do(func() {
		c.in.Close()
		c.out.Close()
	})
}

func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		in, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(in)
	}
}

func (p *Proxy) serve(in net.Conn) {
	defer p.wg.Done()
	c := &proxyConn{in: in}
	if p.identify != nil {
		c.from = p.identify(in.RemoteAddr(), in.LocalAddr())
	}
	out, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		in.Close()
		return
	}
	c.out = out
	if !p.admit(c) {
		c.close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(c, out, in); done <- struct{}{} }()
	go func() { p.pipe(c, in, out); done <- struct{}{} }()
	<-done
	p.drop(c)
	<-done
}

// admit registers c unless the proxy refuses it.
func (p *Proxy) admit(c *proxyConn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.blackholed || p.blocked[c.from] {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) drop(c *proxyConn) {
	p.mu.Lock()
	c.gone = true
	delete(p.conns, c)
	p.cond.Broadcast()
	p.mu.Unlock()
	c.close()
}

// pipe copies src to dst, holding bytes while the proxy is paused.
func (p *Proxy) pipe(c *proxyConn, dst, src net.Conn) {
	buf := make([]byte, 32*1024)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.paused && !c.gone {
				p.cond.Wait()
			}
			gone := c.gone
			p.mu.Unlock()
			if gone {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// socketOwner returns which of pids holds the dialing end of the loopback
// TCP connection whose dialer address is remote and whose accepted end is
// local, or 0. It reads /proc, so it only works on Linux for processes of
// the same user; elsewhere it finds nobody and blocks nothing.
func socketOwner(remote, local net.Addr, pids []int) int {
	r, ok1 := remote.(*net.TCPAddr)
	l, ok2 := local.(*net.TCPAddr)
	if !ok1 || !ok2 {
		return 0
	}
	inode, err := socketInode(r, l)
	if err != nil {
		return 0
	}
	want := fmt.Sprintf("socket:[%d]", inode)
	for _, pid := range pids {
		if pid == 0 {
			continue
		}
		dir := fmt.Sprintf("/proc/%d/fd", pid)
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if link, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && link == want {
				return pid
			}
		}
	}
	return 0
}

// socketInode finds the inode of the socket whose local address is src and
// remote address is dst in /proc/net/tcp{,6}.
func socketInode(src, dst *net.TCPAddr) (uint64, error) {
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		inode, err := scanTCPTable(f, src.Port, dst.Port)
		if err == nil {
			return inode, nil
		}
	}
	return 0, fmt.Errorf("socket %v -> %v not found in /proc/net/tcp", src, dst)
}

var errNoSocket = errors.New("no such socket")

// scanTCPTable matches on ports only: every address involved is loopback,
// and a port pair names one connection among them.
func scanTCPTable(path string, srcPort, dstPort int) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 10 {
			continue
		}
		if hexPort(fields[1]) != srcPort || hexPort(fields[2]) != dstPort {
			continue
		}
		return strconv.ParseUint(fields[9], 10, 64)
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoSocket
}

// hexPort parses the port of an "ADDR:PORT" field of /proc/net/tcp.
func hexPort(field string) int {
	i := strings.LastIndexByte(field, ':')
	if i < 0 {
		return -1
	}
	v, err := strconv.ParseUint(field[i+1:], 16, 16)
	if err != nil {
		return -1
	}
	return int(v)
}
