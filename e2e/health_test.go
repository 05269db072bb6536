package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// healthProbe is one request to a member's health endpoints.
type healthProbe struct{ method, path string }

// healthProbes are sent in every phase of TestHealthProbes to the client
// URL; healthMetricsProbes to listen-metrics-urls too.
var (
	healthProbes = []healthProbe{
		{"GET", "/health"},
		{"GET", "/health?serializable=true"},
		{"GET", "/health?exclude=NOSPACE"},
		{"GET", "/health?exclude=CORRUPT"},
		{"GET", "/health?exclude=NOSPACE&exclude=CORRUPT"},
		{"GET", "/health?exclude=nospace"},
		{"POST", "/health"},
		{"GET", "/health/"},
		{"GET", "/livez"},
		{"GET", "/livez?verbose"},
		{"GET", "/livez?exclude=serializable_read&verbose"},
		{"GET", "/livez/serializable_read?verbose"},
		{"GET", "/livez/linearizable_read"},
		{"GET", "/readyz"},
		{"GET", "/readyz?verbose"},
		{"GET", "/readyz?exclude=data_corruption"},
		{"GET", "/readyz?exclude=data_corruption&exclude=non_exist&verbose"},
		{"GET", "/readyz?exclude=non_exist"},
		{"GET", "/readyz/data_corruption"},
		{"GET", "/readyz/data_corruption?exclude=data_corruption&verbose"},
		{"GET", "/readyz/serializable_read?verbose"},
		{"GET", "/readyz/linearizable_read?verbose"},
		{"GET", "/readyz/non_learner?verbose"},
		{"GET", "/readyz/non_exist"},
		{"GET", "/readyz/"},
		{"POST", "/readyz"},
		{"HEAD", "/livez"},
	}
	healthMetricsProbes = []healthProbe{
		{"GET", "/health"},
		{"GET", "/health?exclude=NOSPACE"},
		{"GET", "/livez?verbose"},
		{"GET", "/readyz?verbose"},
		{"GET", "/readyz/data_corruption"},
		{"GET", "/readyz/non_exist"},
	}
)

// TestHealthProbes sends etcd's health probes (/health, /livez, /readyz,
// their query parameters and sub-paths, other methods, unknown checks) to
// etcd v3.7.3 and kvd (bolt), on the client URL and on
// listen-metrics-urls, in four phases: healthy, NOSPACE raised, CORRUPT
// raised too, both cleared. Status codes, bodies and the headers etcd sets
// must be equal, and so must the health metrics the probes leave.
//
// Normalised, because etcd's own answers vary from run to run: the order of
// the /livez and /readyz report lines (etcd runs its checks in Go map
// order), and with two alarms raised, which one an unfiltered /health
// names (etcd lists alarms in map order too).
func TestHealthProbes(t *testing.T) {
	var want []string
	t.Run("etcd", func(t *testing.T) {
		murl := freeURL(t)
		want = healthScenario(t, harness.StartEtcd(t, harness.Options{Args: []string{"--listen-metrics-urls", murl}}), murl)
	})
	if want == nil {
		t.Fatal("reference scenario did not complete")
	}
	t.Logf("etcd's answers:\n%s", strings.Join(want, "\n"))
	t.Run("bolt", func(t *testing.T) {
		murl := freeURL(t)
		got := healthScenario(t, harness.StartKVD(t, harness.Options{Engine: "bolt", Args: []string{"--listen-metrics-urls", murl}}), murl)
		if got == nil {
			return
		}
		for i := range max(len(got), len(want)) {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("answer %d differs:\n etcd: %s\n  kvd: %s", i, w, g)
			}
		}
	})
}

// freeURL is an http URL on a free loopback port.
func freeURL(t *testing.T) string {
	t.Helper()
	ports, err := harness.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("http://127.0.0.1:%d", ports[0])
}

