package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// scaleSample is a report as scripts/bench-scale.sh --json writes it, with
// the sizes listed out of order, 16G run for kvd-badger only, and etcd's
// catch-up failed at 1G.
const scaleSample = `{
  "schema": "kvd-bench-scale/1",
  "date": "2026-12-02T03:08:00Z",
  "git_commit": "a7f19b84883c74d8f930b178c01ccd5b3f442fe9",
  "git_dirty": false,
  "go_version": "go1.26.8",
  "machine": {"cores": 2, "cpu_model": "Test CPU", "os": "Linux 6", "load_average_at_start": 1.5, "load_average_at_end": 2},
  "versions": {"kvd": "kvd Version: 0.1.0-dev", "etcd": "etcd Version: 3.7.3"},
  "rounds": 1, "elapsed_seconds": 900,
  "load": {"clients": 16, "conns": 4, "duration": "10s", "warmup": "2s", "fill_clients": 64, "value_bytes": 1024,
           "put": "put", "range": "range"},
  "servers": ["kvd-bolt", "kvd-badger", "etcd"],
  "sizes": [{"name": "1G", "bytes": 1073741824, "keys": 1048576}, {"name": "100M", "bytes": 104857600, "keys": 102400},
            {"name": "16G", "bytes": 17179869184, "keys": 16777216}],
  "results": [
    {"server": "kvd-bolt", "size": "1G", "bytes": 1073741824, "keys": 1048576,
     "median": {"db_size_bytes": 2147483648, "put_p99_ms": 30.5, "range_p99_ms": 12, "rss_bytes": 1073741824, "restart_seconds": 2.5, "catchup_seconds": 20},
     "failures": null, "per_round": []},
    {"server": "kvd-badger", "size": "1G", "bytes": 1073741824, "keys": 1048576,
     "median": {"db_size_bytes": 1147483648, "put_p99_ms": 25, "range_p99_ms": 10, "rss_bytes": 536870912, "restart_seconds": 3, "catchup_seconds": 15},
     "failures": null, "per_round": []},
    {"server": "etcd", "size": "1G", "bytes": 1073741824, "keys": 1048576,
     "median": {"db_size_bytes": 1547483648, "put_p99_ms": 40, "range_p99_ms": 14, "rss_bytes": 1610612736, "restart_seconds": 4, "catchup_seconds": null},
     "failures": "round 1 catchup: the new member exited", "per_round": []},
    {"server": "kvd-bolt", "size": "100M", "bytes": 104857600, "keys": 102400,
     "median": {"db_size_bytes": 213245952, "put_p99_ms": 18.9, "range_p99_ms": 11.4, "rss_bytes": 137793536, "restart_seconds": 1.7, "catchup_seconds": 3},
     "failures": null, "per_round": []},
    {"server": "kvd-badger", "size": "100M", "bytes": 104857600, "keys": 102400,
     "median": {"db_size_bytes": 113245952, "put_p99_ms": 20, "range_p99_ms": 9, "rss_bytes": 237793536, "restart_seconds": 2.2, "catchup_seconds": 2},
     "failures": null, "per_round": []},
    {"server": "etcd", "size": "100M", "bytes": 104857600, "keys": 102400,
     "median": {"db_size_bytes": 143245952, "put_p99_ms": 22, "range_p99_ms": 10, "rss_bytes": 167793536, "restart_seconds": 1.1, "catchup_seconds": 9},
     "failures": null, "per_round": []},
    {"server": "kvd-badger", "size": "16G", "bytes": 17179869184, "keys": 16777216,
     "median": {"db_size_bytes": 17179869184, "put_p99_ms": 28, "range_p99_ms": 11, "rss_bytes": 2147483648, "restart_seconds": 6, "catchup_seconds": 200},
     "failures": null, "per_round": []}
  ]
}`

func readScaleSample(t *testing.T) *ScaleReport {
	t.Helper()
	rep, err := ReadScaleReport(strings.NewReader(scaleSample))
	if err != nil {
		t.Fatalf("ReadScaleReport(scaleSample): %v", err)
	}
	return rep
}

func renderLine(t *testing.T, rep *ScaleReport, k scaleMetric) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := lineChartOf(rep, k).WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// polylinePoints parses a polyline's points attribute.
func polylinePoints(t *testing.T, e *svgElem) [][2]float64 {
	t.Helper()
	var pts [][2]float64
	for _, p := range strings.Fields(e.attrs["points"]) {
		xs, ys, ok := strings.Cut(p, ",")
		x, err1 := strconv.ParseFloat(xs, 64)
		y, err2 := strconv.ParseFloat(ys, 64)
		if !ok || err1 != nil || err2 != nil {
			t.Fatalf("polyline point %q", p)
		}
		pts = append(pts, [2]float64{x, y})
	}
	return pts
}

