package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sample is a report as scripts/bench.sh --json writes it: three servers,
// three workloads, two rounds.
const sample = `{
  "schema": "kvd-bench/1",
  "date": "2026-12-02T02:10:00Z",
  "git_commit": "88e157d0123456789abcdef0123456789abcdef0",
  "git_dirty": false,
  "go_version": "go1.26.8",
  "machine": {"cores": 2, "cpu_model": "Test CPU", "os": "Linux 6", "load_average_at_start": 1.5},
  "versions": {"kvd": "kvd Version: 0.1.0-dev", "etcd": "etcd Version: 3.7.3"},
  "duration": "4s", "total": null, "warmup": "1s",
  "rounds": 2, "members": 1, "conns": 10, "elapsed_seconds": 100,
  "servers": ["kvd-bolt", "kvd-badger", "etcd"],
  "workloads": [
    {"name": "put", "label": "put", "clients": 100, "command": "put"},
    {"name": "range-key-s", "label": "range 1 key, serializable", "clients": 100, "command": "range"},
    {"name": "range-prefix-s", "label": "range 1,000-key prefix, serializable", "clients": 100, "command": "range"}
  ],
  "results": [
    {"server": "kvd-bolt", "workload": "put", "label": "put", "clients": 100, "members": 1,
     "median": {"rps": 12358, "p50_ms": 7.17, "p99_ms": 20.15, "p99_9_ms": 25.08}, "errors": 0, "failure": null,
     "per_round": [{"round": 1, "rps": 12000, "p50_ms": 7, "p99_ms": 20, "p99_9_ms": 25, "errors": 0},
                   {"round": 2, "rps": 12716, "p50_ms": 7.34, "p99_ms": 20.3, "p99_9_ms": 25.16, "errors": 0}]},
    {"server": "kvd-bolt", "workload": "range-key-s", "label": "range 1 key, serializable", "clients": 100, "members": 1,
     "median": {"rps": 26999, "p50_ms": 3.08, "p99_ms": 11.45, "p99_9_ms": 15.69}, "errors": 0, "failure": null, "per_round": []},
    {"server": "kvd-bolt", "workload": "range-prefix-s", "label": "range 1,000-key prefix, serializable", "clients": 100, "members": 1,
     "median": {"rps": 995, "p50_ms": 79.27, "p99_ms": 324.91, "p99_9_ms": 394.73}, "errors": 0, "failure": null, "per_round": []},
    {"server": "kvd-badger", "workload": "put", "label": "put", "clients": 100, "members": 1,
     "median": {"rps": 10988, "p50_ms": 8.09, "p99_ms": 22.51, "p99_9_ms": 28.01}, "errors": 0, "failure": null, "per_round": []},
    {"server": "kvd-badger", "workload": "range-key-s", "label": "range 1 key, serializable", "clients": 100, "members": 1,
     "median": {"rps": 26721, "p50_ms": 3.27, "p99_ms": 10.46, "p99_9_ms": 15.71}, "errors": 0, "failure": null, "per_round": []},
    {"server": "kvd-badger", "workload": "range-prefix-s", "label": "range 1,000-key prefix, serializable", "clients": 100, "members": 1,
     "median": {"rps": 764, "p50_ms": 114.72, "p99_ms": 451.06, "p99_9_ms": 568.05}, "errors": 0, "failure": null, "per_round": []},
    {"server": "etcd", "workload": "put", "label": "put", "clients": 100, "members": 1,
     "median": {"rps": 11546, "p50_ms": 7.85, "p99_ms": 20.22, "p99_9_ms": 26.26}, "errors": 0, "failure": null, "per_round": []},
    {"server": "etcd", "workload": "range-key-s", "label": "range 1 key, serializable", "clients": 100, "members": 1,
     "median": {"rps": 18416, "p50_ms": 4.65, "p99_ms": 15.52, "p99_9_ms": 20.59}, "errors": 0, "failure": null, "per_round": []},
    {"server": "etcd", "workload": "range-prefix-s", "label": "range 1,000-key prefix, serializable", "clients": 100, "members": 1,
     "median": {"rps": 513, "p50_ms": 142.32, "p99_ms": 772.98, "p99_9_ms": 1116.64}, "errors": 0, "failure": null, "per_round": []}
  ],
  "notes": null
}`

// svgDoc is what the tests read back from a chart: every element's name,
// attributes and text.
type svgElem struct {
	name  string
	attrs map[string]string
	text  string
}

