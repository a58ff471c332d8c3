package results

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/sophon-dl/sophon/testbed/svgchart"
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

	epoch := svgchart.Bar{
		Title:           "Epoch time per policy, " + label,
		YLabel:          "steady-state epoch (s)",
		Categories:      cats,
		Series:          []svgchart.BarSeries{{Name: "epoch time", Values: secs}},
		ColorByCategory: true, Palette: palette,
		Markers:     pred,
		MarkerLabel: "predicted",
		Bound:       cellBound(c),
		BoundLabel:  "bound",
	}
	wire := svgchart.Bar{
		Title:       "Bytes on the wire per policy, " + label,
		YLabel:      "MB per epoch",
		Categories:  cats,
		Series:      []svgchart.BarSeries{{Name: "agent bytes", Color: "#1f77b4", Values: agent}},
		ValueFormat: "%.1f",
	}
	if anyKernel {
		wire.Series = append(wire.Series, svgchart.BarSeries{Name: "kernel bytes", Color: "#aec7e8", Values: kernel})
	}
	storage := svgchart.Bar{
		Title:           "Storage CPU per policy, " + label,
		YLabel:          "storage CPU per epoch (s)",
		Categories:      cats,
		Series:          []svgchart.BarSeries{{Name: "storage CPU", Values: cpu}},
		ColorByCategory: true, Palette: palette,
	}
	return []chartFile{
		{Name: names.name("epoch-time-" + base), Alt: "epoch time per policy, " + label, SVG: epoch.SVG()},
		{Name: names.name("wire-bytes-" + base), Alt: "bytes on the wire per policy, " + label, SVG: wire.SVG()},
		{Name: names.name("storage-cpu-" + base), Alt: "storage CPU per policy, " + label, SVG: storage.SVG()},
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
			out = append(out, chartFile{Name: names.name(name), Alt: strings.ToLower(title[:1]) + title[1:], SVG: ch.SVG()})
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
func sweep(cells []*Cell, x func(*Cell) (float64, string), title, xlabel string, logOK bool) (svgchart.Line, bool) {
	slices.SortStableFunc(cells, func(a, b *Cell) int {
		xa, _ := x(a)
		xb, _ := x(b)
		return cmp.Compare(xa, xb)
	})
	var ticks []svgchart.XTick
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
			ticks = append(ticks, svgchart.XTick{Value: v, Label: label})
		}
	}
	if len(ticks) < 2 {
		return svgchart.Line{}, false
	}
	cols := svgchart.Colors(policies, palette)
	series := make([]svgchart.LineSeries, len(policies))
	for i, p := range policies {
		series[i] = svgchart.LineSeries{Name: p, Color: cols[i]}
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
	return svgchart.Line{
		Title:  title,
		XLabel: xlabel,
		YLabel: "steady-state epoch (s)",
		XTicks: ticks,
		Log:    log,
		Series: series,
	}, true
}
