package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvd-dev/kvd/e2e/harness"
)

// promqlWords are PromQL's functions, aggregations, keywords and
// modifiers: identifiers that are never metric names.
var promqlWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`
		sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio
		by without on ignoring group_left group_right bool offset and or unless atan2
		abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month day_of_week day_of_year
		days_in_month delta deriv exp floor histogram_avg histogram_count histogram_fraction histogram_quantile
		histogram_stddev histogram_stdvar histogram_sum holt_winters double_exponential_smoothing hour idelta
		increase irate label_join label_replace ln log2 log10 minute month predict_linear rate resets round
		scalar sgn sort sort_desc sort_by_label sort_by_label_desc sqrt time timestamp vector year
		avg_over_time min_over_time max_over_time sum_over_time count_over_time quantile_over_time
		stddev_over_time stdvar_over_time last_over_time present_over_time mad_over_time
		acos acosh asin asinh atan atanh cos cosh sin sinh tan tanh deg rad pi inf nan
	`) {
		promqlWords[w] = true
	}
}

// metricNames extracts the metric names a PromQL expression selects: an
// identifier followed by '{' or '[', or standing alone as a series, is a
// name; identifiers inside {...} (label matchers), after by/without/on/
// ignoring/group_left/group_right (label lists), followed by '(' (function
// calls), string literals, numbers, durations and Grafana's $variables are
// not. It is tolerant rather than a parser: what it does not understand it
// skips.
func metricNames(expr string) []string {
	var names []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || (c|0x20) >= 'a' && (c|0x20) <= 'z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	depthBrace := 0    // inside a {...} label matcher list
	labelList := false // the next (...) is a label list
	labelParens := 0   // inside such a list
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			i = j + 1
		case c == '$':
			// Grafana variable: $name, ${name} or [[name]].
			j := i + 1
			if j < len(expr) && expr[j] == '{' {
				for j < len(expr) && expr[j] != '}' {
					j++
				}
				j++
			} else {
				for j < len(expr) && isPart(expr[j]) {
					j++
				}
			}
			i = j
		case c == '{':
			depthBrace++
			i++
		case c == '}':
			depthBrace--
			i++
		case c == '[':
			// Range or subquery duration: skip to ']'.
			for i < len(expr) && expr[i] != ']' {
				i++
			}
			i++
		case c == '(':
			if labelList {
				labelParens++
				labelList = false
			} else if labelParens > 0 {
				labelParens++
			}
			i++
		case c == ')':
			if labelParens > 0 {
				labelParens--
			}
			i++
		case c >= '0' && c <= '9' || c == '.':
			// Numbers, including 1e3, 0x1f and durations like 5m.
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\t' || expr[k] == '\n') {
				k++
			}
			var next byte
			if k < len(expr) {
				next = expr[k]
			}
			switch lw := strings.ToLower(word); {
			case depthBrace > 0 || labelParens > 0:
				// A label name in a matcher or a by/without list.
			case lw == "by" || lw == "without" || lw == "on" || lw == "ignoring" || lw == "group_left" || lw == "group_right":
				labelList = next == '('
			case next == '(':
				// A function or aggregation call.
			case promqlWords[lw]:
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

func TestMetricNames(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string
	}{
		{`up`, []string{"up"}},
		{`rate(etcd_mvcc_put_total{instance=~"$instance"}[$__rate_interval])`, []string{"etcd_mvcc_put_total"}},
		{`sum by (grpc_method, grpc_code) (rate(grpc_server_handled_total{grpc_type="unary"}[5m]))`, []string{"grpc_server_handled_total"}},
		{`sum(rate(a_total[1m])) without (instance) / on (job) group_left(x) b_seconds_count`, []string{"a_total", "b_seconds_count"}},
		{`histogram_quantile(0.99, sum by (le) (rate(etcd_disk_wal_fsync_duration_seconds_bucket[5m]))) > 0.5`, []string{"etcd_disk_wal_fsync_duration_seconds_bucket"}},
		{`kvd_backend_engine_info{engine="bolt", x='a{b}'} == 1 and on() vector(1)`, []string{"kvd_backend_engine_info"}},
		{`max_over_time(x[5m:1m]) offset 1h or bool y`, []string{"x", "y"}},
		{`label_replace(m, "dst", "$1", "src", "(.*)")`, []string{"m"}},
		{`${datasource} + 1e3 + 0x10 + Inf`, nil},
		{`count by(instance)(sum by (instance) (z))`, []string{"z"}},
		{`rate(ns:rule:sum[1m])`, []string{"ns:rule:sum"}},
	} {
		if got := metricNames(tc.expr); !slices.Equal(got, tc.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tc.expr, got, tc.want)
		}
	}
}

// familyOf maps a series name to its family: histograms' _bucket, _sum
// and _count belong to the histogram.
func familyOf(name string, fams map[string]*family) string {
	if fams[name] != nil {
		return name
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && fams[base] != nil && (fams[base].typ == "histogram" || fams[base].typ == "summary") {
			return base
		}
	}
	return ""
}

// dashboardExprs returns every panel target's expression of a Grafana
// dashboard, by panel title.
func dashboardExprs(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
		Panels []panel `json:"panels"` // rows
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	out := map[string][]string{}
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("%s: panel %q has a target without expr", path, p.Title)
				}
				out[p.Title] = append(out[p.Title], tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if len(out) == 0 {
		t.Fatalf("%s: no panel targets", path)
	}
	return out
}

// TestGrafanaDashboard checks docs/grafana/kvd.json: it parses, and every
// metric its panels query is exported by kvd after a small workload, on
// each engine (the per-peer families on a 3-member cluster).
func TestGrafanaDashboard(t *testing.T) {
	if harness.Kind() == harness.KindEtcd {
		t.Skip("kvd's dashboard")
	}
	exprs := dashboardExprs(t, filepath.Join("..", "docs", "grafana", "kvd.json"))
	check := func(t *testing.T, fams map[string]*family, skipPeer bool) {
		for title, es := range exprs {
			for _, e := range es {
				names := metricNames(e)
				if len(names) == 0 {
					t.Errorf("panel %q: no metric in %q", title, e)
				}
				for _, n := range names {
					f := familyOf(n, fams)
					if skipPeer && (strings.HasPrefix(n, "etcd_network_peer_") || strings.HasPrefix(f, "etcd_network_peer_")) {
						continue
					}
					if f == "" {
						t.Errorf("panel %q: %s is not exported by kvd (%q)", title, n, e)
					}
				}
			}
		}
	}
	for _, e := range harness.Engines() {
		t.Run(e, func(t *testing.T) {
			p := harness.StartKVD(t, harness.Options{Engine: e})
			metricsWorkload(t, p.Client(t))
			check(t, scrape(t, p.Endpoint()), true)
		})
	}
	t.Run("cluster", func(t *testing.T) {
		c := harness.StartCluster(t, 3, harness.ClusterOptions{Engine: "bolt"})
		metricsWorkload(t, c.Client(t))
		p := c.Members()[c.Leader(t)]
		// The first probe of each peer goes out when its stream opens.
		deadline := time.Now().Add(10 * time.Second)
		fams := scrape(t, p.Endpoint())
		for fams["etcd_network_peer_round_trip_time_seconds"] == nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			fams = scrape(t, p.Endpoint())
		}
		check(t, fams, false)
	})
}