func TestScaleOneLinePerServer(t *testing.T) {
	rep := readScaleSample(t)
	for _, k := range scaleMetrics {
		t.Run(k.file, func(t *testing.T) {
			els := parseSVG(t, renderLine(t, rep, k))
			lines := byClass(els, "line")
			if len(lines) != len(rep.Servers) {
				t.Fatalf("%d polylines, want %d (one per server)", len(lines), len(rep.Servers))
			}
			seen := map[string]bool{}
			for _, l := range lines {
				s := l.attrs["data-server"]
				if l.name != "polyline" || seen[s] {
					t.Errorf("%s for %q (seen before: %v)", l.name, s, seen[s])
				}
				seen[s] = true
				if c := serverColors[s]; l.attrs["stroke"] != c {
					t.Errorf("%s line stroke %s, want %s", s, l.attrs["stroke"], c)
				}
			}
		})
	}
}

func TestScalePointsOrderedBySize(t *testing.T) {
	rep := readScaleSample(t)
	k := scaleMetrics[0] // put p99
	els := parseSVG(t, renderLine(t, rep, k))
	points := byClass(els, "point")
	want := map[string][]string{
		"kvd-bolt":   {"100M", "1G"},
		"kvd-badger": {"100M", "1G", "16G"},
		"etcd":       {"100M", "1G"},
	}
	got := map[string][]string{}
	xs := map[string][]float64{}
	for _, p := range points {
		s := p.attrs["data-server"]
		got[s] = append(got[s], p.attrs["data-size"])
		xs[s] = append(xs[s], attrFloat(t, p, "cx"))
		r := rep.result(s, p.attrs["data-size"])
		if v := attrFloat(t, p, "data-value"); r == nil || v != *r.Median[k.field] {
			t.Errorf("%s at %s: value %v, want the median", s, p.attrs["data-size"], v)
		}
	}
	for s, w := range want {
		if strings.Join(got[s], " ") != strings.Join(w, " ") {
			t.Errorf("%s points at %v, want %v (by size)", s, got[s], w)
		}
	}
	for _, l := range byClass(els, "line") {
		s := l.attrs["data-server"]
		pts := polylinePoints(t, l)
		if len(pts) != len(want[s]) {
			t.Fatalf("%s polyline has %d points, want %d", s, len(pts), len(want[s]))
		}
		for i := range pts {
			if pts[i][0] != xs[s][i] {
				t.Errorf("%s polyline point %d at x %v, circle at %v", s, i, pts[i][0], xs[s][i])
			}
			if i > 0 && pts[i][0] <= pts[i-1][0] {
				t.Errorf("%s polyline x not increasing: %v", s, pts)
			}
		}
	}
	// The same size sits at the same x for every server, and the axis is
	// logarithmic: 100M to 1G is a factor 10.24, 1G to 16G 16.
	x100, x1, x16 := xs["kvd-badger"][0], xs["kvd-badger"][1], xs["kvd-badger"][2]
	if xs["etcd"][0] != x100 || xs["etcd"][1] != x1 {
		t.Errorf("etcd x %v, kvd-badger x %v", xs["etcd"], xs["kvd-badger"])
	}
	if got, want := (x16-x1)/(x1-x100), math.Log(16)/math.Log(10.24); math.Abs(got-want) > 0.01 {
		t.Errorf("x spacing ratio %v, want %v (log scale)", got, want)
	}
	// Size labels on the axis, smallest first.
	var labels []string
	for _, e := range byClass(els, "size-label") {
		labels = append(labels, e.text)
	}
	if strings.Join(labels, " ") != "100M 1G 16G" {
		t.Errorf("size labels %v, want 100M 1G 16G", labels)
	}
}

func TestScaleFailedStep(t *testing.T) {
	rep := readScaleSample(t)
	k := scaleMetrics[len(scaleMetrics)-1] // catch-up
	if k.field != "catchup_seconds" {
		t.Fatalf("last metric %s", k.field)
	}
	els := parseSVG(t, renderLine(t, rep, k))
	failed := byClass(els, "failed")
	if len(failed) != 1 || failed[0].attrs["data-server"] != "etcd" || failed[0].attrs["data-size"] != "1G" {
		t.Fatalf("failed marks %+v, want one for etcd at 1G", failed)
	}
	for _, p := range byClass(els, "point") {
		if p.attrs["data-server"] == "etcd" && p.attrs["data-size"] == "1G" {
			t.Error("a point for etcd's failed catch-up at 1G")
		}
	}
}

