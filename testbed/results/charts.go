package results

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The charts are plain SVG written by hand: no dependencies, and the same
// Results always give the same bytes (fixed-precision coordinates, no map
// iteration, no clock). Elements carry class and data- attributes so tests
// and scripts can read the figures back:
//
//	rect.bar       data-category, data-series, data-value
//	line.predicted data-category, data-value   (a short tick over the bars)
//	line.bound     data-value                  (dashed, across the plot)
//	line.tick      data-value                  (a y-axis grid line)
//	polyline.line  data-series
//	circle.point   data-series, data-x, data-value

// Chart geometry, in SVG user units.
const (
	chartW      = 760
	chartH      = 420
	plotLeft    = 76
	plotRight   = chartW - 24
	plotTop     = 68
	plotBottom  = chartH - 100
	legendY     = 44
	yTicksWant  = 5
	barFill     = 0.7 // share of a category's width its bars take
	markerOver  = 4   // how far a predicted tick reaches past its bars
	linePadding = 36  // room between the y axis and the first x point
)

// palette gives the known policies fixed colours, so a policy looks the
// same in every chart; others take the spare colours in order.
var palette = map[string]string{
	"nooff":     "#7f7f7f",
	"alloff":    "#d62728",
	"resizeoff": "#ff7f0e",
	"fastflow":  "#9467bd",
	"sophon":    "#1f77b4",
	"optimal":   "#2ca02c",
	PeerPolicy:  "#8c564b",
}

var spare = []string{"#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939"}

// colors assigns each name its palette colour, or the next spare one.
func colors(names []string) []string {
	out := make([]string, len(names))
	n := 0
	for i, name := range names {
		if c, ok := palette[name]; ok {
			out[i] = c
			continue
		}
		out[i] = spare[n%len(spare)]
		n++
	}
	return out
}

// barChart is a bar chart over categories (policies), one bar per series
// in each category, with optional per-category markers and a horizontal
// bound line.
type barChart struct {
	Title  string
	YLabel string
	// Categories label the x axis, left to right.
	Categories []string
	// Series are the bars of each category, side by side. A value that is
	// NaN draws no bar.
	Series []barSeries
	// ColorByCategory colours bars by category (then the legend lists no
	// series); otherwise by series.
	ColorByCategory bool
	// Markers, when set, hold one value per category drawn as a short
	// black tick across the category's bars; 0 or NaN draws none.
	Markers     []float64
	MarkerLabel string
	// Bound, when > 0, is drawn as a dashed line across the plot.
	Bound      float64
	BoundLabel string
	// ValueFormat prints the values over the bars. Empty means "%.2f".
	ValueFormat string
}

type barSeries struct {
	Name   string
	Color  string
	Values []float64
}

// lineChart plots series over a numeric x axis whose ticks are the given
// points, on a log scale when Log is set.
type lineChart struct {
	Title  string
	XLabel string
	YLabel string
	XTicks []xTick
	Log    bool
	Series []lineSeries
}

type xTick struct {
	Value float64
	Label string
}

type lineSeries struct {
	Name  string
	Color string
	X, Y  []float64
}

// svgDoc accumulates one SVG document.
type svgDoc struct{ b bytes.Buffer }

func newSVG(title string) *svgDoc {
	s := &svgDoc{}
	s.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		chartW, chartH, chartW, chartH)
	s.printf("<title>%s</title>\n", esc(title))
	s.printf(`<rect class="background" width="%d" height="%d" fill="#ffffff"/>`+"\n", chartW, chartH)
	s.printf(`<text class="title" x="%s" y="24" text-anchor="middle" font-size="16" font-weight="bold">%s</text>`+"\n",
		num(chartW/2), esc(title))
	return s
}

func (s *svgDoc) printf(format string, args ...any) { fmt.Fprintf(&s.b, format, args...) }

func (s *svgDoc) finish() []byte {
	s.b.WriteString("</svg>\n")
	return s.b.Bytes()
}

// legendEntry is one item of a chart's legend.
type legendEntry struct {
	Name  string
	Color string
	Kind  string // "box", "tick", "dash" or "dot"
}