// parseSVG decodes doc with encoding/xml, failing the test on any error,
// and returns its elements in document order.
func parseSVG(t *testing.T, doc []byte) []*svgElem {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(doc))
	dec.Strict = true
	var all, stack []*svgElem
	root := ""
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, doc)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			e := &svgElem{name: tok.Name.Local, attrs: map[string]string{}}
			if root == "" {
				root = tok.Name.Local
				if tok.Name.Space != "http://www.w3.org/2000/svg" {
					t.Errorf("root element namespace %q, want the SVG namespace", tok.Name.Space)
				}
			}
			for _, a := range tok.Attr {
				e.attrs[a.Name.Local] = a.Value
			}
			all = append(all, e)
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) > 0 {
				stack[len(stack)-1].text += string(tok)
			}
		}
	}
	if root != "svg" {
		t.Fatalf("root element %q, want svg", root)
	}
	return all
}

func byClass(els []*svgElem, class string) []*svgElem {
	var out []*svgElem
	for _, e := range els {
		if e.attrs["class"] == class {
			out = append(out, e)
		}
	}
	return out
}

func attrFloat(t *testing.T, e *svgElem, name string) float64 {
	t.Helper()
	v, err := strconv.ParseFloat(e.attrs[name], 64)
	if err != nil {
		t.Fatalf("%s %s=%q: %v", e.name, name, e.attrs[name], err)
	}
	return v
}

func readSample(t *testing.T) *Report {
	t.Helper()
	rep, err := ReadReport(strings.NewReader(sample))
	if err != nil {
		t.Fatalf("ReadReport(sample): %v", err)
	}
	return rep
}

