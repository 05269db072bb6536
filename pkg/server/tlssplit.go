package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/kvd-dev/kvd/pkg/tlsconf"
)

// The TLS side of the client port: one https URL serves gRPC and HTTP as
// the plaintext split does, told apart after the handshake:
//
//   - ALPN "http/1.1" goes to the HTTP server as the *tls.Conn itself;
//   - ALPN "h2" (what gRPC clients and curl offer) is read up to its first
//     HEADERS frame: content-type application/grpc goes to the gRPC server,
//     anything else to the HTTP handler over HTTP/2. What was read is
//     replayed. gRPC clients wait for the server's SETTINGS before they send
//     a request, so the split sends an empty SETTINGS frame when the
//     client's arrives and later drops the client's ACK of it, which the
//     real server would not expect. An h2 connection that sends no request
//     within h2IdleWindow is a gRPC client that connected early: it goes to
//     gRPC;
//   - no ALPN: an HTTP/2 preface is sniffed as above, anything else is
//     HTTP/1.x.
//
// The gRPC server gets the connections on its own HTTP/2 transport (not
// ServeHTTP): tlsconf.ServerCredentials hands it the handshaken state, so
// peer.FromContext(ctx).AuthInfo is a credentials.TLSInfo with the client's
// verified chains.

// h2IdleWindow is how long an h2 connection may stay without a request
// before it is taken for gRPC.
const h2IdleWindow = 2 * time.Second

// h2MaxSniffFrames bounds the frames read before the first HEADERS.
const h2MaxSniffFrames = 32

// emptySettings is an HTTP/2 SETTINGS frame with no settings.
var emptySettings = []byte{0, 0, 0, byte(http2.FrameSettings), 0, 0, 0, 0, 0}

// badRequestOverTLS answers a plaintext HTTP request on a TLS port, as
// net/http does.
const badRequestOverTLS = "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"

// sortTLS handshakes c and sorts it into s.grpc or s.http. Every path ends
// within the handshake timeout plus h2IdleWindow: a client that stalls is
// dropped, never left holding a goroutine.
func (s *splitListener) sortTLS(c net.Conn) {
	deadline := time.Now().Add(tlsconf.HandshakeTimeout)
	_ = c.SetDeadline(deadline)
	tc := tls.Server(c, s.tls)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	err := tc.HandshakeContext(ctx)
	cancel()
	if err != nil {
		var re tls.RecordHeaderError
		if errors.As(err, &re) && re.Conn != nil && looksLikeHTTP(re.RecordHeader[:]) {
			_, _ = io.WriteString(re.Conn, badRequestOverTLS)
		}
		s.fails.Note(c.RemoteAddr(), err)
		c.Close()
		return
	}
	switch tc.ConnectionState().NegotiatedProtocol {
	case "h2":
		s.sortH2(tc, nil)
	case "http/1.1":
		_ = c.SetDeadline(time.Time{})
		s.http.put(tc)
	default:
		head := make([]byte, 3)
		if _, err := io.ReadFull(tc, head); err != nil {
			tc.Close()
			return
		}
		if bytes.Equal(head, http2Preface[:3]) {
			s.sortH2(tc, head)
			return
		}
		_ = c.SetDeadline(time.Time{})
		s.http.put(&prefixConn{Conn: tc, r: io.MultiReader(bytes.NewReader(head), tc)})
	}
}

func looksLikeHTTP(hdr []byte) bool {
	for _, m := range []string{"GET", "HEA", "POS", "PUT", "DEL", "OPT", "PAT", "CON", "TRA", "PRI"} {
		if string(hdr[:3]) == m {
			return true
		}
	}
	return false
}

// recorder keeps every byte read through it.
type recorder struct {
	r   io.Reader
	buf []byte
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.buf = append(r.buf, p[:n]...)
	return n, err
}

