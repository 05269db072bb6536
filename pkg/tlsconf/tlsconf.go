// Package tlsconf turns a config.TLS block (client-transport-security or
// peer-transport-security) into the TLS configurations of a member, as etcd
// v3.7.3 does:
//
//   - the certificate, the key and the trusted CA file are read again at each
//     handshake when their modification time or size changed, so rotated
//     files are served without a restart (a reload that fails keeps the last
//     good material and is logged);
//   - client-cert-auth, or a trusted-ca-file alone (etcd's long-standing
//     rule), requires and verifies client certificates;
//   - allowed-cn / allowed-hostname refuse a verified certificate whose
//     CommonName / names do not match;
//   - auto-tls generates a self-signed ECDSA certificate under
//     <data-dir>/fixtures/client or fixtures/peer when no cert-file is given,
//     and the member then does not verify the other side's certificate.
//
// Everything is checked at New, so a missing file, a key that does not match
// its certificate or an unparsable CA file stops the start with an error that
// names the config key (and its flag).
package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/kvd-dev/kvd/pkg/config"
)

// Config blocks, for Options.Block.
const (
	ClientBlock = "client-transport-security"
	PeerBlock   = "peer-transport-security"
)

// Options is what New needs beside the config block.
type Options struct {
	// Block is ClientBlock or PeerBlock; errors name its keys and the
	// matching flags.
	Block string
	TLS   config.TLS
	// AutoTLSDir holds the generated certificate with auto-tls
	// (<data-dir>/fixtures/client or fixtures/peer).
	AutoTLSDir string
	// Hosts ("host:port" or "host") are the names and addresses the
	// generated certificate is valid for.
	Hosts  []string
	Logger *zap.Logger
}

// Info is one block's TLS material, loaded and checked. Its methods are safe
// for concurrent use.
type Info struct {
	block    string
	lg       *zap.Logger
	server   *keyPair // nil without a certificate
	client   *keyPair // what the member presents as a client; nil: none
	ca       *caPool  // nil: the system roots
	certAuth bool     // client certificates required and verified
	selfCert bool     // auto-tls: the other side is not verified
	allowed  func(*x509.Certificate) bool
	allowedS string // for the refusal message
}

// New loads and checks the block's files (generating the auto-tls
// certificate first if asked to). A block with no files gives an Info that
// can only dial, verifying servers against the system roots.
func New(o Options) (*Info, error) {
	lg := o.Logger
	if lg == nil {
		lg = zap.NewNop()
	}
	t := o.TLS
	i := &Info{block: o.Block, lg: lg}
	if t.AutoTLS {
		if t.CertFile != "" {
			lg.Warn("ignoring auto-tls since certificates are given", zap.String("block", o.Block))
		} else {
			cert, key, err := selfCert(o.AutoTLSDir, o.Hosts, lg)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", i.key("auto-tls"), err)
			}
			t.CertFile, t.KeyFile = cert, key
			i.selfCert = true
		}
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, fmt.Errorf("%s: cert-file and key-file must be set together", i.key("cert-file"))
	}
	if (t.ClientCertFile == "") != (t.ClientKeyFile == "") {
		return nil, fmt.Errorf("%s: client-cert-file and client-key-file must be set together", i.key("client-cert-file"))
	}
	if t.CertFile != "" {
		i.server = newKeyPair(t.CertFile, t.KeyFile, i.key("cert-file"), i.key("key-file"), lg)
		if _, err := i.server.load(); err != nil {
			return nil, err
		}
		i.client = i.server
	}
	if t.ClientCertFile != "" {
		i.client = newKeyPair(t.ClientCertFile, t.ClientKeyFile, i.key("client-cert-file"), i.key("client-key-file"), lg)
		if _, err := i.client.load(); err != nil {
			return nil, err
		}
	}
	if t.TrustedCAFile != "" {
		i.ca = newCAPool(t.TrustedCAFile, i.key("trusted-ca-file"), lg)
		if _, err := i.ca.load(); err != nil {
			return nil, err
		}
	}
	i.certAuth = t.ClientCertAuth || t.TrustedCAFile != ""
	switch {
	case len(t.AllowedCNs) > 0 && len(t.AllowedHostnames) > 0:
		return nil, fmt.Errorf("%s: allowed-cn and allowed-hostname are mutually exclusive", i.key("allowed-cn"))
	case len(t.AllowedCNs) > 0:
		cns := slices.Clone(t.AllowedCNs)
		i.allowedS = fmt.Sprintf("CN not in allowed-cn %q", cns)
		i.allowed = func(c *x509.Certificate) bool { return slices.Contains(cns, c.Subject.CommonName) }
	case len(t.AllowedHostnames) > 0:
		hosts := slices.Clone(t.AllowedHostnames)
		i.allowedS = fmt.Sprintf("certificate valid for none of allowed-hostname %q", hosts)
		i.allowed = func(c *x509.Certificate) bool {
			for _, h := range hosts {
				if c.VerifyHostname(h) == nil {
					return true
				}
			}
			return false
		}
	}
	return i, nil
}

