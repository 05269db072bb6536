package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// gwStep is one request to etcd's JSON gateway (/v3/...).
type gwStep struct {
	name, path, body string
	auth             bool     // send the token from the last authenticate
	drop             []string // top-level fields (or "a.b") left out of the comparison
	shape            bool     // compare only the status and the key set
}

// gwAnswer is what one server answered to one step.
type gwAnswer struct {
	status int
	body   any
	raw    string
}

// TestGatewayDiff sends the same sequence of JSON gateway requests to etcd
// v3.7.3 and to kvd (bolt) and requires equal status codes and JSON bodies
// (header cluster_id, member_id and raft_term, tokens and remaining TTLs
// left out).
func TestGatewayDiff(t *testing.T) {
	var (
		wg     sync.WaitGroup
		kp, ep *harness.Process
	)
	// Started one after the other: the harness must be used from the test
	// goroutine.
	kp = harness.StartKVD(t, harness.Options{Engine: "bolt"})
	ep = harness.StartEtcd(t, harness.Options{})

	steps := []gwStep{
		{name: "put foo", path: "/v3/kv/put", body: `{"key":"Zm9v","value":"YmFy"}`},
		{name: "put foo1 prev_kv", path: "/v3/kv/put", body: `{"key":"Zm9vMQ==","value":"MQ==","prev_kv":true}`},
		{name: "put foo1 again prev_kv", path: "/v3/kv/put", body: `{"key":"Zm9vMQ==","value":"Mg==","prev_kv":true}`},
		{name: "put zoo", path: "/v3/kv/put", body: `{"key":"em9v","value":"eg=="}`},
		{name: "range foo", path: "/v3/kv/range", body: `{"key":"Zm9v"}`},
		{name: "range prefix foo", path: "/v3/kv/range", body: `{"key":"Zm9v","range_end":"Zm9w"}`},
		{name: "range prefix keys_only", path: "/v3/kv/range", body: `{"key":"Zm9v","range_end":"Zm9w","keys_only":true}`},
		{name: "range all count_only", path: "/v3/kv/range", body: `{"key":"AA==","range_end":"AA==","count_only":true}`},
		{name: "range missing", path: "/v3/kv/range", body: `{"key":"bm9wZQ=="}`},
		{name: "txn success", path: "/v3/kv/txn", body: `{"compare":[{"key":"Zm9v","result":"EQUAL","target":"VALUE","value":"YmFy"}],"success":[{"request_put":{"key":"Zm9v","value":"YmF6"}}],"failure":[{"request_range":{"key":"Zm9v"}}]}`},
		{name: "txn failure", path: "/v3/kv/txn", body: `{"compare":[{"key":"Zm9v","result":"EQUAL","target":"VALUE","value":"YmFy"}],"success":[{"request_put":{"key":"Zm9v","value":"YmF6"}}],"failure":[{"request_range":{"key":"Zm9v"}}]}`},
		{name: "txn mod_revision", path: "/v3/kv/txn", body: `{"compare":[{"key":"em9v","result":"LESS","target":"MOD","mod_revision":"100"}],"success":[{"request_delete_range":{"key":"em9v","prev_kv":true}}]}`},
		{name: "deleterange prefix", path: "/v3/kv/deleterange", body: `{"key":"Zm9v","range_end":"Zm9w","prev_kv":true}`},
		{name: "deleterange missing", path: "/v3/kv/deleterange", body: `{"key":"Zm9v"}`},
		{name: "compaction", path: "/v3/kv/compaction", body: `{"revision":"3"}`},
		{name: "compaction again", path: "/v3/kv/compaction", body: `{"revision":"3"}`},
		{name: "range compacted", path: "/v3/kv/range", body: `{"key":"Zm9v","revision":"2"}`},
		{name: "lease grant", path: "/v3/lease/grant", body: `{"TTL":"60","ID":"4242"}`},
		{name: "lease grant dup", path: "/v3/lease/grant", body: `{"TTL":"60","ID":"4242"}`},
		{name: "put with lease", path: "/v3/kv/put", body: `{"key":"bGVhc2Vk","value":"dg==","lease":"4242"}`},
		{name: "lease timetolive", path: "/v3/lease/timetolive", body: `{"ID":"4242","keys":true}`, drop: []string{"TTL"}},
		{name: "lease revoke", path: "/v3/lease/revoke", body: `{"ID":"4242"}`},
		{name: "lease timetolive revoked", path: "/v3/lease/timetolive", body: `{"ID":"4242"}`},
		{name: "lease revoke missing", path: "/v3/lease/revoke", body: `{"ID":"4242"}`},
		{name: "range leased gone", path: "/v3/kv/range", body: `{"key":"bGVhc2Vk"}`},
		{name: "member list", path: "/v3/cluster/member/list", body: `{}`, shape: true},
		{name: "maintenance status", path: "/v3/maintenance/status", body: `{}`, shape: true},
		// Bad input.
		{name: "malformed json", path: "/v3/kv/put", body: `{"key":`},
		{name: "bad base64", path: "/v3/kv/put", body: `{"key":"!!!","value":"YmFy"}`},
		{name: "unknown field", path: "/v3/kv/put", body: `{"key":"Zm9v","value":"YmFy","nope":1}`},
		{name: "unknown path", path: "/v3/kv/nope", body: `{}`},
		{name: "empty key", path: "/v3/kv/put", body: `{"value":"YmFy"}`},
		// Over max-request-bytes (1.5 MiB), and over the gRPC message
		// limit above it (2 MiB).
		{name: "put 1.6 MB", path: "/v3/kv/put", body: `{"key":"Ymln","value":"` + strings.Repeat("QUFB", 1600000/3) + `"}`},
		{name: "put 3 MB", path: "/v3/kv/put", body: `{"key":"Ymln","value":"` + strings.Repeat("QUFB", 3000000/3) + `"}`},
		{name: "range big", path: "/v3/kv/range", body: `{"key":"Ymln","count_only":true}`},
		// Auth through the gateway.
		{name: "user add", path: "/v3/auth/user/add", body: `{"name":"root","password":"pw"}`},
		{name: "user grant root", path: "/v3/auth/user/grant", body: `{"user":"root","role":"root"}`},
		{name: "auth enable", path: "/v3/auth/enable", body: `{}`},
		{name: "authenticate wrong", path: "/v3/auth/authenticate", body: `{"name":"root","password":"no"}`},
		{name: "authenticate", path: "/v3/auth/authenticate", body: `{"name":"root","password":"pw"}`, drop: []string{"token"}},
		{name: "put without token", path: "/v3/kv/put", body: `{"key":"c2VjcmV0","value":"MQ=="}`},
		{name: "put with token", path: "/v3/kv/put", body: `{"key":"c2VjcmV0","value":"MQ=="}`, auth: true},
		{name: "range with token", path: "/v3/kv/range", body: `{"key":"c2VjcmV0"}`, auth: true},
		{name: "auth disable", path: "/v3/auth/disable", body: `{}`, auth: true},
	}

	type served struct {
		p     *harness.Process
		token string
		watch *bufio.Reader
		close func()
		ans   []gwAnswer
	}
	servers := []*served{{p: ep}, {p: kp}}
	client := &http.Client{Timeout: 5 * time.Second}

	// A streamed watch on prefix "w", opened before any step, must see the
	// put below as its first event after the created message.
	for _, s := range servers {
		req, err := http.NewRequest(http.MethodPost, s.p.Endpoint()+"/v3/watch", strings.NewReader(`{"create_request":{"key":"dw==","range_end":"eA=="}}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := (&http.Client{}).Do(req)
		if err != nil {
			t.Fatalf("%s: watch: %v", s.p.Label(), err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: watch: status %d", s.p.Label(), resp.StatusCode)
		}
		s.watch = bufio.NewReader(resp.Body)
		s.close = func() { resp.Body.Close() }
		t.Cleanup(s.close)
	}

	do := func(s *served, st gwStep) gwAnswer {
		req, err := http.NewRequest(http.MethodPost, s.p.Endpoint()+st.path, strings.NewReader(st.body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if st.auth {
			req.Header.Set("Authorization", s.token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %s: %v", s.p.Label(), st.name, err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s: %s: read: %v", s.p.Label(), st.name, err)
		}
		a := gwAnswer{status: resp.StatusCode, raw: string(raw)}
		if err := json.Unmarshal(raw, &a.body); err != nil {
			a.body = string(raw)
		}
		if m, ok := a.body.(map[string]any); ok && st.path == "/v3/auth/authenticate" {
			if tok, ok := m["token"].(string); ok {
				s.token = tok
			}
		}
		return a
	}

	for _, st := range steps {
		var got [2]gwAnswer
		for i, s := range servers {
			got[i] = do(s, st)
		}
		e, k := normalizeGW(got[0].body, st), normalizeGW(got[1].body, st)
		if got[0].status != got[1].status || !reflect.DeepEqual(e, k) {
			t.Errorf("%s: POST %s %s:\netcd: %d %s\nkvd:  %d %s", st.name, st.path, st.body, got[0].status, got[0].raw, got[1].status, got[1].raw)
		}
		if st.name == "put zoo" {
			// Between the steps: the put the watches see.
			wput := gwStep{name: "put w1", path: "/v3/kv/put", body: `{"key":"dzE=","value":"d3Y="}`}
			for _, s := range servers {
				if a := do(s, wput); a.status != http.StatusOK {
					t.Fatalf("%s: put w1: %d %s", s.p.Label(), a.status, a.raw)
				}
			}
			var msgs [2][2]any
			for i, s := range servers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range 2 {
						line, err := s.watch.ReadBytes('\n')
						if err != nil && len(bytes.TrimSpace(line)) == 0 {
							msgs[i][j] = fmt.Sprintf("read: %v", err)
							return
						}
						var v any
						if err := json.Unmarshal(line, &v); err != nil {
							msgs[i][j] = fmt.Sprintf("%q: %v", line, err)
							return
						}
						msgs[i][j] = normalizeGW(v, gwStep{})
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				for _, s := range servers {
					s.close()
				}
				<-done
			}
			if !reflect.DeepEqual(msgs[0], msgs[1]) {
				t.Errorf("watch: first two messages differ:\netcd: %v\nkvd:  %v", msgs[0], msgs[1])
			}
			if m, ok := msgs[1][1].(map[string]any); !ok || !strings.Contains(fmt.Sprint(m), "dzE=") {
				t.Errorf("watch: the second message is not the put of w1: %v", msgs[1][1])
			}
		}
	}
}

// normalizeGW drops what legitimately differs between two fresh members:
// header cluster_id, member_id, raft_term (everywhere), and the step's
// dropped fields; with shape only the key sets remain.
func normalizeGW(v any, st gwStep) any {
	v = stripIDs(v)
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	for _, f := range st.drop {
		delete(m, f)
	}
	if st.shape {
		return shapeOf(m)
	}
	return m
}

func stripIDs(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range []string{"cluster_id", "member_id", "raft_term"} {
			delete(x, k)
		}
		for k, e := range x {
			x[k] = stripIDs(e)
		}
	case []any:
		for i, e := range x {
			x[i] = stripIDs(e)
		}
	case string:
		// protojson's error messages space with a U+00A0 or not, per
		// binary (internal/detrand).
		return strings.ReplaceAll(x, "\u00a0", " ")
	}
	return v
}

// shapeOf keeps the key structure of v (values replaced by their JSON type).
func shapeOf(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = shapeOf(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = shapeOf(e)
		}
		return out
	default:
		return fmt.Sprintf("%T", v)
	}
}

// TestGatewayWebsocketWatch opens /v3/watch as a websocket (etcd wraps its
// gateway in tmc/grpc-websocket-proxy) on etcd v3.7.3 and kvd (bolt), sends
// a create_request, puts a key and requires the same two messages.
func TestGatewayWebsocketWatch(t *testing.T) {
	kp := harness.StartKVD(t, harness.Options{Engine: "bolt"})
	ep := harness.StartEtcd(t, harness.Options{})
	var got [2][2]any
	for i, p := range []*harness.Process{ep, kp} {
		host := strings.TrimPrefix(p.Endpoint(), "http://")
		c, err := net.DialTimeout("tcp", host, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET /v3/watch HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", host)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: handshake: %v", p.Label(), err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("%s: handshake: %s", p.Label(), resp.Status)
		}
		wsWriteText(t, c, `{"create_request":{"key":"dw==","range_end":"eA=="}}`)
		for j := range 2 {
			if j == 1 {
				req, _ := http.NewRequest(http.MethodPost, p.Endpoint()+"/v3/kv/put", strings.NewReader(`{"key":"dzI=","value":"dg=="}`))
				r, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				r.Body.Close()
			}
			msg, err := wsReadText(br)
			if err != nil {
				t.Fatalf("%s: message %d: %v", p.Label(), j, err)
			}
			var v any
			if err := json.Unmarshal(msg, &v); err != nil {
				t.Fatalf("%s: message %d %q: %v", p.Label(), j, msg, err)
			}
			got[i][j] = normalizeGW(v, gwStep{})
		}
	}
	if !reflect.DeepEqual(got[0], got[1]) {
		t.Errorf("websocket watch differs:\netcd: %v\nkvd:  %v", got[0], got[1])
	}
	if !strings.Contains(fmt.Sprint(got[1][1]), "dzI=") {
		t.Errorf("second message is not the put: %v", got[1][1])
	}
}

// wsWriteText writes one masked text frame (payload under 126 bytes).
func wsWriteText(t *testing.T, w io.Writer, s string) {
	t.Helper()
	if len(s) >= 126 {
		t.Fatalf("wsWriteText: %d bytes", len(s))
	}
	mask := [4]byte{1, 2, 3, 4}
	f := []byte{0x81, 0x80 | byte(len(s)), mask[0], mask[1], mask[2], mask[3]}
	for i := range len(s) {
		f = append(f, s[i]^mask[i%4])
	}
	if _, err := w.Write(f); err != nil {
		t.Fatal(err)
	}
}

// wsReadText reads one unmasked, unfragmented data frame.
func wsReadText(r *bufio.Reader) ([]byte, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, err
		}
		n = uint64(b[0])<<8 | uint64(b[1])
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, err
		}
		n = 0
		for _, x := range b {
			n = n<<8 | uint64(x)
		}
	}
	if h[0]&0x0f != 1 && h[0]&0x0f != 2 {
		return nil, fmt.Errorf("frame opcode %#x", h[0]&0x0f)
	}
	buf := make([]byte, n)
	_, err := io.ReadFull(r, buf)
	return buf, err
}