// healthScenario returns the answers of p to the probes, phase by phase,
// then its health metrics; nil when a step failed.
func healthScenario(t *testing.T, p *harness.Process, metricsURL string) []string {
	ctx := testCtx(t)
	cli := p.Client(t)
	st, err := cli.Status(ctx, p.Endpoint())
	mustOK(t, "status", err)
	id := st.Header.MemberId
	mc := pb.NewMaintenanceClient(cli.ActiveConnection())
	alarm := func(action pb.AlarmRequest_AlarmAction, at pb.AlarmType) bool {
		_, err := mc.Alarm(ctx, &pb.AlarmRequest{Action: action, MemberID: id, Alarm: at})
		if err != nil {
			t.Errorf("alarm %v %v: %v", action, at, err)
		}
		return err == nil
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	var obs []string
	probe := func(phase, where, base string, pr healthProbe, bothAlarms bool) bool {
		req, err := http.NewRequestWithContext(ctx, pr.method, base+pr.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Errorf("%s %s%s: %v", pr.method, where, pr.path, err)
			return false
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Errorf("%s %s%s: read body: %v", pr.method, where, pr.path, err)
			return false
		}
		body := sortReportLines(string(b))
		if bothAlarms {
			body = strings.NewReplacer(`"ALARM NOSPACE"`, `"ALARM <NOSPACE or CORRUPT>"`, `"ALARM CORRUPT"`, `"ALARM <NOSPACE or CORRUPT>"`).Replace(body)
		}
		var hs []string
		for _, h := range []string{"Content-Type", "X-Content-Type-Options", "Allow", "Access-Control-Allow-Origin"} {
			if v := resp.Header.Get(h); v != "" {
				hs = append(hs, h+": "+v)
			}
		}
		obs = append(obs, fmt.Sprintf("%s: %s %s%s: %d [%s] %q", phase, pr.method, where, pr.path, resp.StatusCode, strings.Join(hs, "; "), body))
		return true
	}
	run := func(phase string, bothAlarms bool) bool {
		for _, pr := range healthProbes {
			both := bothAlarms && !excludesAnAlarm(pr.path)
			if !probe(phase, "client", p.Endpoint(), pr, both) {
				return false
			}
		}
		for _, pr := range healthMetricsProbes {
			both := bothAlarms && !excludesAnAlarm(pr.path)
			if !probe(phase, "metrics", metricsURL, pr, both) {
				return false
			}
		}
		return true
	}
	ok := run("healthy", false) &&
		alarm(pb.AlarmRequest_ACTIVATE, pb.AlarmType_NOSPACE) && run("NOSPACE", false) &&
		alarm(pb.AlarmRequest_ACTIVATE, pb.AlarmType_CORRUPT) && run("NOSPACE+CORRUPT", true) &&
		alarm(pb.AlarmRequest_DEACTIVATE, pb.AlarmType_NOSPACE) && alarm(pb.AlarmRequest_DEACTIVATE, pb.AlarmType_CORRUPT) && run("cleared", false)
	if !ok {
		return nil
	}
	metrics, err := healthMetrics(hc, metricsURL)
	if err != nil {
		t.Errorf("metrics: %v", err)
		return nil
	}
	return append(obs, metrics...)
}

// sortReportLines sorts the "[+]check ok" / "[-]check failed" lines of a
// /livez or /readyz report in place.
func sortReportLines(body string) string {
	lines := strings.Split(body, "\n")
	var at []int
	var report []string
	for i, l := range lines {
		if strings.HasPrefix(l, "[+]") || strings.HasPrefix(l, "[-]") {
			at = append(at, i)
			report = append(report, l)
		}
	}
	slices.SortFunc(report, func(a, b string) int { return strings.Compare(a[3:], b[3:]) })
	for i, j := range at {
		lines[j] = report[i]
	}
	return strings.Join(lines, "\n")
}

// healthMetrics are the health metrics' lines of base's /metrics.
func healthMetrics(hc *http.Client, base string) ([]string, error) {
	resp, err := hc.Get(base + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		name := strings.TrimPrefix(strings.TrimPrefix(l, "# HELP "), "# TYPE ")
		if strings.HasPrefix(name, "etcd_server_health") {
			out = append(out, "metric: "+l)
		}
	}
	return out, sc.Err()
}

// TestHealthLearner: a learner is alive and healthy but not ready; only its
// non_learner check fails. Runs against kvd, or etcd v3.7.3 with
// KVD_E2E_SERVER=etcd, whose answers the expectations are.
func TestHealthLearner(t *testing.T) {
	c := harness.StartCluster(t, 1, harness.ClusterOptions{Engine: "bolt"})
	learner := c.AddMember(t, "learner", true)
	hc := &http.Client{Timeout: 10 * time.Second}
	notReady := "[+]data_corruption ok\n[+]linearizable_read ok\n[-]non_learner failed: not supported for learner\n[+]serializable_read ok\n\n"
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{"/health", 200, `{"health":"true","reason":""}`},
		{"/health?serializable=true", 200, `{"health":"true","reason":""}`},
		{"/livez?verbose", 200, "[+]serializable_read ok\nok\n"},
		{"/readyz", 503, notReady},
		{"/readyz?verbose", 503, notReady},
		{"/readyz/non_learner", 503, "[-]non_learner failed: not supported for learner\n\n"},
		{"/readyz?exclude=non_learner&verbose", 200, "[+]data_corruption ok\n[+]linearizable_read ok\n[+]serializable_read ok\nok\n"},
		{"/readyz/linearizable_read", 200, "ok\n"},
	} {
		resp, err := hc.Get(learner.Endpoint() + tc.path)
		if err != nil {
			t.Errorf("GET %s: %v", tc.path, err)
			continue
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			t.Errorf("GET %s: read body: %v", tc.path, err)
			continue
		}
		if body := sortReportLines(string(b)); resp.StatusCode != tc.code || body != tc.body {
			t.Errorf("learner GET %s: %d %q, want %d %q", tc.path, resp.StatusCode, body, tc.code, tc.body)
		}
	}
}

// excludesAnAlarm reports whether a probe path's exclude names a raised
// alarm. Without one (none, or ?exclude=nospace, which etcd matches case by
// case), /health names either of two raised alarms: etcd lists them in map
// order.
func excludesAnAlarm(path string) bool {
	return strings.Contains(path, "exclude=NOSPACE") || strings.Contains(path, "exclude=CORRUPT")
}