func render(t *testing.T, rep *Report, k metric) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := chartOf(rep, k).WriteSVG(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestChartsOneBarPerServerAndWorkload(t *testing.T) {
	rep := readSample(t)
	for _, k := range []metric{throughput, p99} {
		t.Run(k.file, func(t *testing.T) {
			els := parseSVG(t, render(t, rep, k))
			bars := byClass(els, "bar")
			if want := len(rep.Servers) * len(rep.Workloads); len(bars) != want {
				t.Fatalf("%d bars, want %d (servers × workloads)", len(bars), want)
			}
			seen := map[[2]string]bool{}
			for _, b := range bars {
				key := [2]string{b.attrs["data-server"], b.attrs["data-workload"]}
				if seen[key] {
					t.Errorf("two bars for %v", key)
				}
				seen[key] = true
				r := rep.result(key[0], key[1])
				if r == nil {
					t.Fatalf("bar %v has no result", key)
				}
				if got, want := attrFloat(t, b, "data-value"), k.value(r.Median); got != want {
					t.Errorf("bar %v value %v, want %v", key, got, want)
				}
				// Each server keeps its color.
				if c := serverColors[key[0]]; b.attrs["fill"] != c {
					t.Errorf("bar %v fill %s, want %s", key, b.attrs["fill"], c)
				}
			}
		})
	}
}

func TestBarHeightsProportional(t *testing.T) {
	rep := readSample(t)
	for _, k := range []metric{throughput, p99} {
		t.Run(k.file, func(t *testing.T) {
			bars := byClass(parseSVG(t, render(t, rep, k)), "bar")
			// The tallest bar gives the scale (its rounding error is the
			// smallest share of its height).
			var perUnit, base, tallest float64
			for i, b := range bars {
				v := attrFloat(t, b, "data-value")
				h := attrFloat(t, b, "height")
				if h <= 0 || v <= 0 {
					t.Fatalf("bar %d: height %v value %v", i, h, v)
				}
				if h > tallest {
					tallest, perUnit, base = h, h/v, attrFloat(t, b, "y")+h
				}
			}
			for _, b := range bars {
				v := attrFloat(t, b, "data-value")
				h := attrFloat(t, b, "height")
				y := attrFloat(t, b, "y")
				// Coordinates carry two decimals: allow 0.01 units of rounding.
				if math.Abs(h-v*perUnit) > 0.011 {
					t.Errorf("bar %s/%s: height %v, want %v (value %v at %v per unit)",
						b.attrs["data-server"], b.attrs["data-workload"], h, v*perUnit, v, perUnit)
				}
				if math.Abs(y+h-base) > 0.011 {
					t.Errorf("bar %s/%s stands on %v, the others on %v", b.attrs["data-server"], b.attrs["data-workload"], y+h, base)
				}
			}
			// The tallest bar fits under the top of the axis.
			plotH := height - marginT - marginB
			for _, b := range bars {
				if h := attrFloat(t, b, "height"); h > plotH+0.01 {
					t.Errorf("bar taller (%v) than the plot (%v)", h, plotH)
				}
			}
		})
	}
}

func TestRoundRanges(t *testing.T) {
	rep := readSample(t)
	for _, k := range []metric{throughput, p99} {
		t.Run(k.file, func(t *testing.T) {
			els := parseSVG(t, render(t, rep, k))
			// Only kvd-bolt put has two rounds in the sample.
			ranges := byClass(els, "range")
			if len(ranges) != 1 || ranges[0].attrs["data-server"] != "kvd-bolt" || ranges[0].attrs["data-workload"] != "put" {
				t.Fatalf("ranges %v, want one for kvd-bolt put", ranges)
			}
			r := rep.result("kvd-bolt", "put")
			lo, hi := *k.round(&r.PerRound[0]), *k.round(&r.PerRound[1])
			if got := attrFloat(t, ranges[0], "data-min"); got != min(lo, hi) {
				t.Errorf("range min %v, want %v", got, min(lo, hi))
			}
			if got := attrFloat(t, ranges[0], "data-max"); got != max(lo, hi) {
				t.Errorf("range max %v, want %v", got, max(lo, hi))
			}
			// The range's line spans the rounds on the bars' scale.
			var bar *svgElem
			for _, b := range byClass(els, "bar") {
				if b.attrs["data-server"] == "kvd-bolt" && b.attrs["data-workload"] == "put" {
					bar = b
				}
			}
			perUnit := attrFloat(t, bar, "height") / attrFloat(t, bar, "data-value")
			base := attrFloat(t, bar, "y") + attrFloat(t, bar, "height")
			var line *svgElem
			for i, e := range els {
				if e == ranges[0] {
					line = els[i+1]
				}
			}
			y1, y2 := attrFloat(t, line, "y1"), attrFloat(t, line, "y2")
			if math.Abs(base-y1-min(lo, hi)*perUnit) > 0.02 || math.Abs(base-y2-max(lo, hi)*perUnit) > 0.02 {
				t.Errorf("range line from %v to %v, want %v to %v", y1, y2, base-min(lo, hi)*perUnit, base-max(lo, hi)*perUnit)
			}
			if !strings.Contains(string(render(t, rep, k)), "lowest to highest round") {
				t.Error("no legend entry for the range lines")
			}
		})
	}
}

func TestChartLabels(t *testing.T) {
	rep := readSample(t)
	for _, k := range []metric{throughput, p99} {
		t.Run(k.file, func(t *testing.T) {
			els := parseSVG(t, render(t, rep, k))
			texts := map[string][]string{}
			for _, e := range els {
				if e.name == "text" {
					texts[e.attrs["class"]] = append(texts[e.attrs["class"]], strings.TrimSpace(e.text))
				}
			}
			has := func(class, want string) {
				t.Helper()
				for _, s := range texts[class] {
					if s == want {
						return
					}
				}
				t.Errorf("no %s text %q; have %q", class, want, texts[class])
			}
			has("title", k.title)
			for _, s := range rep.Servers {
				has("legend", s)
			}
			// Group labels: the workload label, broken at ", ".
			for _, w := range rep.Workloads {
				for _, line := range strings.Split(w.Label, ", ") {
					has("group-label", line)
				}
			}
			// One value label per bar, the formatted median.
			if n, want := len(texts["value"]), len(rep.Results); n != want {
				t.Errorf("%d value labels, want %d", n, want)
			}
			for _, r := range rep.Results {
				has("value", k.format(k.value(r.Median)))
			}
			if len(texts["tick"]) < 3 {
				t.Errorf("y axis has %d ticks: %q", len(texts["tick"]), texts["tick"])
			}
			sub := texts["subtitle"]
			if len(sub) != 1 || !strings.Contains(sub[0], "single member") || !strings.Contains(sub[0], "2 shared cores") ||
				!strings.Contains(sub[0], "medians of 2 rounds") || !strings.Contains(sub[0], "kvd 88e157d") {
				t.Errorf("subtitle %q", sub)
			}
		})
	}
}

func TestFailedResultHasNoBar(t *testing.T) {
	var m map[string]any
	if err := json.Unmarshal([]byte(sample), &m); err != nil {
		t.Fatal(err)
	}
	res := m["results"].([]any)
	r := res[len(res)-1].(map[string]any) // etcd range-prefix-s
	r["median"] = nil
	r["failure"] = "failed: at start, member b exited: <boom> & \"quotes\""
	data, _ := json.Marshal(m)
	rep, err := ReadReport(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	els := parseSVG(t, render(t, rep, throughput))
	if n := len(byClass(els, "bar")); n != 8 {
		t.Errorf("%d bars, want 8", n)
	}
	f := byClass(els, "failed")
	if len(f) != 1 || !strings.Contains(f[0].text, "etcd") {
		t.Errorf("failed markers %v, want one for etcd", f)
	}
}

func TestReadReportErrors(t *testing.T) {
	valid := func(edit func(m map[string]any)) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(sample), &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		b, _ := json.Marshal(m)
		return string(b)
	}
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "empty input"},
		{"blank", " \n\t", "empty input"},
		{"truncated", sample[:200], "truncated"},
		{"syntax", `{"schema": "kvd-bench/1",}`, "not valid JSON at byte"},
		{"not an object", `[1, 2]`, "not valid JSON"},
		{"two values", sample + "{}", "more than one value"},
		{"wrong type", `{"schema": "kvd-bench/1", "rounds": "three"}`, `JSON field "rounds"`},
		{"no schema", `{"results": []}`, `no "schema" field`},
		{"other schema", `{"schema": "kvd-bench/2"}`, `schema "kvd-bench/2"`},
		{"no servers", valid(func(m map[string]any) { m["servers"] = []any{} }), "no servers"},
		{"no workloads", valid(func(m map[string]any) { delete(m, "workloads") }), "no workloads"},
		{"no results", valid(func(m map[string]any) { m["results"] = []any{} }), "no results"},
		{"unknown server", valid(func(m map[string]any) { m["servers"] = []any{"kvd-bolt", "etcd"} }), `server "kvd-badger" is not in`},
		{"all failed", valid(func(m map[string]any) {
			for _, r := range m["results"].([]any) {
				r.(map[string]any)["median"] = nil
			}
		}), "every run failed"},
		{"negative", valid(func(m map[string]any) {
			m["results"].([]any)[0].(map[string]any)["median"].(map[string]any)["rps"] = -1
		}), "median rps is -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadReport(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadReport: %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func TestRunWritesBothFiles(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "run.json")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "img")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-in", in, "-out", out, "-prefix", "x"}, &stdout, &stderr); code != 0 {
		t.Fatalf("run: exit %d, stderr %s", code, stderr.String())
	}
	for _, name := range []string{"x-throughput.svg", "x-p99.svg"} {
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		parseSVG(t, data)
		if !strings.Contains(stdout.String(), name) {
			t.Errorf("stdout %q does not name %s", stdout.String(), name)
		}
	}
}

func TestRunErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage"},
		{[]string{"-in", filepath.Join(dir, "missing.json")}, 1, "no such file"},
		{[]string{"-in", empty, "-out", dir}, 1, "empty.json: empty input"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tc.args, &stdout, &stderr); code != tc.code || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("run %q: exit %d, stderr %q; want exit %d with %q", tc.args, code, stderr.String(), tc.code, tc.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "bench-throughput.svg")); err == nil {
		t.Error("an SVG was written for an empty input")
	}
}

func TestNiceAxis(t *testing.T) {
	for _, tc := range []struct{ max, top, step float64 }{
		{26999, 30000, 5000},
		{12358, 12500, 2500},
		{772.98, 800, 200},
		{20.15, 25, 5},
		{1, 1, 0.2},
		{30000, 30000, 5000},
		{0, 1, 0.25},
	} {
		top, step := niceAxis(tc.max)
		if math.Abs(top-tc.top) > 1e-9 || math.Abs(step-tc.step) > 1e-9 {
			t.Errorf("niceAxis(%v) = %v, %v; want %v, %v", tc.max, top, step, tc.top, tc.step)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{formatRPS(12358.4), "12,358"},
		{formatRPS(995), "995"},
		{formatRPS(1234567.8), "1,234,568"},
		{formatMs(20.154), "20.15"},
		{formatMs(324.91), "324.9"},
		{formatMs(1116.64), "1,117"},
		{tickLabel(2.5, 2.5), "2.5"},
		{tickLabel(0.5, 0.25), "0.50"},
		{tickLabel(10000, 2000), "10,000"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