// key names a key of the block with its flag, for errors:
// "peer-transport-security.cert-file (--peer-cert-file)".
func (i *Info) key(k string) string {
	return fmt.Sprintf("%s.%s (--%s)", i.block, k, flagName(i.block, k))
}

func flagName(block, k string) string {
	switch {
	case block == PeerBlock && k == "allowed-cn":
		return "peer-cert-allowed-cn"
	case block == PeerBlock && k == "allowed-hostname":
		return "peer-cert-allowed-hostname"
	case block == PeerBlock:
		return "peer-" + k
	case k == "allowed-hostname":
		return "client-cert-allowed-hostname"
	default:
		return k
	}
}

// HasCert reports whether the member has a certificate to serve TLS with.
func (i *Info) HasCert() bool { return i != nil && i.server != nil }

// ClientCertAuth reports whether the server side requires and verifies
// client certificates (client-cert-auth, or trusted-ca-file as in etcd).
func (i *Info) ClientCertAuth() bool { return i != nil && i.certAuth }

// ServerConfig returns the configuration of a TLS listener offering
// nextProtos by ALPN. Each handshake gets the current certificate and CA
// pool (GetConfigForClient). It needs a certificate (HasCert).
func (i *Info) ServerConfig(nextProtos ...string) *tls.Config {
	protos := slices.Clone(nextProtos)
	base := &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: protos}
	base.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		cert, err := i.server.get()
		if err != nil {
			return nil, err
		}
		c := &tls.Config{
			MinVersion:   tls.VersionTLS12,
			NextProtos:   protos,
			Certificates: []tls.Certificate{*cert},
		}
		if i.certAuth {
			c.ClientAuth = tls.RequireAndVerifyClientCert
			if i.ca != nil {
				c.ClientCAs = i.ca.get()
			}
		}
		c.VerifyConnection = i.verifyAllowed
		return c, nil
	}
	return base
}

// ClientConfig returns a configuration for one connection to serverName
// (a host name or an IP address), with the current CA pool and the client
// certificate read at the handshake. The caller sets NextProtos.
func (i *Info) ClientConfig(serverName string) *tls.Config {
	c := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         serverName,
		InsecureSkipVerify: i.selfCert,
		VerifyConnection:   i.verifyAllowed,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			if i.client == nil {
				return &tls.Certificate{}, nil // none: the server decides
			}
			return i.client.get()
		},
	}
	if i.ca != nil {
		c.RootCAs = i.ca.get()
	}
	return c
}

// verifyAllowed applies allowed-cn / allowed-hostname to the other side's
// verified certificate, as etcd's VerifyPeerCertificate does.
func (i *Info) verifyAllowed(cs tls.ConnectionState) error {
	if i.allowed == nil {
		return nil
	}
	for _, chain := range cs.VerifiedChains {
		if len(chain) > 0 && i.allowed(chain[0]) {
			return nil
		}
	}
	cn := ""
	if len(cs.PeerCertificates) > 0 {
		cn = cs.PeerCertificates[0].Subject.CommonName
	}
	return fmt.Errorf("tlsconf: certificate of %q refused by %s: %s", cn, i.block, i.allowedS)
}

// HandshakeTimeout bounds a TLS handshake on the member's listeners.
const HandshakeTimeout = 10 * time.Second

// Hosts returns the hosts of urls, for Options.Hosts.
func Hosts(urls []url.URL) []string {
	var out []string
	for _, u := range urls {
		if u.Host != "" {
			out = append(out, u.Host)
		}
	}
	return out
}

// ForClient and ForPeer build the Info of a member's client or peer block,
// with the auto-tls directory and hosts etcd uses.
func ForClient(c *config.Config, lg *zap.Logger) (*Info, error) {
	urls, err := c.ClientURLs()
	if err != nil {
		return nil, fmt.Errorf("listen-client-urls: %w", err)
	}
	return New(Options{Block: ClientBlock, TLS: c.ClientTLS, AutoTLSDir: filepath.Join(c.DataDir, "fixtures", "client"), Hosts: Hosts(urls), Logger: lg})
}

// ForPeer: see ForClient.
func ForPeer(c *config.Config, lg *zap.Logger) (*Info, error) {
	urls, err := c.PeerURLs()
	if err != nil {
		return nil, fmt.Errorf("listen-peer-urls: %w", err)
	}
	return New(Options{Block: PeerBlock, TLS: c.PeerTLS, AutoTLSDir: filepath.Join(c.DataDir, "fixtures", "peer"), Hosts: Hosts(urls), Logger: lg})
}

// hostOf strips the port from a "host:port" authority.
func hostOf(authority string) string {
	if h, _, err := net.SplitHostPort(authority); err == nil {
		return h
	}
	return authority
}

var errNoCert = errors.New("tlsconf: no certificate configured")