// sortH2 reads an HTTP/2 connection (head: its first bytes, already read)
// up to its first request's headers and hands it on.
func (s *splitListener) sortH2(tc *tls.Conn, head []byte) {
	rec := &recorder{r: io.MultiReader(bytes.NewReader(head), tc)}
	preface := make([]byte, len(http2Preface))
	if _, err := io.ReadFull(rec, preface); err != nil || !bytes.Equal(preface, http2Preface) {
		tc.Close()
		return
	}
	fr := http2.NewFramer(nil, rec)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	injected, isGRPC := false, true
	for range h2MaxSniffFrames {
		f, err := fr.ReadFrame()
		if err != nil {
			var ne net.Error
			if injected && errors.As(err, &ne) && ne.Timeout() {
				break // connected, no request yet: a gRPC client
			}
			s.lg.Debug("h2 connection ended before its first request", zap.Stringer("remote", tc.RemoteAddr()), zap.Error(err))
			tc.Close()
			return
		}
		if sf, ok := f.(*http2.SettingsFrame); ok && !sf.IsAck() && !injected {
			if _, err := tc.Write(emptySettings); err != nil {
				tc.Close()
				return
			}
			injected = true
			_ = tc.SetReadDeadline(time.Now().Add(h2IdleWindow))
			continue
		}
		if mh, ok := f.(*http2.MetaHeadersFrame); ok {
			isGRPC = strings.HasPrefix(headerValue(mh, "content-type"), "application/grpc")
			break
		}
	}
	_ = tc.SetDeadline(time.Time{})
	sc := &sniffedConn{Conn: tc, pending: rec.buf, skip: len(http2Preface), done: !injected}
	if isGRPC {
		s.grpc.put(&tlsSniffedConn{sniffedConn: sc, tc: tc})
	} else {
		// No ConnectionState: net/http serves it as HTTP/2 over an
		// unencrypted stream (Protocols.UnencryptedHTTP2).
		s.http.put(sc)
	}
}

func headerValue(mh *http2.MetaHeadersFrame, name string) string {
	for _, f := range mh.RegularFields() {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// sniffedConn replays the bytes read while sniffing, then reads the
// connection; until it has dropped the client's first SETTINGS ACK (the
// answer to the split's own SETTINGS) it walks the frame headers.
type sniffedConn struct {
	net.Conn
	pending []byte // replayed bytes not yet read
	done    bool   // the ACK is dropped (or none is coming)
	skip    int    // bytes to pass before the next frame header
	hdr     [9]byte
	hdrN    int // bytes of hdr filled; 9: being passed on
	hdrOut  int // bytes of a full hdr passed on
}

func (c *sniffedConn) raw(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

func (c *sniffedConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		switch {
		case c.done:
			return c.raw(p)
		case c.hdrN == len(c.hdr):
			n := copy(p, c.hdr[c.hdrOut:])
			if c.hdrOut += n; c.hdrOut == len(c.hdr) {
				c.hdrN, c.hdrOut = 0, 0
			}
			return n, nil
		case c.skip > 0:
			n, err := c.raw(p[:min(len(p), c.skip)])
			c.skip -= n
			return n, err
		default:
			n, err := c.raw(c.hdr[c.hdrN:])
			c.hdrN += n
			if c.hdrN < len(c.hdr) {
				if err != nil {
					return 0, err
				}
				continue
			}
			length := int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
			if http2.FrameType(c.hdr[3]) == http2.FrameSettings && http2.Flags(c.hdr[4]).Has(http2.FlagSettingsAck) {
				c.done, c.hdrN = true, 0
				continue
			}
			c.skip = length
		}
	}
}

// tlsSniffedConn is a sniffedConn for the gRPC server: tlsconf's
// credentials find the TLS state on it.
type tlsSniffedConn struct {
	*sniffedConn
	tc *tls.Conn
}

func (c *tlsSniffedConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

// HandshakeContext is done already.
func (c *tlsSniffedConn) HandshakeContext(context.Context) error { return nil }
