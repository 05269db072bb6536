package main

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ScaleSchema is the schema name scripts/bench-scale.sh --json writes: the
// data-size series, drawn as line charts against the data size.
const ScaleSchema = "kvd-bench-scale/1"

// ScaleReport is the JSON of scripts/bench-scale.sh --json (fields the plots
// do not use are left out; unknown fields are ignored).
type ScaleReport struct {
	Schema    string        `json:"schema"`
	Date      string        `json:"date"`
	GitCommit string        `json:"git_commit"`
	Machine   Machine       `json:"machine"`
	Rounds    int           `json:"rounds"`
	Load      ScaleLoad     `json:"load"`
	Servers   []string      `json:"servers"`
	Sizes     []ScaleSize   `json:"sizes"`
	Results   []ScaleResult `json:"results"`
}

// ScaleLoad is the fixed load every server and size was measured under.
type ScaleLoad struct {
	Clients  int    `json:"clients"`
	Duration string `json:"duration"`
}

// ScaleSize is one data size of the series.
type ScaleSize struct {
	Name  string `json:"name"`  // as given to the script: "100M", "1G"
	Bytes int64  `json:"bytes"` // of 1 KiB values
}

// ScaleResult is one server's figures at one size: the medians over the
// rounds, a nil figure where every round failed that step.
type ScaleResult struct {
	Server string              `json:"server"`
	Size   string              `json:"size"`
	Median map[string]*float64 `json:"median"`
}

// ReadScaleReport reads and checks a data-size report: one JSON object of
// schema kvd-bench-scale/1 with at least one server, one size (each with a
// positive byte count) and one result, every result naming a listed server
// and size once, and its figures not negative.
func ReadScaleReport(r io.Reader) (*ScaleReport, error) {
	rep, err := decodeOne[ScaleReport](r, "scripts/bench-scale.sh --json")
	if err != nil {
		return nil, err
	}
	if err := rep.check(); err != nil {
		return nil, err
	}
	return rep, nil
}

func (rep *ScaleReport) check() error {
	servers, err := checkHeader(rep.Schema, ScaleSchema, "scripts/bench-scale.sh", rep.Servers)
	if err != nil {
		return err
	}
	if len(rep.Sizes) == 0 {
		return errors.New("no sizes in the report")
	}
	if len(rep.Results) == 0 {
		return errors.New("no results in the report")
	}
	sizes := map[string]bool{}
	for _, z := range rep.Sizes {
		if z.Name == "" || sizes[z.Name] {
			return fmt.Errorf("size %q empty or listed twice", z.Name)
		}
		if z.Bytes <= 0 {
			return fmt.Errorf("size %q: bytes %d, want more than 0", z.Name, z.Bytes)
		}
		sizes[z.Name] = true
	}
	seen := map[[2]string]bool{}
	for i, r := range rep.Results {
		if !servers[r.Server] {
			return fmt.Errorf("result %d: server %q is not in \"servers\"", i, r.Server)
		}
		if !sizes[r.Size] {
			return fmt.Errorf("result %d: size %q is not in \"sizes\"", i, r.Size)
		}
		k := [2]string{r.Server, r.Size}
		if seen[k] {
			return fmt.Errorf("result %d: %s at %s given twice", i, r.Server, r.Size)
		}
		seen[k] = true
		for name, v := range r.Median {
			if v != nil && (*v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0)) {
				return fmt.Errorf("result %d (%s at %s): median %s is %v", i, r.Server, r.Size, name, *v)
			}
		}
	}
	return nil
}

// result returns server s's result at size z, or nil.
func (rep *ScaleReport) result(s, z string) *ScaleResult {
	for i := range rep.Results {
		if rep.Results[i].Server == s && rep.Results[i].Size == z {
			return &rep.Results[i]
		}
	}
	return nil
}

// sortedSizes returns the sizes from the smallest up.
func (rep *ScaleReport) sortedSizes() []ScaleSize {
	z := slices.Clone(rep.Sizes)
	slices.SortStableFunc(z, func(a, b ScaleSize) int { return cmp.Compare(a.Bytes, b.Bytes) })
	return z
}

// describe is the one-line description of the run under a plot's title.
func (rep *ScaleReport) describe() string {
	parts := []string{"single member, 1 KiB values"}
	if rep.Load.Clients > 0 {
		parts = append(parts, fmt.Sprintf("%d clients", rep.Load.Clients))
	}
	if rep.Load.Duration != "" {
		parts = append(parts, rep.Load.Duration+" per load")
	}
	if rep.Rounds > 1 {
		parts = append(parts, fmt.Sprintf("medians of %d rounds", rep.Rounds))
	}
	if rep.Machine.Cores > 0 {
		parts = append(parts, fmt.Sprintf("%d shared cores", rep.Machine.Cores))
	}
	if c := rep.GitCommit; c != "" {
		parts = append(parts, "kvd "+c[:min(7, len(c))])
	}
	if d, _, ok := strings.Cut(rep.Date, "T"); ok {
		parts = append(parts, d)
	}
	return strings.Join(parts, " · ")
}