// legend draws the entries in one row under the title.
func (s *svgDoc) legend(entries []legendEntry) {
	x := float64(plotLeft)
	for _, e := range entries {
		y := float64(legendY)
		switch e.Kind {
		case "tick":
			s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="3"/>`+"\n",
				num(x), num(y), num(x+14), num(y), e.Color)
		case "dash":
			s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="1.5" stroke-dasharray="4 3"/>`+"\n",
				num(x), num(y), num(x+14), num(y), e.Color)
		case "dot":
			s.printf(`<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="2"/>`+"\n",
				num(x), num(y), num(x+14), num(y), e.Color)
			s.printf(`<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", num(x+7), num(y), e.Color)
		default:
			s.printf(`<rect x="%s" y="%s" width="12" height="12" fill="%s"/>`+"\n", num(x), num(y-6), e.Color)
		}
		s.printf(`<text class="legend" x="%s" y="%s">%s</text>`+"\n", num(x+18), num(y+4), esc(e.Name))
		x += 18 + 7*float64(len([]rune(e.Name))) + 16
	}
}

// yAxis is a value axis from 0 to Top with round ticks.
type yAxis struct {
	Ticks    []float64
	Top      float64
	Decimals int
}

func newYAxis(max float64) yAxis {
	ticks, step := niceTicks(max*1.05, yTicksWant)
	return yAxis{Ticks: ticks, Top: ticks[len(ticks)-1], Decimals: decimals(step)}
}

// y maps a value to its SVG y coordinate.
func (a yAxis) y(v float64) float64 {
	return plotBottom - v/a.Top*(plotBottom-plotTop)
}

// height is the length of a bar of value v.
func (a yAxis) height(v float64) float64 {
	return v / a.Top * (plotBottom - plotTop)
}

// draw draws the grid lines, tick labels, both axis lines and the label.
func (a yAxis) draw(s *svgDoc, label string) {
	for _, t := range a.Ticks {
		y := a.y(t)
		s.printf(`<line class="tick" data-value="%s" x1="%d" y1="%s" x2="%d" y2="%s" stroke="#dddddd"/>`+"\n",
			val(t), plotLeft, num(y), plotRight, num(y))
		s.printf(`<text x="%d" y="%s" text-anchor="end">%s</text>`+"\n",
			plotLeft-6, num(y+4), strconv.FormatFloat(t, 'f', a.Decimals, 64))
	}
	s.printf(`<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333333"/>`+"\n",
		plotLeft, plotTop, plotLeft, plotBottom)
	s.printf(`<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333333"/>`+"\n",
		plotLeft, plotBottom, plotRight, plotBottom)
	mid := float64(plotTop+plotBottom) / 2
	s.printf(`<text class="ylabel" x="18" y="%s" text-anchor="middle" transform="rotate(-90 18 %s)">%s</text>`+"\n",
		num(mid), num(mid), esc(label))
}

// niceTicks returns ticks from 0 to at least max in round steps (1, 2 or 5
// times a power of ten), about want of them, and the step.
func niceTicks(max float64, want int) ([]float64, float64) {
	if !(max > 0) || math.IsInf(max, 0) {
		max = 1
	}
	if want < 1 {
		want = 1
	}
	raw := max / float64(want)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	var step float64
	switch norm := raw / mag; {
	case norm <= 1:
		step = mag
	case norm <= 2:
		step = 2 * mag
	case norm <= 5:
		step = 5 * mag
	default:
		step = 10 * mag
	}
	n := int(math.Ceil(max/step - 1e-9))
	ticks := make([]float64, 0, n+1)
	d := decimals(step)
	for i := 0; i <= n; i++ {
		// NB: round so that 3*0.1 is the tick 0.3, not 0.30000000000000004.
		t, _ := strconv.ParseFloat(strconv.FormatFloat(float64(i)*step, 'f', d, 64), 64)
		ticks = append(ticks, t)
	}
	return ticks, step
}

// decimals is how many decimals a tick label needs at this step.
func decimals(step float64) int {
	d := int(-math.Floor(math.Log10(step) + 1e-9))
	return max(d, 0)
}

// svg renders the bar chart.
func (c barChart) svg() []byte {
	s := newSVG(c.Title)
	format := c.ValueFormat
	if format == "" {
		format = "%.2f"
	}
	hi := c.Bound
	for _, ser := range c.Series {
		for _, v := range ser.Values {
			if v > hi {
				hi = v
			}
		}
	}
	for _, m := range c.Markers {
		if m > hi {
			hi = m
		}
	}
	axis := newYAxis(hi)

	var legend []legendEntry
	if !c.ColorByCategory {
		for _, ser := range c.Series {
			legend = append(legend, legendEntry{Name: ser.Name, Color: ser.Color, Kind: "box"})
		}
	}
	if c.hasMarkers() {
		legend = append(legend, legendEntry{Name: c.MarkerLabel, Color: "#000000", Kind: "tick"})
	}
	if c.Bound > 0 {
		legend = append(legend, legendEntry{Name: c.BoundLabel, Color: "#000000", Kind: "dash"})
	}
	s.legend(legend)
	axis.draw(s, c.YLabel)

	catColors := colors(c.Categories)
	n := max(len(c.Categories), 1)
	groupW := float64(plotRight-plotLeft) / float64(n)
	barW := groupW * barFill / float64(max(len(c.Series), 1))
	for i, cat := range c.Categories {
		gx := plotLeft + float64(i)*groupW
		first := gx + groupW*(1-barFill)/2
		for j, ser := range c.Series {
			if i >= len(ser.Values) || math.IsNaN(ser.Values[i]) {
				continue
			}
			v := math.Max(ser.Values[i], 0)
			x := first + float64(j)*barW
			h := axis.height(v)
			color := ser.Color
			if c.ColorByCategory {
				color = catColors[i]
			}
			s.printf(`<rect class="bar" data-category="%s" data-series="%s" data-value="%s" x="%s" y="%s" width="%s" height="%s" fill="%s"/>`+"\n",
				esc(cat), esc(ser.Name), val(v), num(x), num(plotBottom-h), num(barW), num(h), color)
			s.printf(`<text class="value" x="%s" y="%s" text-anchor="middle" font-size="10">%s</text>`+"\n",
				num(x+barW/2), num(plotBottom-h-4), esc(fmt.Sprintf(format, v)))
		}
		if i < len(c.Markers) && c.Markers[i] > 0 {
			m := c.Markers[i]
			y := axis.y(m)
			s.printf(`<line class="predicted" data-category="%s" data-value="%s" x1="%s" y1="%s" x2="%s" y2="%s" stroke="#000000" stroke-width="3"/>`+"\n",
				esc(cat), val(m), num(first-markerOver), num(y), num(first+groupW*barFill+markerOver), num(y))
		}
		lx, ly := gx+groupW/2, float64(plotBottom+14)
		s.printf(`<text class="category" x="%s" y="%s" text-anchor="end" transform="rotate(-30 %s %s)">%s</text>`+"\n",
			num(lx), num(ly), num(lx), num(ly), esc(cat))
	}
	if c.Bound > 0 {
		y := axis.y(c.Bound)
		s.printf(`<line class="bound" data-value="%s" x1="%d" y1="%s" x2="%d" y2="%s" stroke="#000000" stroke-width="1.5" stroke-dasharray="6 4"/>`+"\n",
			val(c.Bound), plotLeft, num(y), plotRight, num(y))
		s.printf(`<text class="bound-label" x="%d" y="%s" text-anchor="end" font-size="11" stroke="#ffffff" stroke-width="3" paint-order="stroke">%s</text>`+"\n",
			plotRight-2, num(y-4), esc(c.BoundLabel+" "+fmt.Sprintf(format, c.Bound)))
	}
	return s.finish()
}

func (c barChart) hasMarkers() bool {
	for _, m := range c.Markers {
		if m > 0 {
			return true
		}
	}
	return false
}

// svg renders the line chart.
func (c lineChart) svg() []byte {
	s := newSVG(c.Title)
	hi := 0.0
	for _, ser := range c.Series {
		for _, v := range ser.Y {
			hi = math.Max(hi, v)
		}
	}
	axis := newYAxis(hi)

	legend := make([]legendEntry, len(c.Series))
	for i, ser := range c.Series {
		legend[i] = legendEntry{Name: ser.Name, Color: ser.Color, Kind: "dot"}
	}
	s.legend(legend)
	axis.draw(s, c.YLabel)

	xOf := c.xScale()
	for _, t := range c.XTicks {
		x := xOf(t.Value)
		s.printf(`<line class="xtick" data-value="%s" x1="%s" y1="%d" x2="%s" y2="%d" stroke="#333333"/>`+"\n",
			val(t.Value), num(x), plotBottom, num(x), plotBottom+5)
		s.printf(`<text x="%s" y="%d" text-anchor="middle">%s</text>`+"\n", num(x), plotBottom+20, esc(t.Label))
	}
	s.printf(`<text class="xlabel" x="%s" y="%d" text-anchor="middle">%s</text>`+"\n",
		num(float64(plotLeft+plotRight)/2), plotBottom+44, esc(c.XLabel))

	for _, ser := range c.Series {
		pts := make([]string, 0, len(ser.X))
		for i := range ser.X {
			pts = append(pts, num(xOf(ser.X[i]))+","+num(axis.y(ser.Y[i])))
		}
		if len(pts) > 1 {
			s.printf(`<polyline class="line" data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n",
				esc(ser.Name), strings.Join(pts, " "), ser.Color)
		}
		for i := range ser.X {
			s.printf(`<circle class="point" data-series="%s" data-x="%s" data-value="%s" cx="%s" cy="%s" r="3.5" fill="%s"/>`+"\n",
				esc(ser.Name), val(ser.X[i]), val(ser.Y[i]), num(xOf(ser.X[i])), num(axis.y(ser.Y[i])), ser.Color)
		}
	}
	return s.finish()
}

// xScale maps x values onto the plot between the ticks' extremes.
func (c lineChart) xScale() func(float64) float64 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, t := range c.XTicks {
		lo, hi = math.Min(lo, t.Value), math.Max(hi, t.Value)
	}
	f := func(v float64) float64 { return v }
	if c.Log && lo > 0 {
		f = math.Log10
	}
	a, b := f(lo), f(hi)
	left, right := float64(plotLeft+linePadding), float64(plotRight-linePadding)
	if !(b > a) {
		return func(float64) float64 { return (left + right) / 2 }
	}
	return func(v float64) float64 { return left + (f(v)-a)/(b-a)*(right-left) }
}

// num formats a coordinate.
func num(v float64) string {
	if v == 0 || math.IsNaN(v) {
		v = 0 // NB: no "-0.00"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// val formats a data value exactly.
func val(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// esc escapes text for SVG character data and attribute values.
func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s)) // a strings.Builder does not fail
	return b.String()
}

// chartFile is one chart of the report: its file name, the alt text the
// markdown gives it and its bytes.
type chartFile struct {
	Name string
	Alt  string
	SVG  []byte
}

// charted reports whether a run belongs in the charts: it ran, did not
// fail and has a steady-state epoch.
func charted(run *Run) bool {
	return run.Skipped == "" && run.Error == "" && len(run.Epochs) > 0
}

// chartable reports whether run goes into the charts: a charted run fed
// by the simulated GPU (a training row's epochs include its model's steps,
// so its bars would not compare with the others').
func chartable(run *Run) bool { return charted(run) && !run.Training }

// cellBound is the cell's one bound (Cell.BoundSeconds).
func cellBound(c *Cell) float64 { return c.BoundSeconds() }

// cellLabel names a cell for people: "500mbit, 0.5 storage CPUs", or on
// the delay line "500mbit, rtt 20ms, 0.5 storage CPUs". With --repeat the
// repetition follows: "500mbit, 0.5 storage CPUs, repetition 2".
func cellLabel(c *Cell) string {
	s := fmt.Sprintf("%s, %s storage CPUs", c.Link(), cpusString(c.StorageCPUs))
	if c.Repetition > 0 {
		s += fmt.Sprintf(", repetition %d", c.Repetition)
	}
	return s
}

func cpusString(cpus float64) string { return strconv.FormatFloat(cpus, 'f', -1, 64) }

// slug makes s safe in a file name: lower case letters, digits, dots and
// single dashes.
func slug(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '.' {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			dash = false
			b.WriteRune(r)
			continue
		}
		dash = true
	}
	out := strings.Trim(b.String(), ".-")
	if out == "" {
		return "x"
	}
	return out
}

// namer hands out unique file names, numbering repeats.
type namer map[string]bool

func (n namer) name(base string) string {
	name := base + ".svg"
	for i := 2; n[name]; i++ {
		name = fmt.Sprintf("%s-%d.svg", base, i)
	}
	n[name] = true
	return name
}

// cellCharts draws a cell's epoch time, bytes and storage CPU charts; none
// when no run of the cell can be charted.
func cellCharts(c *Cell, names namer) []chartFile {
	if vs := views(c); len(vs) > 1 { // each pipeline's, with its bound
		var out []chartFile
		for _, v := range vs {
			out = append(out, cellCharts(v, names)...)
		}
		return out
	}
	var runs []*Run
	for i := range c.Runs {
		if chartable(&c.Runs[i]) {
			runs = append(runs, &c.Runs[i])
		}
	}
	if len(runs) == 0 {
		return nil
	}
	label := cellLabel(c)
	base := slug(c.Rate) + "-cpu" + slug(cpusString(c.StorageCPUs))
	if c.DelayLine {
		base = slug(c.Rate) + "-rtt" + slug(strconv.FormatFloat(c.RTTMs, 'f', -1, 64)) + "ms-cpu" + slug(cpusString(c.StorageCPUs))
	}
	if c.Repetition > 0 {
		base += fmt.Sprintf("-rep%d", c.Repetition)
	}
	if ps := c.Pipelines(); len(ps) == 1 {
		label += ", " + ps[0]
		base += "-" + slug(ps[0])
	}
	cats := make([]string, len(runs))
	secs := make([]float64, len(runs))
	pred := make([]float64, len(runs))
	agent := make([]float64, len(runs))
	kernel := make([]float64, len(runs))
	cpu := make([]float64, len(runs))
	anyKernel := false
	for i, run := range runs {
		e := run.Steady()
		cats[i] = rowName(run)
		secs[i] = e.Seconds
		pred[i] = e.PredictedSeconds
		agent[i] = float64(e.AgentBytes) / 1e6
		kernel[i] = math.NaN()
		if e.KernelBytes > 0 {
			kernel[i] = float64(e.KernelBytes) / 1e6
			anyKernel = true
		}
		cpu[i] = e.StorageCPUSeconds
	}

	epoch := barChart{
		Title:           "Epoch time per policy, " + label,
		YLabel:          "steady-state epoch (s)",
		Categories:      cats,
		Series:          []barSeries{{Name: "epoch time", Values: secs}},
		ColorByCategory: true,
		Markers:         pred,
		MarkerLabel:     "predicted",
		Bound:           cellBound(c),
		BoundLabel:      "bound",
	}
	wire := barChart{
		Title:       "Bytes on the wire per policy, " + label,
		YLabel:      "MB per epoch",
		Categories:  cats,
		Series:      []barSeries{{Name: "agent bytes", Color: "#1f77b4", Values: agent}},
		ValueFormat: "%.1f",
	}
	if anyKernel {
		wire.Series = append(wire.Series, barSeries{Name: "kernel bytes", Color: "#aec7e8", Values: kernel})
	}
	storage := barChart{
		Title:           "Storage CPU per policy, " + label,
		YLabel:          "storage CPU per epoch (s)",
		Categories:      cats,
		Series:          []barSeries{{Name: "storage CPU", Values: cpu}},
		ColorByCategory: true,
	}
	return []chartFile{
		{Name: names.name("epoch-time-" + base), Alt: "epoch time per policy, " + label, SVG: epoch.svg()},
		{Name: names.name("wire-bytes-" + base), Alt: "bytes on the wire per policy, " + label, SVG: wire.svg()},
		{Name: names.name("storage-cpu-" + base), Alt: "storage CPU per policy, " + label, SVG: storage.svg()},
	}
}

// sweepCharts draws epoch time against link rate (one chart per storage
// CPU value and round trip), against storage CPUs (one chart per link:
// rate and round trip) and, on the delay line, against the round trip
// (one chart per rate and storage CPU value), each only when it has at
// least two x points. With --repeat they draw the first repetition (the
// Repeatability table compares the others).
func sweepCharts(r *Results, names namer) []chartFile {
	var first []Cell
	for _, c := range r.Cells {
		if c.Repetition <= 1 {
			first = append(first, c)
		}
	}
	var out []chartFile
	add := func(cells []*Cell, x func(*Cell) (float64, string), title, xlabel, name string, logOK bool) {
		if ch, ok := sweep(cells, x, title, xlabel, logOK); ok {
			out = append(out, chartFile{Name: names.name(name), Alt: strings.ToLower(title[:1]) + title[1:], SVG: ch.svg()})
		}
	}
	// group returns the cells by key, in order of first appearance.
	group := func(key func(*Cell) string) (keys []string, by map[string][]*Cell) {
		by = map[string][]*Cell{}
		for i := range first {
			k := key(&first[i])
			if _, ok := by[k]; !ok {
				keys = append(keys, k)
			}
			by[k] = append(by[k], &first[i])
		}
		return keys, by
	}
	rtt := func(c *Cell) string {
		if !c.DelayLine {
			return ""
		}
		return ", rtt " + strconv.FormatFloat(c.RTTMs, 'f', -1, 64) + "ms"
	}
	keys, by := group(func(c *Cell) string { return cpusString(c.StorageCPUs) + rtt(c) })
	for _, k := range keys {
		x := func(c *Cell) (float64, string) { return c.RateBitsPerSec / 1e6, c.Rate }
		add(by[k], x, "Epoch time vs link rate, "+strings.Replace(k, ",", " storage CPUs,", 1)+suffixIf(!strings.Contains(k, ","), " storage CPUs"),
			"link rate", "sweep-rate-cpu"+slug(k), true)
	}
	keys, by = group(func(c *Cell) string { return c.Rate + rtt(c) })
	for _, k := range keys {
		x := func(c *Cell) (float64, string) { return c.StorageCPUs, cpusString(c.StorageCPUs) }
		add(by[k], x, "Epoch time vs storage CPUs, "+k, "storage CPUs (cores)", "sweep-cpus-"+slug(k), false)
	}
	keys, by = group(func(c *Cell) string {
		if !c.DelayLine {
			return ""
		}
		return c.Rate + ", " + cpusString(c.StorageCPUs) + " storage CPUs"
	})
	for _, k := range keys {
		if k == "" {
			continue
		}
		x := func(c *Cell) (float64, string) {
			return c.RTTMs, strconv.FormatFloat(c.RTTMs, 'f', -1, 64) + "ms"
		}
		add(by[k], x, "Epoch time vs round trip, "+k, "round trip (ms)", "sweep-rtt-"+slug(k), false)
	}
	return out
}

// suffixIf is s when ok, else "".
func suffixIf(ok bool, s string) string {
	if ok {
		return s
	}
	return ""
}

// sweep builds a line chart of steady epoch time over cells placed by x,
// one series per policy in order of first appearance; ok is false when
// fewer than two x points have a charted run.
func sweep(cells []*Cell, x func(*Cell) (float64, string), title, xlabel string, logOK bool) (lineChart, bool) {
	slices.SortStableFunc(cells, func(a, b *Cell) int {
		xa, _ := x(a)
		xb, _ := x(b)
		return cmp.Compare(xa, xb)
	})
	var ticks []xTick
	var policies []string
	for _, c := range cells {
		v, label := x(c)
		has := false
		for i := range c.Runs {
			run := &c.Runs[i]
			if !chartable(run) {
				continue
			}
			has = true
			if !slices.Contains(policies, rowName(run)) {
				policies = append(policies, rowName(run))
			}
		}
		if has && (len(ticks) == 0 || ticks[len(ticks)-1].Value != v) {
			ticks = append(ticks, xTick{Value: v, Label: label})
		}
	}
	if len(ticks) < 2 {
		return lineChart{}, false
	}
	cols := colors(policies)
	series := make([]lineSeries, len(policies))
	for i, p := range policies {
		series[i] = lineSeries{Name: p, Color: cols[i]}
		for _, c := range cells {
			for j := range c.Runs {
				run := &c.Runs[j]
				if rowName(run) == p && chartable(run) {
					v, _ := x(c)
					series[i].X = append(series[i].X, v)
					series[i].Y = append(series[i].Y, run.Steady().Seconds)
					break
				}
			}
		}
	}
	lo, hi := ticks[0].Value, ticks[len(ticks)-1].Value
	log := logOK && lo > 0 && hi/lo >= 10
	if log {
		xlabel += ", log scale"
	}
	return lineChart{
		Title:  title,
		XLabel: xlabel,
		YLabel: "steady-state epoch (s)",
		XTicks: ticks,
		Log:    log,
		Series: series,
	}, true
}
