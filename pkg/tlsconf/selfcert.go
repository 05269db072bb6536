package tlsconf

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.uber.org/zap"
)

// selfCertValidity is how long a generated certificate is valid: etcd's
// default self-signed-cert-validity of one year.
const selfCertValidity = 365 * 24 * time.Hour

// selfCert returns dir/cert.pem and dir/key.pem, generating a self-signed
// ECDSA certificate for hosts there first unless both exist (etcd's
// transport.SelfCert: a restarted member keeps its certificate).
func selfCert(dir string, hosts []string, lg *zap.Logger) (certPath, keyPath string, err error) {
	if dir == "" {
		return "", "", errors.New("no directory for the generated certificate")
	}
	if certPath, err = filepath.Abs(filepath.Join(dir, "cert.pem")); err != nil {
		return "", "", err
	}
	if keyPath, err = filepath.Abs(filepath.Join(dir, "key.pem")); err != nil {
		return "", "", err
	}
	_, errc := os.Stat(certPath)
	_, errk := os.Stat(keyPath)
	if errc == nil && errk == nil {
		return certPath, keyPath, nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", fmt.Errorf("create %s: %w", dir, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	tmpl := x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"kvd"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(selfCertValidity),
		KeyUsage:              x509.KeyUsageKeyEncipherment | x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	for _, h := range hosts {
		if host, _, err := net.SplitHostPort(h); err == nil {
			h = host
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else if h != "" {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	der, err := x509.CreateCertificate(rand.Reader, &tmpl, &tmpl, &priv.PublicKey, priv)
	if err != nil {
		return "", "", fmt.Errorf("create certificate: %w", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(priv)
	if err != nil {
		return "", "", err
	}
	// The key first: a crash in between leaves no cert.pem, and the next
	// start generates both again.
	if err := writeFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", err
	}
	if err := writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return "", "", err
	}
	lg.Warn("automatically generated a self-signed certificate", zap.String("cert-file", certPath),
		zap.Strings("hosts", hosts), zap.Time("not-after", tmpl.NotAfter))
	return certPath, keyPath, nil
}

// writeFile writes b to path through a temporary file and a rename, so a
// reader never sees half a file.
func writeFile(path string, b []byte, perm os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, perm); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", tmp, err)
	}
	return nil
}
