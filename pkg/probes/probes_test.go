package probes

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// fakeMember is a member whose answers the test sets.
type fakeMember struct {
	mu              sync.Mutex
	alarms          []*pb.AlarmMember
	noLeader        bool
	learner         bool
	serializableErr error
	linearizableErr error
	reads           []bool // the serializable flag of each Read
}

func (f *fakeMember) Alarms() []*pb.AlarmMember {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.alarms
}

func (f *fakeMember) Leader() uint64 {
	if f.noLeader {
		return 0
	}
	return 1
}

func (f *fakeMember) IsLearner() bool { return f.learner }

func (f *fakeMember) Read(ctx context.Context, serializable bool) error {
	f.mu.Lock()
	f.reads = append(f.reads, serializable)
	f.mu.Unlock()
	if serializable {
		return f.serializableErr
	}
	return f.linearizableErr
}

func alarm(member uint64, at pb.AlarmType) *pb.AlarmMember {
	return &pb.AlarmMember{MemberID: member, Alarm: at}
}

var (
	noSpace    = alarm(1, pb.AlarmType_NOSPACE)
	corrupt    = alarm(2, pb.AlarmType_CORRUPT)
	errBroken  = errors.New("Unexpected error")
	errTimeout = errors.New("etcdserver: request timed out")
)

// The failure reports of /livez and /readyz end in two newlines: etcd
// passes the report, which ends in one, to http.Error, which adds one.
const (
	readyzAllOK = "[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\n"
	textPlain   = "text/plain; charset=utf-8"
)

type probeCase struct {
	name     string
	member   fakeMember
	method   string // GET when empty
	url      string
	wantCode int
	wantBody string
	// wantReads are the Read calls, by their serializable flag; nil: not
	// checked.
	wantReads []bool
}

