package tlsconf

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// stamp identifies one version of a file: a rotation (rewrite or rename
// over it, or a Kubernetes symlink swap) changes it.
type stamp struct {
	mod  time.Time
	size int64
}

func stat(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{fi.ModTime(), fi.Size()}, nil
}

// keyPair is a certificate and key file pair, parsed again when either file
// changed.
type keyPair struct {
	certFile, keyFile string
	certKey, keyKey   string // config keys, for errors
	lg                *zap.Logger

	mu       sync.Mutex
	cs, ks   stamp
	cert     *tls.Certificate
	failedAt [2]stamp // the stamps whose load failed, logged once
}

func newKeyPair(certFile, keyFile, certKey, keyKey string, lg *zap.Logger) *keyPair {
	return &keyPair{certFile: certFile, keyFile: keyFile, certKey: certKey, keyKey: keyKey, lg: lg}
}

// get returns the current certificate: reloaded if a file changed, the last
// good one if that reload fails (a rotation half done), or an error if there
// never was one.
func (k *keyPair) get() (*tls.Certificate, error) {
	if k == nil {
		return nil, errNoCert
	}
	cs, err1 := stat(k.certFile)
	ks, err2 := stat(k.keyFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	if err1 == nil && err2 == nil && cs == k.cs && ks == k.ks && k.cert != nil {
		return k.cert, nil
	}
	cert, err := k.loadLocked(cs, ks)
	if err == nil {
		return cert, nil
	}
	if k.failedAt != [2]stamp{cs, ks} {
		k.failedAt = [2]stamp{cs, ks}
		k.lg.Warn("cannot reload TLS certificate; serving the previous one", zap.String("cert-file", k.certFile),
			zap.String("key-file", k.keyFile), zap.Error(err))
	}
	if k.cert != nil {
		return k.cert, nil
	}
	return nil, err
}

// load reads both files now; New calls it so that bad files stop the start.
func (k *keyPair) load() (*tls.Certificate, error) {
	cs, _ := stat(k.certFile)
	ks, _ := stat(k.keyFile)
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.loadLocked(cs, ks)
}

func (k *keyPair) loadLocked(cs, ks stamp) (*tls.Certificate, error) {
	certPEM, err := os.ReadFile(k.certFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.certKey, err)
	}
	keyPEM, err := os.ReadFile(k.keyFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k.keyKey, err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		msg := err.Error()
		switch {
		case strings.Contains(msg, "does not match"):
			return nil, fmt.Errorf("%s: the key in %s does not match the certificate in %s", k.keyKey, k.keyFile, k.certFile)
		case strings.Contains(msg, "key input") || strings.Contains(msg, "private key"):
			return nil, fmt.Errorf("%s: %s: %w", k.keyKey, k.keyFile, err)
		default:
			return nil, fmt.Errorf("%s: %s: %w", k.certKey, k.certFile, err)
		}
	}
	if cert.Leaf != nil && time.Now().After(cert.Leaf.NotAfter) {
		k.lg.Warn("TLS certificate has expired", zap.String("cert-file", k.certFile), zap.Time("not-after", cert.Leaf.NotAfter))
	}
	k.cs, k.ks, k.cert = cs, ks, &cert
	return &cert, nil
}

// caPool is a trusted CA file, parsed again when it changed.
type caPool struct {
	file, key string
	lg        *zap.Logger

	mu       sync.Mutex
	st       stamp
	pool     *x509.CertPool
	failedAt stamp
}

func newCAPool(file, key string, lg *zap.Logger) *caPool {
	return &caPool{file: file, key: key, lg: lg}
}

// get returns the current pool, the last good one if a reload fails.
func (c *caPool) get() *x509.CertPool {
	st, err := stat(c.file)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && st == c.st && c.pool != nil {
		return c.pool
	}
	pool, err := c.loadLocked(st)
	if err == nil {
		return pool
	}
	if c.failedAt != st {
		c.failedAt = st
		c.lg.Warn("cannot reload trusted CA file; using the previous one", zap.String("trusted-ca-file", c.file), zap.Error(err))
	}
	return c.pool
}

func (c *caPool) load() (*x509.CertPool, error) {
	st, _ := stat(c.file)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.loadLocked(st)
}

func (c *caPool) loadLocked(st stamp) (*x509.CertPool, error) {
	b, err := os.ReadFile(c.file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", c.key, err)
	}
	pool, err := parsePool(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %s: %w", c.key, c.file, err)
	}
	c.st, c.pool = st, pool
	return pool, nil
}

// parsePool parses every PEM certificate of b; anything unparsable, or no
// certificate at all, is an error.
func parsePool(b []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	n := 0
	for {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q, want CERTIFICATE", n+1, block.Type)
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n+1, err)
		}
		pool.AddCert(cert)
		n++
	}
	if n == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return pool, nil
}
