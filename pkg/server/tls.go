package server

import (
	"bytes"
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"net/url"
	"strings"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/kvd-dev/kvd/pkg/config"
	"github.com/kvd-dev/kvd/pkg/tlsconf"
)

// ALPN protocols of the member's listeners: the client and metrics ports
// serve gRPC and HTTP, the peer port gRPC only.
var (
	clientProtos = []string{"h2", "http/1.1"}
	peerProtos   = []string{"h2"}
)

func anyHTTPS(urls []url.URL) bool {
	for _, u := range urls {
		if u.Scheme == "https" {
			return true
		}
	}
	return false
}

// warnPlainWithTLS says, as etcd does, that a block's certificates do not
// apply to its http URLs.
func warnPlainWithTLS(lg *zap.Logger, flag, block string, t config.TLS, urls []url.URL) {
	if t.CertFile == "" && !t.AutoTLS && !t.ClientCertAuth {
		return
	}
	for _, u := range urls {
		if u.Scheme == "http" {
			lg.Warn("scheme is http while "+block+" is set; TLS and client cert auth do not apply to this URL", zap.String(flag, u.String()))
		}
	}
}

// clientHTTPProtocols are the HTTP server's protocols on a client port with
// an https URL: HTTP/1 (plaintext, and TLS with ALPN http/1.1) and HTTP/2
// that the TLS split hands over as an unencrypted stream (it is decrypted
// already).
func clientHTTPProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	p.SetUnencryptedHTTP2(true)
	return p
}

// tlsListener wraps ln in TLS when u is https.
func tlsListener(ln net.Listener, u url.URL, info *tlsconf.Info, protos []string) net.Listener {
	if u.Scheme != "https" {
		return ln
	}
	return tls.NewListener(ln, info.ServerConfig(protos...))
}

// httpErrorLog is an http.Server's ErrorLog: handshake failures go to the
// rate-limited fails, the rest to lg.
func httpErrorLog(lg *zap.Logger, fails *tlsconf.FailureLog) *log.Logger {
	return log.New(errorLogWriter{lg: lg, fails: fails}, "", 0)
}

type errorLogWriter struct {
	lg    *zap.Logger
	fails *tlsconf.FailureLog
}

func (w errorLogWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimSpace(p))
	if strings.Contains(msg, "TLS handshake error") {
		w.fails.Note(nil, errors.New(msg))
	} else {
		w.lg.Warn("http server", zap.String("error", msg))
	}
	return len(p), nil
}

// dialMember connects to another member's client URL: TLS with the
// member's client block (client-cert-file, trusted-ca-file) for https.
func dialMember(clientURL string, info *tlsconf.Info) (*grpc.ClientConn, error) {
	creds, err := info.DialCredentials(clientURL)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(clientURL)
	return grpc.NewClient("passthrough:///"+u.Host, grpc.WithTransportCredentials(creds))
}