func TestProbes(t *testing.T) {
	cases := []probeCase{
		// /health, after etcd's TestHealthHandler.
		{name: "health ok", url: "/health", wantCode: 200, wantBody: `{"health":"true","reason":""}`, wantReads: []bool{false}},
		{name: "health NOSPACE", member: fakeMember{alarms: []*pb.AlarmMember{noSpace}}, url: "/health",
			wantCode: 503, wantBody: `{"health":"false","reason":"ALARM NOSPACE"}` + "\n", wantReads: []bool{}},
		{name: "health NOSPACE excluded", member: fakeMember{alarms: []*pb.AlarmMember{noSpace}}, url: "/health?exclude=NOSPACE",
			wantCode: 200, wantBody: `{"health":"true","reason":""}`},
		{name: "health excluded, none raised", url: "/health?exclude=NOSPACE", wantCode: 200, wantBody: `{"health":"true","reason":""}`},
		{name: "health NOSPACE of three members excluded",
			member: fakeMember{alarms: []*pb.AlarmMember{alarm(1, pb.AlarmType_NOSPACE), alarm(2, pb.AlarmType_NOSPACE), alarm(3, pb.AlarmType_NOSPACE)}},
			url:    "/health?exclude=NOSPACE", wantCode: 200, wantBody: `{"health":"true","reason":""}`},
		{name: "health CORRUPT not excluded", member: fakeMember{alarms: []*pb.AlarmMember{noSpace, corrupt}}, url: "/health?exclude=NOSPACE",
			wantCode: 503, wantBody: `{"health":"false","reason":"ALARM CORRUPT"}` + "\n"},
		{name: "health both excluded", member: fakeMember{alarms: []*pb.AlarmMember{noSpace, corrupt}}, url: "/health?exclude=NOSPACE&exclude=CORRUPT",
			wantCode: 200, wantBody: `{"health":"true","reason":""}`},
		{name: "health first alarm wins", member: fakeMember{alarms: []*pb.AlarmMember{noSpace, corrupt}}, url: "/health",
			wantCode: 503, wantBody: `{"health":"false","reason":"ALARM NOSPACE"}` + "\n"},
		{name: "health exclude is case-sensitive", member: fakeMember{alarms: []*pb.AlarmMember{noSpace}}, url: "/health?exclude=nospace",
			wantCode: 503, wantBody: `{"health":"false","reason":"ALARM NOSPACE"}` + "\n"},
		{name: "health unknown alarm type", member: fakeMember{alarms: []*pb.AlarmMember{alarm(1, pb.AlarmType(7))}}, url: "/health",
			wantCode: 503, wantBody: `{"health":"false","reason":"ALARM UNKNOWN"}` + "\n"},
		{name: "health read fails", member: fakeMember{linearizableErr: errBroken, serializableErr: errBroken}, url: "/health",
			wantCode: 503, wantBody: `{"health":"false","reason":"RANGE ERROR:Unexpected error"}` + "\n"},
		{name: "health no leader", member: fakeMember{noLeader: true}, url: "/health",
			wantCode: 503, wantBody: `{"health":"false","reason":"RAFT NO LEADER"}` + "\n", wantReads: []bool{}},
		{name: "health no leader serializable", member: fakeMember{noLeader: true}, url: "/health?serializable=true",
			wantCode: 200, wantBody: `{"health":"true","reason":""}`, wantReads: []bool{true}},
		{name: "health serializable needs true", member: fakeMember{noLeader: true}, url: "/health?serializable=1",
			wantCode: 503, wantBody: `{"health":"false","reason":"RAFT NO LEADER"}` + "\n"},
		{name: "health serializable read fails", member: fakeMember{serializableErr: errBroken}, url: "/health?serializable=true",
			wantCode: 503, wantBody: `{"health":"false","reason":"RANGE ERROR:Unexpected error"}` + "\n"},
		{name: "health alarm before leader", member: fakeMember{noLeader: true, alarms: []*pb.AlarmMember{corrupt}}, url: "/health?serializable=true",
			wantCode: 503, wantBody: `{"health":"false","reason":"ALARM CORRUPT"}` + "\n"},
		{name: "health learner is healthy", member: fakeMember{learner: true}, url: "/health", wantCode: 200, wantBody: `{"health":"true","reason":""}`},
		{name: "health POST", method: http.MethodPost, url: "/health", wantCode: 405, wantBody: "Method Not Allowed\n"},

		// /livez, after etcd's TestSerializableReadCheck and
		// TestLinearizableReadCheck.
		{name: "livez ok", url: "/livez", wantCode: 200, wantBody: "ok\n", wantReads: []bool{true}},
		{name: "livez verbose", url: "/livez?verbose", wantCode: 200, wantBody: "[+]serializable_read ok\nok\n"},
		{name: "livez verbose with a value", url: "/livez?verbose=false", wantCode: 200, wantBody: "[+]serializable_read ok\nok\n"},
		{name: "livez serializable read fails", member: fakeMember{serializableErr: errBroken}, url: "/livez",
			wantCode: 503, wantBody: "[-]serializable_read failed: Unexpected error\n\n"},
		{name: "livez ignores linearizable reads", member: fakeMember{linearizableErr: errBroken, noLeader: true}, url: "/livez",
			wantCode: 200, wantBody: "ok\n"},
		{name: "livez ignores CORRUPT", member: fakeMember{alarms: []*pb.AlarmMember{corrupt}}, url: "/livez?verbose",
			wantCode: 200, wantBody: "[+]serializable_read ok\nok\n"},
		{name: "livez ignores learners", member: fakeMember{learner: true}, url: "/livez", wantCode: 200, wantBody: "ok\n"},
		{name: "livez exclude its check", member: fakeMember{serializableErr: errBroken}, url: "/livez?exclude=serializable_read&verbose",
			wantCode: 200, wantBody: "ok\n", wantReads: []bool{}},
		{name: "livez sub-path", url: "/livez/serializable_read?verbose", wantCode: 200, wantBody: "[+]serializable_read ok\nok\n"},
		{name: "livez readyz's check is no sub-path", url: "/livez/linearizable_read", wantCode: 404, wantBody: "404 page not found\n"},
		{name: "livez POST", method: http.MethodPost, url: "/livez", wantCode: 405, wantBody: "Method Not Allowed\n"},

		// /readyz, after etcd's TestDataCorruptionCheck,
		// TestLinearizableReadCheck and TestLearnerReadyCheck.
		{name: "readyz ok", url: "/readyz", wantCode: 200, wantBody: "ok\n", wantReads: []bool{true, false}},
		{name: "readyz verbose", url: "/readyz?verbose", wantCode: 200, wantBody: readyzAllOK + "ok\n"},
		{name: "readyz NOSPACE is ready", member: fakeMember{alarms: []*pb.AlarmMember{noSpace}}, url: "/readyz", wantCode: 200, wantBody: "ok\n"},
		{name: "readyz CORRUPT", member: fakeMember{alarms: []*pb.AlarmMember{corrupt}}, url: "/readyz", wantCode: 503,
			wantBody: "[-]data_corruption failed: alarm activated: CORRUPT\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\n\n"},
		{name: "readyz CORRUPT excluded", member: fakeMember{alarms: []*pb.AlarmMember{corrupt, noSpace}}, url: "/readyz?exclude=data_corruption&verbose",
			wantCode: 200, wantBody: "[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\nok\n"},
		{name: "readyz unknown exclude is ignored", member: fakeMember{alarms: []*pb.AlarmMember{corrupt}}, url: "/readyz?exclude=non_exist",
			wantCode: 503, wantBody: "[-]data_corruption failed: alarm activated: CORRUPT\n[+]serializable_read ok\n[+]linearizable_read ok\n[+]non_learner ok\n\n"},
		{name: "readyz empty exclude", url: "/readyz?exclude=&verbose", wantCode: 200, wantBody: readyzAllOK + "ok\n"},
		{name: "readyz exclude two", url: "/readyz?exclude=serializable_read&exclude=non_learner&verbose", wantCode: 200,
			wantBody: "[+]data_corruption ok\n[+]linearizable_read ok\nok\n", wantReads: []bool{false}},
		{name: "readyz linearizable read fails", member: fakeMember{linearizableErr: errTimeout}, url: "/readyz", wantCode: 503,
			wantBody: "[+]data_corruption ok\n[+]serializable_read ok\n[-]linearizable_read failed: etcdserver: request timed out\n[+]non_learner ok\n\n"},
		{name: "readyz both reads fail", member: fakeMember{linearizableErr: errBroken, serializableErr: errBroken}, url: "/readyz", wantCode: 503,
			wantBody: "[+]data_corruption ok\n[-]serializable_read failed: Unexpected error\n[-]linearizable_read failed: Unexpected error\n[+]non_learner ok\n\n"},
		{name: "readyz learner", member: fakeMember{learner: true}, url: "/readyz", wantCode: 503,
			wantBody: "[+]data_corruption ok\n[+]serializable_read ok\n[+]linearizable_read ok\n[-]non_learner failed: not supported for learner\n\n"},
		{name: "readyz learner excluded", member: fakeMember{learner: true}, url: "/readyz?exclude=non_learner", wantCode: 200, wantBody: "ok\n"},
		{name: "readyz POST", method: http.MethodPost, url: "/readyz", wantCode: 405, wantBody: "Method Not Allowed\n"},
		{name: "readyz HEAD", method: http.MethodHead, url: "/readyz", wantCode: 405, wantBody: ""},

		// Sub-paths, after etcd's TestHTTPSubPath: one check, exclude
		// ignored.
		{name: "sub data_corruption", url: "/readyz/data_corruption", wantCode: 200, wantBody: "ok\n", wantReads: []bool{}},
		{name: "sub data_corruption verbose", url: "/readyz/data_corruption?verbose", wantCode: 200, wantBody: "[+]data_corruption ok\nok\n"},
		{name: "sub data_corruption CORRUPT", member: fakeMember{alarms: []*pb.AlarmMember{corrupt}}, url: "/readyz/data_corruption?exclude=data_corruption",
			wantCode: 503, wantBody: "[-]data_corruption failed: alarm activated: CORRUPT\n\n"},
		{name: "sub serializable_read fails", member: fakeMember{serializableErr: errBroken}, url: "/readyz/serializable_read",
			wantCode: 503, wantBody: "[-]serializable_read failed: Unexpected error\n\n"},
		{name: "sub linearizable_read", url: "/readyz/linearizable_read?verbose", wantCode: 200, wantBody: "[+]linearizable_read ok\nok\n", wantReads: []bool{false}},
		{name: "sub non_learner", url: "/readyz/non_learner", wantCode: 200, wantBody: "ok\n"},
		{name: "sub non_learner learner", member: fakeMember{learner: true}, url: "/readyz/non_learner",
			wantCode: 503, wantBody: "[-]non_learner failed: not supported for learner\n\n"},
		{name: "sub unknown", url: "/readyz/non_exist", wantCode: 404, wantBody: "404 page not found\n"},
		{name: "sub trailing slash", url: "/readyz/", wantCode: 404, wantBody: "404 page not found\n"},
		{name: "health trailing slash", url: "/health/", wantCode: 404, wantBody: "404 page not found\n"},
		{name: "sub POST", method: http.MethodPost, url: "/readyz/linearizable_read", wantCode: 405, wantBody: "Method Not Allowed\n"},
	}
	for i := range cases {
		tc := &cases[i]
		t.Run(tc.name, func(t *testing.T) {
			m := &tc.member
			p, err := New(m, Options{})
			if err != nil {
				t.Fatal(err)
			}
			mux := http.NewServeMux()
			p.Install(mux)
			code, header, body := do(t, mux, tc.method, tc.url)
			if code != tc.wantCode || body != tc.wantBody {
				t.Errorf("%s %s: %d %q, want %d %q", tc.method, tc.url, code, body, tc.wantCode, tc.wantBody)
			}
			if tc.wantReads != nil && !equalBools(m.reads, tc.wantReads) {
				t.Errorf("reads (serializable) %v, want %v", m.reads, tc.wantReads)
			}
			checkHeaders(t, tc.url, code, header)
		})
	}
}