// Two servers failing at the same size get their "failed" labels stacked,
// not on top of each other; a server's failure at another size does not
// push its label up.
func TestScaleFailedLabelsStackPerSize(t *testing.T) {
	nan := math.NaN()
	c := &LineChart{
		Title:  "t",
		Sizes:  []ScaleSize{{"100M", 100 << 20}, {"1G", 1 << 30}},
		Series: []string{"kvd-bolt", "kvd-badger", "etcd"},
		Values: [][]float64{{1, nan}, {nan, nan}, {2, nan}},
		Format: formatMs,
	}
	var buf bytes.Buffer
	if err := c.WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	ys := map[string][]float64{} // size -> label y, in series order
	for _, e := range byClass(parseSVG(t, buf.Bytes()), "failed") {
		ys[e.attrs["data-size"]] = append(ys[e.attrs["data-size"]], attrFloat(t, e, "y"))
	}
	if len(ys["100M"]) != 1 || len(ys["1G"]) != 3 {
		t.Fatalf("failed labels %v, want 1 at 100M and 3 at 1G", ys)
	}
	if ys["1G"][0] != ys["100M"][0] {
		t.Errorf("first failed label at 1G at y %v, at 100M %v: want the same", ys["1G"][0], ys["100M"][0])
	}
	for i := 1; i < len(ys["1G"]); i++ {
		if ys["1G"][i] >= ys["1G"][i-1] {
			t.Errorf("failed labels at 1G at y %v: want each above the one before", ys["1G"])
		}
	}
}

func TestScaleRSSInMiB(t *testing.T) {
	rep := readScaleSample(t)
	var k scaleMetric
	for _, m := range scaleMetrics {
		if m.file == "rss" {
			k = m
		}
	}
	for _, p := range byClass(parseSVG(t, renderLine(t, rep, k)), "point") {
		if p.attrs["data-server"] == "kvd-bolt" && p.attrs["data-size"] == "1G" {
			if v := attrFloat(t, p, "data-value"); v != 1024 {
				t.Errorf("kvd-bolt RSS at 1G plotted as %v, want 1024 (MiB)", v)
			}
			return
		}
	}
	t.Error("no kvd-bolt point at 1G")
}

func TestReadScaleReportErrors(t *testing.T) {
	valid := func(edit func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(scaleSample), &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	result := func(m map[string]any, i int) map[string]any { return m["results"].([]any)[i].(map[string]any) }
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "empty input"},
		{"truncated", scaleSample[:300], "truncated"},
		{"syntax", `{"schema": "kvd-bench-scale/1",}`, "not valid JSON at byte"},
		{"two values", scaleSample + "{}", "more than one value"},
		{"wrong type", `{"schema": "kvd-bench-scale/1", "sizes": [{"name": "1G", "bytes": "big"}]}`, `JSON field "sizes.bytes"`},
		{"no schema", `{"results": []}`, `no "schema" field`},
		{"other schema", `{"schema": "kvd-bench/1"}`, `schema "kvd-bench/1"`},
		{"no servers", valid(func(m map[string]any) { m["servers"] = []any{} }), "no servers"},
		{"no sizes", valid(func(m map[string]any) { delete(m, "sizes") }), "no sizes"},
		{"no results", valid(func(m map[string]any) { m["results"] = []any{} }), "no results"},
		{"zero bytes", valid(func(m map[string]any) { m["sizes"].([]any)[0].(map[string]any)["bytes"] = 0 }), `size "1G": bytes 0`},
		{"size twice", valid(func(m map[string]any) {
			m["sizes"] = append(m["sizes"].([]any), map[string]any{"name": "1G", "bytes": 1})
		}), `size "1G" empty or listed twice`},
		{"unknown size", valid(func(m map[string]any) { result(m, 0)["size"] = "2G" }), `size "2G" is not in`},
		{"unknown server", valid(func(m map[string]any) { result(m, 0)["server"] = "zk" }), `server "zk" is not in`},
		{"result twice", valid(func(m map[string]any) { result(m, 1)["server"] = "kvd-bolt" }), "kvd-bolt at 1G given twice"},
		{"negative", valid(func(m map[string]any) { result(m, 0)["median"].(map[string]any)["put_p99_ms"] = -1 }), "median put_p99_ms is -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadScaleReport(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadScaleReport: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestRunScaleWritesEveryChart(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "scale.json")
	if err := os.WriteFile(in, []byte(scaleSample), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-in", in, "-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("run: exit %d, stderr %s", code, stderr.String())
	}
	for _, k := range scaleMetrics {
		name := "scale-" + k.file + ".svg"
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		parseSVG(t, data)
		if !strings.Contains(stdout.String(), name) {
			t.Errorf("stdout %q does not name %s", stdout.String(), name)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "bench-p99.svg")); err == nil {
		t.Error("bar charts written for a data-size report")
	}

	// A broken data-size report is an error naming the file; nothing is written.
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"schema": "kvd-bench-scale/1", "servers": ["etcd"]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	stderr.Reset()
	out2 := filepath.Join(dir, "img2")
	if code := run([]string{"-in", bad, "-out", out2}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "bad.json: no sizes") {
		t.Errorf("run on a bad report: exit %d, stderr %q", code, stderr.String())
	}
	if _, err := os.Stat(out2); err == nil {
		t.Error("output directory made for a bad report")
	}
}
