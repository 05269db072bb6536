package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// TestProbesOnMember: the probes of pkg/probes answer on the client port and
// on listen-metrics-urls of a running member, with its reads, alarms and
// learner state, and count on one set of health metrics.
func TestProbesOnMember(t *testing.T) {
	c := testConfig(t, "bolt", t.TempDir())
	c.ListenMetricsURLs = fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
	m := startMember(t, c)
	put(t, m, "k", "v") // a leader exists
	u, _ := c.ClientURLs()
	mu, _ := c.MetricsURLs()
	get := func(host, path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + host + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, string(body)
	}
	check := func(when string, want map[string]string) {
		t.Helper()
		for path, w := range want {
			wantCode, wantBody, _ := strings.Cut(w, " ")
			for _, host := range []string{u[0].Host, mu[0].Host} {
				code, body := get(host, path)
				if fmt.Sprint(code) != wantCode || body != wantBody {
					t.Errorf("%s: GET %s%s: %d %q, want %s %q", when, host, path, code, body, wantCode, wantBody)
				}
			}
		}
	}
	check("healthy", map[string]string{
		"/health":                   `200 {"health":"true","reason":""}`,
		"/health?serializable=true": `200 {"health":"true","reason":""}`,
		"/livez?verbose":            "200 [+]serializable_read ok\nok\n",
		"/readyz?verbose":           "200 [+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\nok\n",
		"/readyz/linearizable_read": "200 ok\n",
	})
	_, err := m.maint().Alarm(context.Background(), &pb.AlarmRequest{Action: pb.AlarmRequest_ACTIVATE, MemberID: mustID(t, m), Alarm: pb.AlarmType_CORRUPT})
	if err != nil {
		t.Fatal(err)
	}
	check("CORRUPT", map[string]string{
		"/health":                         `503 {"health":"false","reason":"ALARM CORRUPT"}` + "\n",
		"/health?exclude=CORRUPT":         `200 {"health":"true","reason":""}`,
		"/livez":                          "200 ok\n",
		"/readyz":                         "503 [-]data_corruption failed: alarm activated: CORRUPT\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\n\n",
		"/readyz?exclude=data_corruption": "200 ok\n",
	})
	_, text := get(u[0].Host, "/metrics")
	for _, want := range []string{
		"etcd_server_health_success 6\n",
		"etcd_server_health_failures 2\n",
		`etcd_server_healthcheck{name="data_corruption",type="readyz"} 0` + "\n",
		`etcd_server_healthchecks_total{name="linearizable_read",status="success",type="readyz"} 8` + "\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
