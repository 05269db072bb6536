// Command benchplot draws the JSON of scripts/bench.sh --json as SVG plots:
// grouped bar charts with one group per workload and one bar per server
// (kvd-bolt, kvd-badger, etcd, each in a fixed color), the median of the
// rounds with its value on top, a legend and a y axis.
//
//	go run ./tools/benchplot -in docs/bench/single-member.json -out docs/img/
//
// writes <out>/<prefix>-throughput.svg (requests/s) and <out>/<prefix>-p99.svg
// (p99 latency in ms); -prefix defaults to "bench".
//
// Given the JSON of scripts/bench-scale.sh --json (schema kvd-bench-scale/1,
// the data-size series) it draws line charts against the data size instead,
// one line per server in the same colors, the sizes on a log scale:
//
//	go run ./tools/benchplot -in docs/bench/scale.json -out docs/img/
//
// writes <out>/<prefix>-put-p99.svg, -range-p99.svg, -rss.svg, -restart.svg
// and -catchup.svg; -prefix then defaults to "scale". It uses the standard
// library only; the SVG is written by hand.
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchplot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "the JSON of scripts/bench.sh --json or scripts/bench-scale.sh --json (- for stdin)")
	out := fs.String("out", "docs/img", "directory to write the SVG files to")
	prefix := fs.String("prefix", "", "file name prefix (default \"bench\": <prefix>-throughput.svg and <prefix>-p99.svg;\nfor the data-size series \"scale\": <prefix>-put-p99.svg and the rest)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: benchplot -in FILE.json [-out DIR] [-prefix NAME]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *in == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	files, err := plot(*in, *out, *prefix)
	if err != nil {
		fmt.Fprintf(stderr, "benchplot: %v\n", err)
		return 1
	}
	for _, f := range files {
		fmt.Fprintln(stdout, f)
	}
	return 0
}

// svgWriter is a chart of either kind.
type svgWriter interface{ WriteSVG(io.Writer) error }

// plot reads the report at in and writes its charts into dir: the bar
// charts of a kvd-bench/1 report, the line charts of a kvd-bench-scale/1 one.
func plot(in, dir, prefix string) ([]string, error) {
	var r io.Reader = os.Stdin
	if in != "-" {
		f, err := os.Open(in)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", in, err)
	}
	charts := map[string]svgWriter{}
	var order []string
	var sniff struct {
		Schema string `json:"schema"`
	}
	if json.Unmarshal(data, &sniff) == nil && sniff.Schema == ScaleSchema {
		rep, err := ReadScaleReport(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", in, err)
		}
		if prefix == "" {
			prefix = "scale"
		}
		for _, k := range scaleMetrics {
			charts[k.file] = lineChartOf(rep, k)
			order = append(order, k.file)
		}
	} else {
		rep, err := ReadReport(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", in, err)
		}
		if prefix == "" {
			prefix = "bench"
		}
		for _, k := range []metric{throughput, p99} {
			charts[k.file] = chartOf(rep, k)
			order = append(order, k.file)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, file := range order {
		var buf bytes.Buffer
		if err := charts[file].WriteSVG(&buf); err != nil {
			return nil, err
		}
		name := filepath.Join(dir, prefix+"-"+file+".svg")
		if err := os.WriteFile(name, buf.Bytes(), 0o644); err != nil {
			return nil, err
		}
		files = append(files, name)
	}
	return files, nil
}

// metric is one figure of a result that gets its own chart.
type metric struct {
	file   string
	title  string
	ylabel string
	value  func(*Median) float64
	round  func(*Round) *float64
	format func(float64) string
}

var (
	throughput = metric{
		file:   "throughput",
		title:  "Throughput: requests/s (higher is better)",
		ylabel: "requests/s",
		value:  func(m *Median) float64 { return m.RPS },
		round:  func(r *Round) *float64 { return r.RPS },
		format: formatRPS,
	}
	p99 = metric{
		file:   "p99",
		title:  "p99 latency: ms (lower is better)",
		ylabel: "p99 latency, ms",
		value:  func(m *Median) float64 { return m.P99Ms },
		round:  func(r *Round) *float64 { return r.P99Ms },
		format: formatMs,
	}
)

// chartOf makes the chart of one metric: groups in the run's workload
// order, bars in its server order; a missing or failed result has no bar.
// With two or more measured rounds a bar also shows their range.
func chartOf(rep *Report, k metric) *Chart {
	c := &Chart{
		Title:    k.title,
		Subtitle: rep.describe(),
		YLabel:   k.ylabel,
		Series:   rep.Servers,
		Format:   k.format,
	}
	for _, w := range rep.Workloads {
		c.Groups = append(c.Groups, w.label())
		c.GroupIDs = append(c.GroupIDs, w.Name)
		row := make([]float64, len(rep.Servers))
		ranges := make([][2]float64, len(rep.Servers))
		for i, s := range rep.Servers {
			row[i] = math.NaN()
			ranges[i] = [2]float64{math.NaN(), math.NaN()}
			r := rep.result(s, w.Name)
			if r == nil || r.Median == nil {
				continue
			}
			row[i] = k.value(r.Median)
			var vals []float64
			for j := range r.PerRound {
				if v := k.round(&r.PerRound[j]); v != nil && r.PerRound[j].Failure == nil {
					vals = append(vals, *v)
				}
			}
			if len(vals) >= 2 {
				ranges[i] = [2]float64{slices.Min(vals), slices.Max(vals)}
			}
		}
		c.Values = append(c.Values, row)
		c.Ranges = append(c.Ranges, ranges)
	}
	return c
}