// checkHeaders checks etcd's headers: text/plain everywhere (/health's
// JSON included), nosniff on every answer but /health's 200, Allow on 405.
func checkHeaders(t *testing.T, url string, code int, h http.Header) {
	t.Helper()
	if got := h.Get("Content-Type"); got != textPlain {
		t.Errorf("%s: Content-Type %q, want %q", url, got, textPlain)
	}
	wantNosniff := "nosniff"
	if strings.HasPrefix(url, "/health") && code == 200 {
		wantNosniff = ""
	}
	if got := h.Get("X-Content-Type-Options"); got != wantNosniff {
		t.Errorf("%s: X-Content-Type-Options %q, want %q", url, got, wantNosniff)
	}
	wantAllow := ""
	if code == 405 {
		wantAllow = "GET"
	}
	if got := h.Get("Allow"); got != wantAllow {
		t.Errorf("%s: Allow %q, want %q", url, got, wantAllow)
	}
}

func do(t *testing.T, h http.Handler, method, url string) (int, http.Header, string) {
	t.Helper()
	if method == "" {
		method = http.MethodGet
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	req, err := http.NewRequest(method, srv.URL+url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(b)
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestProbesContext: a check gets the request's context, so a probe that
// gives up stops waiting for the read.
func TestProbesContext(t *testing.T) {
	m := &ctxMember{}
	p, err := New(m, Options{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	p.Install(mux)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, url := range []string{"/health", "/readyz/linearizable_read"} {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != 503 || !strings.Contains(rec.Body.String(), "context canceled") {
			t.Errorf("%s with a canceled context: %d %q", url, rec.Code, rec.Body.String())
		}
	}
}

type ctxMember struct{ fakeMember }

func (m *ctxMember) Read(ctx context.Context, serializable bool) error { return ctx.Err() }

// TestMetrics: /health counts its answers; each check run (at its
// endpoint or its sub-path) sets its gauge and counts its outcome; a
// second Probes on the same registry (the other listener) shares them.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := &fakeMember{}
	var muxes []*http.ServeMux
	for range 2 {
		p, err := New(m, Options{Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		mux := http.NewServeMux()
		p.Install(mux)
		muxes = append(muxes, mux)
	}
	get := func(i int, url string) {
		rec := httptest.NewRecorder()
		muxes[i].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, url, nil))
	}
	get(0, "/health")
	get(1, "/health")
	get(0, "/readyz")
	get(1, "/livez")
	m.mu.Lock()
	m.alarms = []*pb.AlarmMember{corrupt}
	m.mu.Unlock()
	get(1, "/health")
	get(0, "/readyz/data_corruption")
	get(1, "/readyz?exclude=serializable_read")

	want := map[string]float64{
		"etcd_server_health_success":  2,
		"etcd_server_health_failures": 1,

		"etcd_server_healthcheck{name=data_corruption,type=readyz}":   0,
		"etcd_server_healthcheck{name=serializable_read,type=readyz}": 1,
		"etcd_server_healthcheck{name=linearizable_read,type=readyz}": 1,
		"etcd_server_healthcheck{name=non_learner,type=readyz}":       1,
		"etcd_server_healthcheck{name=serializable_read,type=livez}":  1,

		"etcd_server_healthchecks_total{name=data_corruption,status=success,type=readyz}":   1,
		"etcd_server_healthchecks_total{name=data_corruption,status=error,type=readyz}":     2,
		"etcd_server_healthchecks_total{name=serializable_read,status=success,type=readyz}": 1,
		"etcd_server_healthchecks_total{name=linearizable_read,status=success,type=readyz}": 2,
		"etcd_server_healthchecks_total{name=non_learner,status=success,type=readyz}":       2,
		"etcd_server_healthchecks_total{name=serializable_read,status=success,type=livez}":  1,
	}
	got := gather(t, reg)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("metrics %v, want %v", got, want)
	}
}

// gather flattens reg's samples to "name{label=value,...}" -> value.
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			name := mf.GetName()
			if len(labels) > 0 {
				name += "{" + strings.Join(labels, ",") + "}"
			}
			v := m.GetCounter().GetValue()
			if m.GetGauge() != nil {
				v = m.GetGauge().GetValue()
			}
			out[name] = v
		}
	}
	return out
}

// TestRegisterConflict: a metric of the same name and another kind on the
// registry is an error, not a panic or a silent second collector.
func TestRegisterConflict(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_server_health_success", Help: "x"}))
	if _, err := New(&fakeMember{}, Options{Registerer: reg}); err == nil {
		t.Fatal("New with a conflicting metric: no error")
	}
}
