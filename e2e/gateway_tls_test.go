package e2e

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// TestGatewayTLS: the JSON gateway of a member whose only client URL is
// https with client-cert-auth, kvd (bolt) beside etcd v3.7.3. A caller with
// a certificate of the trusted CA gets the same answers from both, through
// the gateway's own TLS connection to the member; a caller without one is
// refused at the handshake by both; with auth on, the token in the
// Authorization header works as over plaintext, and a request without it
// gets the same answer from both, and a caller whose certificate has a
// CommonName is refused (etcd will not let the gateway drop the CN a gRPC
// caller would be authenticated as). After the member's certificate is
// rotated in place, the gateway still serves. /v3beta/ is /v3/, and every
// answer carries etcd's CORS headers.
func TestGatewayTLS(t *testing.T) {
	pki := harness.NewPKI(t, "gw-ca")
	start := func(label string) *harness.Process {
		cert, key, _ := pki.Issue(t, label+"-server", "gw-member")
		ports, err := harness.FreePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		client := fmt.Sprintf("https://127.0.0.1:%d", ports[0])
		peer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
		opts := harness.Options{
			Engine: "bolt",
			Args:   []string{"--cert-file", cert, "--key-file", key, "--trusted-ca-file", pki.CAFile, "--client-cert-auth"},
			Member: &harness.MemberConfig{ClientURL: client, PeerListenURL: peer, InitialCluster: "e2e=" + peer, State: "new", Token: "gw-tls-" + label},
		}
		if label == "etcd" {
			return harness.StartEtcd(t, opts)
		}
		return harness.StartKVD(t, opts)
	}
	servers := []*harness.Process{start("etcd"), start("kvd")}
	tr := &http.Transport{TLSClientConfig: pki.ClientTLS(t, "alice"), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	// A certificate without a CommonName, for the requests with auth on.
	noCN := pki.ClientTLS(t, "")
	ncert, nkey, _ := pki.Issue(t, "no-cn", "")
	kp, err := tls.LoadX509KeyPair(ncert, nkey)
	if err != nil {
		t.Fatal(err)
	}
	noCN.Certificates = []tls.Certificate{kp}
	trNoCN := &http.Transport{TLSClientConfig: noCN}
	defer trNoCN.CloseIdleConnections()
	client := &http.Client{Timeout: 5 * time.Second, Transport: tr}

	var headers [2]http.Header
	post := func(p *harness.Process, path, body, token string) (int, string, error) {
		req, err := http.NewRequest(http.MethodPost, p.Endpoint()+path, strings.NewReader(body))
		if err != nil {
			return 0, "", err
		}
		if token != "" {
			req.Header.Set("Authorization", token)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		headers[map[bool]int{true: 0, false: 1}[p.IsEtcd()]] = resp.Header
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	for _, p := range servers {
		deadline := time.Now().Add(harness.StartTimeout)
		for {
			code, body, err := post(p, "/v3/kv/range", `{"key":"AA=="}`, "")
			if err == nil && code == http.StatusOK {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: gateway over TLS not ready: %d %s %v", p.Label(), code, body, err)
			}
			if exited, werr := p.Exited(); exited {
				t.Fatalf("%s exited: %v", p.Label(), werr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	tokens := make([]string, len(servers))
	steps := []gwStep{
		{name: "put", path: "/v3/kv/put", body: `{"key":"Zm9v","value":"YmFy"}`},
		{name: "range", path: "/v3/kv/range", body: `{"key":"Zm9v"}`},
		{name: "bad base64", path: "/v3/kv/put", body: `{"key":"!!!"}`},
		{name: "v3beta range", path: "/v3beta/kv/range", body: `{"key":"Zm9v"}`},
		{name: "user add root", path: "/v3/auth/user/add", body: `{"name":"root","password":"pw"}`},
		{name: "grant root", path: "/v3/auth/user/grant", body: `{"user":"root","role":"root"}`},
		{name: "auth enable", path: "/v3/auth/enable", body: `{}`},
		{name: "authenticate with a CN", path: "/v3/auth/authenticate", body: `{"name":"root","password":"pw"}`},
		{name: "range with a CN", path: "/v3/kv/range", body: `{"key":"Zm9v"}`},
		{name: "switch to a certificate without CN"},
		{name: "authenticate", path: "/v3/auth/authenticate", body: `{"name":"root","password":"pw"}`, drop: []string{"token"}},
		{name: "put without token", path: "/v3/kv/put", body: `{"key":"c2VjcmV0","value":"MQ=="}`},
		{name: "put with token", path: "/v3/kv/put", body: `{"key":"c2VjcmV0","value":"MQ=="}`, auth: true},
		{name: "range with token", path: "/v3/kv/range", body: `{"key":"c2VjcmV0"}`, auth: true},
	}
	for _, st := range steps {
		if st.path == "" {
			client.Transport = trNoCN
			continue
		}
		var got [2]gwAnswer
		for i, p := range servers {
			tok := ""
			if st.auth {
				tok = tokens[i]
			}
			code, raw, err := post(p, st.path, st.body, tok)
			if err != nil {
				t.Fatalf("%s: %s: %v", p.Label(), st.name, err)
			}
			got[i] = gwAnswer{status: code, raw: raw}
			if err := json.Unmarshal([]byte(raw), &got[i].body); err != nil {
				got[i].body = raw
			}
			if m, ok := got[i].body.(map[string]any); ok && st.name == "authenticate" {
				tokens[i], _ = m["token"].(string)
			}
		}
		e, k := normalizeGW(got[0].body, st), normalizeGW(got[1].body, st)
		if got[0].status != got[1].status || !reflect.DeepEqual(e, k) {
			t.Errorf("%s: POST %s %s:\netcd: %d %s\nkvd:  %d %s", st.name, st.path, st.body, got[0].status, got[0].raw, got[1].status, got[1].raw)
		}
		// etcd refuses a CN before it writes the CORS headers.
		if o := headers[1].Get("Access-Control-Allow-Origin"); o != "*" && !strings.HasSuffix(st.name, "with a CN") {
			t.Errorf("%s: kvd's Access-Control-Allow-Origin %q, want *", st.name, o)
		}
		for _, h := range []string{"Access-Control-Allow-Origin", "Access-Control-Allow-Methods", "Access-Control-Allow-Headers"} {
			if headers[0].Get(h) != headers[1].Get(h) {
				t.Errorf("%s: header %s: etcd %q, kvd %q", st.name, h, headers[0].Get(h), headers[1].Get(h))
			}
		}
	}

	// No client certificate: refused at the handshake by both.
	bare := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: pki.ClientTLS(t, "")}}
	for _, p := range servers {
		resp, err := bare.Post(p.Endpoint()+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"Zm9v"}`))
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: a caller without a client certificate got %d", p.Label(), resp.StatusCode)
		}
	}

	// A CORS preflight is answered 200 by both.
	for _, p := range servers {
		req, err := http.NewRequest(http.MethodOptions, p.Endpoint()+"/v3/kv/range", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: OPTIONS: %v", p.Label(), err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("%s: OPTIONS: %d %v", p.Label(), resp.StatusCode, resp.Header)
		}
	}

	// Rotate kvd's certificate: a new connection of the caller is served
	// with it, through the gateway.
	kvd := servers[1]
	_, _, rotated := pki.Issue(t, "kvd-server", "gw-member")
	if got := servedSerial(t, kvd.Endpoint(), pki); got.Cmp(rotated) != 0 {
		t.Errorf("kvd serves serial %x after the rotation, want %x", got, rotated)
	}
	trNoCN.CloseIdleConnections()
	if code, raw, err := post(kvd, "/v3/kv/range", `{"key":"c2VjcmV0"}`, tokens[1]); err != nil || code != http.StatusOK || !strings.Contains(raw, `"count":"1"`) {
		t.Errorf("kvd after rotating its certificate: %d %s %v", code, raw, err)
	}
}
