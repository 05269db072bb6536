package main

import (
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Chart is a grouped bar chart: one group per workload, one bar per server.
type Chart struct {
	Title    string
	Subtitle string
	YLabel   string
	Groups   []string    // group labels; ", " starts a new line
	GroupIDs []string    // workload names, for the bars' data attributes
	Series   []string    // server names, one bar per group each
	Values   [][]float64 // [group][series]; NaN: no value (the run failed)
	// Ranges, optional, are the lowest and highest round behind each value
	// ([group][series]{min, max}), drawn as a line through the bar's top;
	// NaN, or fewer than two rounds: none.
	Ranges [][][2]float64
	Format func(float64) string
}

// Layout of every chart, in SVG user units.
const (
	width      = 960.0
	height     = 500.0
	marginL    = 84.0
	marginR    = 24.0
	marginT    = 96.0
	marginB    = 72.0
	groupFill  = 0.78 // share of a group's width the bars take
	barGap     = 3.0  // between the bars of a group
	fontFamily = "DejaVu Sans, Helvetica, Arial, sans-serif"
)

// Fixed colors per server (Okabe-Ito, readable for color-blind readers);
// a server not listed gets one of the others.
var serverColors = map[string]string{
	"kvd-bolt":   "#0072B2",
	"kvd-badger": "#E69F00",
	"etcd":       "#009E73",
}

var otherColors = []string{"#CC79A7", "#56B4E9", "#D55E00", "#999999"}

func seriesColor(series []string, i int) string {
	if c, ok := serverColors[series[i]]; ok {
		return c
	}
	n := 0
	for _, s := range series[:i] {
		if _, ok := serverColors[s]; !ok {
			n++
		}
	}
	return otherColors[n%len(otherColors)]
}

// niceAxis returns the top of the y axis and the tick step for values up to
// ymax: the step is the smallest of 1, 2, 2.5 or 5 times a power of ten that
// needs at most six steps.
func niceAxis(ymax float64) (top, step float64) {
	if !(ymax > 0) || math.IsInf(ymax, 0) {
		return 1, 0.25
	}
	raw := ymax / 6
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step = 10 * mag
	for _, m := range []float64{1, 2, 2.5, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	top = math.Ceil(ymax/step-1e-9) * step
	if top < ymax {
		top += step
	}
	return top, step
}

// WriteSVG draws the chart as a standalone SVG document.
func (c *Chart) WriteSVG(w io.Writer) error {
	var b strings.Builder
	plotW := width - marginL - marginR
	plotH := height - marginT - marginB
	baseY := marginT + plotH

	ymax := 0.0
	for _, g := range c.Values {
		for _, v := range g {
			if !math.IsNaN(v) && v > ymax {
				ymax = v
			}
		}
	}
	hasRanges := false
	for g := range c.Groups {
		for i := range c.Series {
			if lo, hi, ok := c.rangeOf(g, i); ok {
				hasRanges = true
				ymax = math.Max(ymax, math.Max(lo, hi))
			}
		}
	}
	top, step := niceAxis(ymax)
	scale := plotH / top

	writeHeader(&b, width, height, c.Title, c.Subtitle)

	// Legend: one swatch and name per server, in a row under the subtitle.
	x := marginL
	for i, s := range c.Series {
		fmt.Fprintf(&b, `<g class="legend-item"><rect x="%s" y="64" width="14" height="14" fill="%s"/><text class="legend" x="%s" y="76" font-size="13" fill="#1a1a1a">%s</text></g>`+"\n",
			num(x), seriesColor(c.Series, i), num(x+20), esc(s))
		x += 20 + textWidth(s, 13) + 28
	}
	if hasRanges {
		fmt.Fprintf(&b, `<g class="legend-item"><line x1="%s" y1="64" x2="%s" y2="78" stroke="#1a1a1a" stroke-width="1.2"/><line x1="%s" y1="64" x2="%s" y2="64" stroke="#1a1a1a" stroke-width="1.2"/><line x1="%s" y1="78" x2="%s" y2="78" stroke="#1a1a1a" stroke-width="1.2"/><text class="legend-note" x="%s" y="76" font-size="12" fill="#555555">lowest to highest round; bar: median</text></g>`+"\n",
			num(x+7), num(x+7), num(x+3), num(x+11), num(x+3), num(x+11), num(x+20))
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

	// Bars, their values and the group labels.
	groupW := plotW / float64(max(len(c.Groups), 1))
	n := float64(max(len(c.Series), 1))
	barW := (groupW*groupFill - barGap*(n-1)) / n
	for g, label := range c.Groups {
		gx := marginL + float64(g)*groupW + groupW*(1-groupFill)/2
		id := label
		if g < len(c.GroupIDs) {
			id = c.GroupIDs[g]
		}
		fmt.Fprintf(&b, `<g class="group" data-workload="%s">`+"\n", esc(id))
		for i, s := range c.Series {
			v := math.NaN()
			if g < len(c.Values) && i < len(c.Values[g]) {
				v = c.Values[g][i]
			}
			bx := gx + float64(i)*(barW+barGap)
			cx := bx + barW/2
			if math.IsNaN(v) {
				fmt.Fprintf(&b, `<text class="failed" x="%s" y="%s" font-size="11" fill="#b00020" text-anchor="start" transform="rotate(-90 %s %s)">%s: no result</text>`+"\n",
					num(cx+4), num(baseY-6), num(cx+4), num(baseY-6), esc(s))
				continue
			}
			h := v * scale
			text := c.Format(v)
			fmt.Fprintf(&b, `<rect class="bar" data-server="%s" data-workload="%s" data-value="%s" x="%s" y="%s" width="%s" height="%s" fill="%s"><title>%s, %s: %s</title></rect>`+"\n",
				esc(s), esc(id), strconv.FormatFloat(v, 'g', -1, 64), num(bx), num(baseY-h), num(barW), num(h), seriesColor(c.Series, i),
				esc(s), esc(strings.ReplaceAll(label, "\n", " ")), esc(text))
			// The value sits on the bar, over the range line: a white halo
			// keeps it readable where the line crosses it.
			labelY := baseY - h - 5
			if lo, hi, ok := c.rangeOf(g, i); ok {
				cap := math.Min(10, barW*0.3)
				y1, y2 := baseY-lo*scale, baseY-hi*scale
				fmt.Fprintf(&b, `<g class="range" data-server="%s" data-workload="%s" data-min="%s" data-max="%s" stroke="#1a1a1a" stroke-width="1.2">`,
					esc(s), esc(id), strconv.FormatFloat(lo, 'g', -1, 64), strconv.FormatFloat(hi, 'g', -1, 64))
				fmt.Fprintf(&b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/><line x1="%s" y1="%s" x2="%s" y2="%s"/><line x1="%s" y1="%s" x2="%s" y2="%s"/></g>`+"\n",
					num(cx), num(y1), num(cx), num(y2), num(cx-cap/2), num(y1), num(cx+cap/2), num(y1), num(cx-cap/2), num(y2), num(cx+cap/2), num(y2))
			}
			fs := math.Min(12, math.Max(8, barW/(0.62*float64(len(text)))))
			fmt.Fprintf(&b, `<text class="value" data-server="%s" x="%s" y="%s" font-size="%s" text-anchor="middle" fill="#1a1a1a" stroke="#ffffff" stroke-width="3" stroke-linejoin="round" paint-order="stroke">%s</text>`+"\n",
				esc(s), num(cx), num(labelY), num(fs), esc(text))
		}
		lx := marginL + float64(g)*groupW + groupW/2
		for j, line := range strings.Split(label, ", ") {
			if j > 0 {
				line = strings.TrimSpace(line)
			}
			fmt.Fprintf(&b, `<text class="group-label" x="%s" y="%s" font-size="13" text-anchor="middle" fill="#1a1a1a">%s</text>`+"\n",
				num(lx), num(baseY+20+float64(j)*16), esc(line))
		}
		b.WriteString("</g>\n")
	}
	// The x axis on top of the bars' feet.
	fmt.Fprintf(&b, `<line class="x-axis" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#333333" stroke-width="1.2"/>`+"\n",
		num(marginL), num(baseY), num(marginL+plotW), num(baseY))
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// rangeOf returns the lowest and highest round of value [g][i], if known.
func (c *Chart) rangeOf(g, i int) (lo, hi float64, ok bool) {
	if g >= len(c.Ranges) || i >= len(c.Ranges[g]) {
		return 0, 0, false
	}
	lo, hi = c.Ranges[g][i][0], c.Ranges[g][i][1]
	if math.IsNaN(lo) || math.IsNaN(hi) || lo < 0 || hi < lo {
		return 0, 0, false
	}
	return lo, hi, true
}

// num formats a coordinate with at most two decimals.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*100)/100, 'f', -1, 64)
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// textWidth estimates the width of s in a sans-serif font of size px.
func textWidth(s string, px float64) float64 {
	return float64(len([]rune(s))) * px * 0.6
}

// tickLabel formats an axis value as precisely as the step needs.
func tickLabel(v, step float64) string {
	if step >= 1 && step == math.Trunc(step) {
		return thousands(int64(math.Round(v)))
	}
	dec := int(math.Max(0, math.Ceil(-math.Log10(step)+1e-9)))
	if step*math.Pow(10, float64(dec)) != math.Trunc(step*math.Pow(10, float64(dec))) {
		dec++
	}
	return strconv.FormatFloat(v, 'f', dec, 64)
}

// thousands formats n with commas: 12358 -> "12,358".
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}

// formatRPS formats requests per second, or any figure shown whole (RSS in
// MiB), as a whole number with commas.
func formatRPS(v float64) string { return thousands(int64(math.Round(v))) }

// formatMs formats a latency in ms: two decimals below 100, one below
// 1,000, none above.
func formatMs(v float64) string {
	switch {
	case v < 100:
		return strconv.FormatFloat(v, 'f', 2, 64)
	case v < 1000:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return thousands(int64(math.Round(v)))
}

// writeHeader starts a chart: the svg element, its title, a white
// background, and the title and subtitle lines.
func writeHeader(b *strings.Builder, width, height float64, title, subtitle string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%s" height="%s" viewBox="0 0 %s %s" font-family="%s" role="img">`+"\n",
		num(width), num(height), num(width), num(height), esc(fontFamily))
	fmt.Fprintf(b, "<title>%s</title>\n", esc(title))
	fmt.Fprintf(b, `<rect x="0" y="0" width="%s" height="%s" fill="#ffffff"/>`+"\n", num(width), num(height))
	fmt.Fprintf(b, `<text class="title" x="%s" y="28" font-size="19" font-weight="bold" fill="#1a1a1a">%s</text>`+"\n", num(marginL), esc(title))
	if subtitle != "" {
		fmt.Fprintf(b, `<text class="subtitle" x="%s" y="50" font-size="12" fill="#555555">%s</text>`+"\n", num(marginL), esc(subtitle))
	}
}