// scaleMetric is one figure of the series that gets its own line chart.
type scaleMetric struct {
	file   string // <prefix>-<file>.svg
	field  string // key of a result's "median"
	title  string
	ylabel string
	div    float64 // the field divided by this is plotted
	format func(float64) string
}

var scaleMetrics = []scaleMetric{
	{"put-p99", "put_p99_ms", "Put p99 latency against data size: ms (lower is better)", "put p99, ms", 1, formatMs},
	{"range-p99", "range_p99_ms", "1-key linearizable range p99 against data size: ms (lower is better)", "range p99, ms", 1, formatMs},
	{"rss", "rss_bytes", "Server RSS after the load against data size: MiB (lower is better)", "RSS, MiB", 1 << 20, formatRPS},
	{"restart", "restart_seconds", "Restart time to serving against data size: s (lower is better)", "restart, s", 1, formatSeconds},
	{"catchup", "catchup_seconds", "New member catch-up time against data size: s (lower is better)", "catch-up, s", 1, formatSeconds},
}

func formatSeconds(v float64) string {
	if v < 100 {
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return thousands(int64(math.Round(v)))
}

// LineChart is a line chart against the data size: one line per server,
// one point per size the server was measured at.
type LineChart struct {
	Title    string
	Subtitle string
	YLabel   string
	Sizes    []ScaleSize // the x axis, from the smallest up
	Series   []string    // server names
	// Values [series][size]: NaN for a size the server was run at and the
	// step failed (drawn as "failed"), +Inf for one it was not run at.
	Values [][]float64
	Format func(float64) string
}

// lineChartOf makes the chart of one figure of the series.
func lineChartOf(rep *ScaleReport, k scaleMetric) *LineChart {
	c := &LineChart{
		Title:    k.title,
		Subtitle: rep.describe(),
		YLabel:   k.ylabel,
		Sizes:    rep.sortedSizes(),
		Series:   rep.Servers,
		Format:   k.format,
	}
	for _, s := range rep.Servers {
		row := make([]float64, len(c.Sizes))
		for j, z := range c.Sizes {
			row[j] = math.Inf(1)
			r := rep.result(s, z.Name)
			if r == nil {
				continue
			}
			row[j] = math.NaN()
			if v := r.Median[k.field]; v != nil {
				row[j] = *v / k.div
			}
		}
		c.Values = append(c.Values, row)
	}
	return c
}

// xOf places size j on the x axis: by the logarithm of its bytes, so 100M,
// 1G and 8G spread out; a single size sits in the middle.
func (c *LineChart) xOf(j int, left, w float64) float64 {
	lo := math.Log(float64(c.Sizes[0].Bytes))
	hi := math.Log(float64(c.Sizes[len(c.Sizes)-1].Bytes))
	if hi-lo < 1e-9 {
		return left + w/2
	}
	return left + (math.Log(float64(c.Sizes[j].Bytes))-lo)/(hi-lo)*w
}

// WriteSVG draws the chart as a standalone SVG document.
func (c *LineChart) WriteSVG(w io.Writer) error {
	var b strings.Builder
	plotW := width - marginL - marginR
	plotH := height - marginT - marginB
	baseY := marginT + plotH
	const pad = 48.0 // between the y axis and the smallest size, the largest and the right edge
	x0, xw := marginL+pad, plotW-2*pad

	ymax := 0.0
	for _, row := range c.Values {
		for _, v := range row {
			if !math.IsNaN(v) && !math.IsInf(v, 0) && v > ymax {
				ymax = v
			}
		}
	}
	top, step := niceAxis(ymax)
	scale := plotH / top

	writeHeader(&b, width, height, c.Title, c.Subtitle)
	x := marginL
	for i, s := range c.Series {
		col := seriesColor(c.Series, i)
		fmt.Fprintf(&b, `<g class="legend-item"><line x1="%s" y1="71" x2="%s" y2="71" stroke="%s" stroke-width="2.5"/><circle cx="%s" cy="71" r="4" fill="%s"/><text class="legend" x="%s" y="76" font-size="13" fill="#1a1a1a">%s</text></g>`+"\n",
			num(x), num(x+22), col, num(x+11), col, num(x+28), esc(s))
		x += 28 + textWidth(s, 13) + 28
	}

	// Y axis: grid lines, tick labels, axis title.
	b.WriteString(`<g class="y-axis" font-size="12" fill="#333333">` + "\n")
	for k := 0; float64(k)*step <= top+step/2; k++ {
		v := float64(k) * step
		y := baseY - v*scale
		if v > 0 {
			fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#e3e3e3" stroke-width="1"/>`+"\n", num(marginL), num(y), num(marginL+plotW), num(y))
		}
		fmt.Fprintf(&b, `<text class="tick" x="%s" y="%s" text-anchor="end">%s</text>`+"\n", num(marginL-8), num(y+4), esc(tickLabel(v, step)))
	}
	fmt.Fprintf(&b, `<text class="y-label" transform="translate(18 %s) rotate(-90)" text-anchor="middle" font-size="13">%s</text>`+"\n",
		num(marginT+plotH/2), esc(c.YLabel))
	b.WriteString("</g>\n")

	// X axis: one tick per size, placed by its logarithm.
	b.WriteString(`<g class="x-axis" font-size="13" fill="#1a1a1a">` + "\n")
	fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333" stroke-width="1.2"/>`+"\n",
		num(marginL), num(baseY), num(marginL+plotW), num(baseY))
	for j, z := range c.Sizes {
		sx := c.xOf(j, x0, xw)
		fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333" stroke-width="1.2"/>`+"\n", num(sx), num(baseY), num(sx), num(baseY+5))
		fmt.Fprintf(&b, `<text class="size-label" data-size="%s" x="%s" y="%s" text-anchor="middle">%s</text>`+"\n",
			esc(z.Name), num(sx), num(baseY+22), esc(z.Name))
	}
	fmt.Fprintf(&b, `<text class="x-label" x="%s" y="%s" text-anchor="middle" font-size="13">data size (1 KiB values; log scale)</text>`+"\n",
		num(marginL+plotW/2), num(baseY+48))
	b.WriteString("</g>\n")

	// Value labels sit above and right of their points; at one size they
	// are pushed apart so close values do not overprint each other.
	labelY := make([][]float64, len(c.Series))
	for i := range c.Series {
		labelY[i] = make([]float64, len(c.Sizes))
	}
	for j := range c.Sizes {
		var col []int
		for i := range c.Series {
			if v := c.Values[i][j]; !math.IsNaN(v) && !math.IsInf(v, 0) {
				labelY[i][j] = baseY - v*scale - 6
				col = append(col, i)
			}
		}
		slices.SortFunc(col, func(a, b int) int { return cmp.Compare(labelY[a][j], labelY[b][j]) })
		for k := 1; k < len(col); k++ {
			if prev := labelY[col[k-1]][j]; labelY[col[k]][j] < prev+13 {
				labelY[col[k]][j] = prev + 13
			}
		}
	}

	// One polyline per server through its measured sizes, a point with
	// its value at each, "failed" where a step failed; the failed labels
	// at one size are stacked, counted per size like the value labels.
	failed := make([]int, len(c.Sizes))
	for i, s := range c.Series {
		col := seriesColor(c.Series, i)
		var pts []string
		var marks strings.Builder
		for j, z := range c.Sizes {
			v := c.Values[i][j]
			sx := c.xOf(j, x0, xw)
			switch {
			case math.IsInf(v, 1):
				continue
			case math.IsNaN(v):
				fmt.Fprintf(&marks, `<text class="failed" data-server="%s" data-size="%s" x="%s" y="%s" font-size="11" fill="#b00020" text-anchor="middle">%s: failed</text>`+"\n",
					esc(s), esc(z.Name), num(sx), num(baseY-8-14*float64(failed[j])), esc(s))
				failed[j]++
				continue
			}
			sy := baseY - v*scale
			pts = append(pts, num(sx)+","+num(sy))
			text := c.Format(v)
			fmt.Fprintf(&marks, `<circle class="point" data-server="%s" data-size="%s" data-value="%s" cx="%s" cy="%s" r="4.5" fill="%s"><title>%s at %s: %s</title></circle>`+"\n",
				esc(s), esc(z.Name), strconv.FormatFloat(v, 'g', -1, 64), num(sx), num(sy), col, esc(s), esc(z.Name), esc(text))
			fmt.Fprintf(&marks, `<text class="value" data-server="%s" x="%s" y="%s" font-size="11" text-anchor="start" fill="%s" stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke">%s</text>`+"\n",
				esc(s), num(sx+7), num(labelY[i][j]), col, esc(text))
		}
		fmt.Fprintf(&b, `<g class="series" data-server="%s">`+"\n", esc(s))
		if len(pts) > 0 {
			fmt.Fprintf(&b, `<polyline class="line" data-server="%s" points="%s" fill="none" stroke="%s" stroke-width="2.5" stroke-linejoin="round"/>`+"\n",
				esc(s), strings.Join(pts, " "), col)
		}
		b.WriteString(marks.String())
		b.WriteString("</g>\n")
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
