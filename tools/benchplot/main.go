// Command benchplot draws the JSON of scripts/bench.sh --json as SVG plots:
// grouped bar charts with one group per workload and one bar per server
// (kvd-bolt, kvd-badger, etcd, each in a fixed color), the median of the
// rounds with its value on top, a legend and a y axis.
//
//	go run ./tools/benchplot -in docs/bench/single-member.json -out docs/img/
//
// writes <out>/<prefix>-throughput.svg (requests/s) and <out>/<prefix>-p99.svg
// (p99 latency in ms); -prefix defaults to "bench". It uses the standard
// library only; the SVG is written by hand.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchplot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "the JSON of scripts/bench.sh --json (- for stdin)")
	out := fs.String("out", "docs/img", "directory to write the SVG files to")
	prefix := fs.String("prefix", "bench", "file name prefix: <prefix>-throughput.svg and <prefix>-p99.svg")
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

// plot reads the report at in and writes both charts into dir.
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
	rep, err := ReadReport(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", in, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var files []string
	for _, k := range []metric{throughput, p99} {
		var buf bytes.Buffer
		c := chartOf(rep, k)
		if err := c.WriteSVG(&buf); err != nil {
			return nil, err
		}
		name := filepath.Join(dir, prefix+"-"+k.file+".svg")
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
	format func(float64) string
}

var (
	throughput = metric{
		file:   "throughput",
		title:  "Throughput: requests/s (higher is better)",
		ylabel: "requests/s",
		value:  func(m *Median) float64 { return m.RPS },
		format: formatRPS,
	}
	p99 = metric{
		file:   "p99",
		title:  "p99 latency: ms (lower is better)",
		ylabel: "p99 latency, ms",
		value:  func(m *Median) float64 { return m.P99Ms },
		format: formatMs,
	}
)

var errNoChart = errors.New("nothing to draw")

// chartOf makes the chart of one metric: groups in the run's workload
// order, bars in its server order; a missing or failed result has no bar.
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
		for i, s := range rep.Servers {
			row[i] = math.NaN()
			if r := rep.result(s, w.Name); r != nil && r.Median != nil {
				row[i] = k.value(r.Median)
			}
		}
		c.Values = append(c.Values, row)
	}
	return c
}
