package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"math/big"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestTLSCluster: three members with mutual TLS for clients and peers
// (certificates made here). etcdctl --cacert/--cert/--key and clientv3 over
// TLS write on one member and read on every member; a client whose
// certificate comes from another CA is refused; a member's rotated server
// certificate is served to new connections without a restart.
func TestTLSCluster(t *testing.T) {
	t.Parallel()
	pki := harness.NewPKI(t, "e2e-ca")
	c := harness.StartTLSCluster(t, 3, harness.TLSClusterOptions{Engine: "bolt", PKI: pki})
	members := c.Members()

	// etcdctl with a client certificate.
	cert, key, _ := pki.Issue(t, "etcdctl", "etcdctl")
	etcdctl := func(endpoints []string, cacert, cert, key string, args ...string) (string, error) {
		all := append([]string{"--endpoints", strings.Join(endpoints, ","), "--dial-timeout", "3s", "--command-timeout", "10s",
			"--cacert", cacert, "--cert", cert, "--key", key}, args...)
		cmd := exec.Command(harness.EtcdctlBinary(t), all...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		cmd.Env = etcdctlEnv()
		err := cmd.Run()
		return strings.TrimSpace(out.String()), err
	}
	if out, err := etcdctl(c.Endpoints(), pki.CAFile, cert, key, "put", "tls-key", "via-etcdctl"); err != nil || out != "OK" {
		t.Fatalf("etcdctl put over TLS: %v: %s", err, out)
	}
	for _, m := range members {
		out, err := etcdctl([]string{m.Endpoint()}, pki.CAFile, cert, key, "get", "tls-key", "--print-value-only")
		if err != nil || out != "via-etcdctl" {
			t.Errorf("etcdctl get on %s: %v: %q", m.Name(), err, out)
		}
	}
	if out, err := etcdctl(c.Endpoints(), pki.CAFile, cert, key, "endpoint", "health", "--cluster"); err != nil || strings.Count(out, "is healthy") != 3 {
		t.Errorf("etcdctl endpoint health --cluster: %v: %s", err, out)
	}

	// clientv3 over TLS: a write on m0 reaches every member.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := harness.NewTLSClient(pki.ClientTLS(t, "alice"), members[0].Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 20 {
		if _, err := w.Put(ctx, fmt.Sprintf("tls/%02d", i), "v"); err != nil {
			t.Fatalf("clientv3 put over TLS: %v", err)
		}
	}
	for _, m := range members {
		r, err := harness.NewTLSClient(pki.ClientTLS(t, "bob"), m.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := r.Get(ctx, "tls/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		r.Close()
		if err != nil || resp.Count != 20 {
			t.Errorf("linearizable read on %s over TLS: %v %v", m.Name(), resp, err)
		}
	}

	// A certificate from another CA, and no certificate at all, are refused.
	other := harness.NewPKI(t, "other-ca")
	ocert, okey, _ := other.Issue(t, "mallory", "mallory")
	if out, err := etcdctl(c.Endpoints(), pki.CAFile, ocert, okey, "put", "tls-key", "mallory"); err == nil {
		t.Errorf("etcdctl with a certificate of another CA: accepted: %s", out)
	}
	bad := pki.ClientTLS(t, "")
	bad.Certificates = other.ClientTLS(t, "mallory").Certificates
	for _, cfg := range []*tls.Config{bad, pki.ClientTLS(t, "")} {
		cli, err := harness.NewTLSClient(cfg, members[1].Endpoint())
		if err != nil {
			continue // refused while dialing
		}
		sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
		_, err = cli.Put(sctx, "tls-key", "refused")
		scancel()
		cli.Close()
		if err == nil {
			t.Errorf("client with certificates %d from another CA or none: put accepted", len(cfg.Certificates))
		}
	}
	if resp, err := w.Get(ctx, "tls-key"); err != nil || string(resp.Kvs[0].Value) != "via-etcdctl" {
		t.Errorf("tls-key after the refused writes: %v %v", resp, err)
	}

	// Rotate m2's client-port certificate in place: the next connection
	// gets the new one, the member is not restarted.
	m2 := members[2]
	certFile, _ := harness.MemberCert(pki, m2.Name())
	old := servedSerial(t, m2.Endpoint(), pki)
	_, _, rotated := pki.Issue(t, m2.Name()+"-server", m2.Name())
	if rotated.Cmp(old) == 0 {
		t.Fatal("the new certificate has the old serial")
	}
	if got := servedSerial(t, m2.Endpoint(), pki); got.Cmp(rotated) != 0 {
		t.Errorf("%s serves serial %x after rotating %s, want %x (was %x)", m2.Name(), got, certFile, rotated, old)
	}
	if out, err := etcdctl([]string{m2.Endpoint()}, pki.CAFile, cert, key, "get", "tls-key", "--print-value-only"); err != nil || out != "via-etcdctl" {
		t.Errorf("etcdctl after rotation: %v: %q", err, out)
	}
	if exited, werr := m2.Exited(); exited {
		t.Errorf("%s exited: %v", m2.Name(), werr)
	}
}

// servedSerial is the serial of the certificate endpoint serves to a new
// TLS connection.
func servedSerial(t *testing.T, endpoint string, pki *harness.PKI) *big.Int {
	t.Helper()
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", strings.TrimPrefix(endpoint, "https://"), pki.ClientTLS(t, "probe"))
	if err != nil {
		t.Fatalf("TLS dial %s: %v", endpoint, err)
	}
	defer conn.Close()
	return conn.ConnectionState().PeerCertificates[0].SerialNumber
}
