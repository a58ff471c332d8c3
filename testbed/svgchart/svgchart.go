// Package svgchart draws bar and line charts as plain SVG, written by
// hand: no dependencies, and the same chart always gives the same bytes.
package svgchart

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
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

// Bar is a bar chart over categories (policies), one bar per series
// in each category, with optional per-category markers and a horizontal
// bound line.
type Bar struct {
	Title  string
	YLabel string
	// Categories label the x axis, left to right.
	Categories []string
	// Series are the bars of each category, side by side. A value that is
	// NaN draws no bar.
	Series []BarSeries
	// ColorByCategory colours bars by category (then the legend lists no
	// series); otherwise by series.
	ColorByCategory bool
	// Palette gives known categories fixed colours (Colors).
	Palette map[string]string
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

type BarSeries struct {
	Name   string
	Color  string
	Values []float64
}

// Line plots series over a numeric x axis whose ticks are the given
// points, on a log scale when Log is set.
type Line struct {
	Title  string
	XLabel string
	YLabel string
	XTicks []XTick
	Log    bool
	Series []LineSeries
}

type XTick struct {
	Value float64
	Label string
}

type LineSeries struct {
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
func (c Bar) SVG() []byte {
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

	catColors := Colors(c.Categories, c.Palette)
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

func (c Bar) hasMarkers() bool {
	for _, m := range c.Markers {
		if m > 0 {
			return true
		}
	}
	return false
}

// svg renders the line chart.
func (c Line) SVG() []byte {
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
func (c Line) xScale() func(float64) float64 {
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

var spare = []string{"#e377c2", "#17becf", "#bcbd22", "#393b79", "#637939"}

// Colors assigns each name its palette colour, or the next spare one. A
// name's text before " [" is looked up: "optimal [imagenet-train-q95]"
// takes optimal's.
func Colors(names []string, palette map[string]string) []string {
	out := make([]string, len(names))
	n := 0
	for i, name := range names {
		key, _, _ := strings.Cut(name, " [")
		if c, ok := palette[key]; ok {
			out[i] = c
			continue
		}
		out[i] = spare[n%len(spare)]
		n++
	}
	return out
}
