package harness

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// PKI is a test certificate authority whose files live in a temporary
// directory: the CA certificate, and the certificates Issue writes.
type PKI struct {
	Dir    string
	CAFile string
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
}

// NewPKI makes a CA named cn.
func NewPKI(t testing.TB, cn string) *PKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serialNumber(t),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	p := &PKI{Dir: t.TempDir(), cert: cert, key: key}
	p.CAFile = filepath.Join(p.Dir, "ca.pem")
	WriteFileAtomic(t, p.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return p
}

func serialNumber(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Issue writes a certificate for cn (server and client use, valid for
// 127.0.0.1 and localhost) to Dir/name.pem and its key to
// Dir/name-key.pem, replacing earlier ones atomically (key first, as
// rotation tools do), and returns the paths and the certificate's serial.
func (p *PKI) Issue(t testing.TB, name, cn string) (certFile, keyFile string, serial *big.Int) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serialNumber(t),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(p.Dir, name+".pem"), filepath.Join(p.Dir, name+"-key.pem")
	WriteFileAtomic(t, keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	WriteFileAtomic(t, certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	return certFile, keyFile, tmpl.SerialNumber
}

// ClientTLS returns a client configuration trusting the CA and presenting
// a new certificate for cn (none when cn is empty).
func (p *PKI) ClientTLS(t testing.TB, cn string) *tls.Config {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(p.cert)
	c := &tls.Config{RootCAs: pool}
	if cn != "" {
		cert, key, _ := p.Issue(t, "client-"+cn, cn)
		kp, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			t.Fatal(err)
		}
		c.Certificates = []tls.Certificate{kp}
	}
	return c
}

// WriteFileAtomic writes b to path through a temporary file renamed over it.
func WriteFileAtomic(t testing.TB, path string, b []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// TLSClusterOptions configures StartTLSCluster.
type TLSClusterOptions struct {
	// Engine is kvd's storage engine for every member.
	Engine string
	// PKI issues every member's certificates; its CA is the trusted CA of
	// clients and peers.
	PKI *PKI
	// Args are extra flags for every member.
	Args []string
}

// MemberCert names the files of member name's client-port certificate in
// the PKI's Dir (name-server.pem, name-server-key.pem); its peer
// certificate is name-peer.pem.
func MemberCert(p *PKI, name string) (certFile, keyFile string) {
	return filepath.Join(p.Dir, name+"-server.pem"), filepath.Join(p.Dir, name+"-server-key.pem")
}

// StartTLSCluster starts n members named m0..m{n-1} with mutual TLS on
// https client and peer URLs: client certificates required on both, peers
// restricted to the members' CNs (--peer-cert-allowed-cn). It waits until
// the cluster is healthy, asking over TLS; Status, Leader and WaitHealthy
// work on the result. Clients need PKI.ClientTLS.
func StartTLSCluster(t testing.TB, n int, opts TLSClusterOptions) *Cluster {
	t.Helper()
	c := &Cluster{
		t:       t,
		opts:    ClusterOptions{Engine: opts.Engine, HeartbeatInterval: 100 * time.Millisecond, ElectionTimeout: time.Second},
		token:   fmt.Sprintf("e2e-tls-%x", time.Now().UnixNano()),
		proxies: map[*Process]*Proxy{},
		clients: map[*Process]*clientv3.Client{},
	}
	t.Cleanup(c.cleanup)
	names := make([]string, n)
	addrs := make([]memberAddrs, n)
	var initial []string
	for i := range names {
		names[i] = fmt.Sprintf("m%d", i)
		ports, err := freePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		addrs[i].clientURL = fmt.Sprintf("https://127.0.0.1:%d", ports[0])
		addrs[i].peerListenURL = fmt.Sprintf("https://127.0.0.1:%d", ports[1])
		addrs[i].peerURL = addrs[i].peerListenURL
		initial = append(initial, names[i]+"="+addrs[i].peerURL)
	}
	clientTLS := opts.PKI.ClientTLS(t, "root")
	for i, name := range names {
		cert, key, _ := opts.PKI.Issue(t, name+"-server", name)
		pcert, pkey, _ := opts.PKI.Issue(t, name+"-peer", name)
		args := []string{
			"--heartbeat-interval", "100", "--election-timeout", "1000",
			"--cert-file", cert, "--key-file", key, "--trusted-ca-file", opts.PKI.CAFile, "--client-cert-auth",
			"--peer-cert-file", pcert, "--peer-key-file", pkey, "--peer-trusted-ca-file", opts.PKI.CAFile, "--peer-client-cert-auth",
			"--peer-cert-allowed-cn", strings.Join(names, ","),
		}
		p := StartKVD(t, Options{
			Engine: opts.Engine,
			Name:   name,
			Args:   append(args, opts.Args...),
			Member: &MemberConfig{
				ClientURL:      addrs[i].clientURL,
				PeerListenURL:  addrs[i].peerListenURL,
				PeerURL:        addrs[i].peerURL,
				InitialCluster: strings.Join(initial, ","),
				State:          "new",
				Token:          c.token,
			},
		})
		cli, err := NewTLSClient(clientTLS, p.Endpoint())
		if err != nil {
			t.Fatalf("cluster: member %s: new client: %v", name, err)
		}
		c.mu.Lock()
		c.members = append(c.members, p)
		c.clients[p] = cli
		c.mu.Unlock()
	}
	c.WaitHealthy(t, StartTimeout)
	return c
}

// NewTLSClient returns a clientv3 client over TLS for endpoints; the caller
// closes it.
func NewTLSClient(cfg *tls.Config, endpoints ...string) (*clientv3.Client, error) {
	c := ClientConfig(endpoints...)
	c.TLS = cfg
	return clientv3.New(c)
}
