package results

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ErrNoResults is returned for a nil *Results.
var ErrNoResults = errors.New("results: no results")

// WriteReport writes dir/report.md and its SVG charts into dir (creating
// dir), and returns the report's path and the charts' paths in the order
// the report shows them. Runs that were skipped, failed or have no epochs
// appear in the tables with their note but are left out of the charts.
// The same Results always give the same bytes.
func WriteReport(dir string, r *Results) (reportPath string, charts []string, err error) {
	if r == nil {
		return "", nil, ErrNoResults
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	names := namer{}
	perCell := make([][]chartFile, len(r.Cells))
	for i := range r.Cells {
		perCell[i] = cellCharts(&r.Cells[i], names)
	}
	sweeps := sweepCharts(r, names)

	for _, group := range append(slices.Clip(perCell), sweeps) {
		for _, ch := range group {
			path := filepath.Join(dir, ch.Name)
			if err := os.WriteFile(path, ch.SVG, 0o644); err != nil {
				return "", nil, err
			}
			charts = append(charts, path)
		}
	}

	var b strings.Builder
	writeMarkdown(&b, r, perCell, sweeps)
	reportPath = filepath.Join(dir, "report.md")
	tmp := reportPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return "", nil, err
	}
	if err := os.Rename(tmp, reportPath); err != nil {
		return "", nil, err
	}
	return reportPath, charts, nil
}

// Table prints each cell's comparison table as plain aligned text, with
// its summary line: what `testbed run` prints when it ends.
func Table(w io.Writer, r *Results) error {
	if r == nil {
		return ErrNoResults
	}
	var b strings.Builder
	for i := range r.Cells {
		c := &r.Cells[i]
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "== %s ==\n", cellLabel(c))
		writeText(&b, columns, cellTable(c))
		if s := summary(c); s != "" {
			fmt.Fprintf(&b, "summary: %s\n", s)
		}
		if rows := accountTable(c); len(rows) > 0 {
			b.WriteString("account (steady epoch; each resource's time, predicted / measured):\n")
			writeText(&b, accountColumns, rows)
		}
		if rows := trainingTable(c); len(rows) > 0 {
			b.WriteString("training loop:\n")
			writeText(&b, trainingColumns, rows)
		}
		if rows := nodesTable(c); len(rows) > 0 {
			b.WriteString("nodes (last epoch; per rank, per storage link, per storage agent):\n")
			writeText(&b, nodesColumns, rows)
		}
		if rows := jobsTable(c); r.Jobs > 1 && len(rows) > 0 {
			b.WriteString("jobs (every epoch; per job):\n")
			writeText(&b, jobsColumns, rows)
		}
		if rows := cacheTable(c); len(rows) > 0 {
			fmt.Fprintf(&b, "cache (%s MB budget; steady epoch):\n", mb(r.CacheBytes))
			writeText(&b, cacheColumns, rows)
		}
	}
	for i := range r.Fidelity {
		fmt.Fprintf(&b, "fidelity: %s\n", r.Fidelity[i].Line())
	}
	if rows := contentionTable(r); len(rows) > 0 {
		b.WriteString("\n== contention ==\n")
		writeText(&b, contentionColumns, rows)
	}
	if rows := repeatTable(r); len(rows) > 0 {
		b.WriteString("\n== repeatability ==\n")
		writeText(&b, repeatColumns, rows)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// column is one column of a cell's comparison table.
type column struct {
	Text  string // terminal header
	MD    string // markdown header
	Right bool   // numbers align right
}

var columns = []column{
	{Text: "policy", MD: "policy"},
	{Text: "epoch s", MD: "epoch s", Right: true},
	{Text: "pred s", MD: "predicted s", Right: true},
	{Text: "bound s", MD: "bound s", Right: true},
	{Text: "meas/pred", MD: "measured/predicted", Right: true},
	{Text: "vs nooff", MD: "speed-up vs nooff", Right: true},
	{Text: "samples/s", MD: "samples/s", Right: true},
	{Text: "wire MB", MD: "MB on the wire", Right: true},
	{Text: "kernel MB", MD: "kernel MB", Right: true},
	{Text: "agent/kpay", MD: "agent/kernel payload", Right: true},
	{Text: "stor CPU s", MD: "storage CPU s", Right: true},
	{Text: "comp CPU s", MD: "compute CPU s", Right: true},
	{Text: "GPU idle %", MD: "GPU idle %", Right: true},
	{Text: "once", MD: "exactly-once"},
	{Text: "content", MD: "content matches"},
	{Text: "rtt ms/flight MB", MD: "RTT ms / TCP in flight MB (mean, peak)", Right: true},
	{Text: "kB/sample", MD: "kB per sample on the wire (agent / kernel payload)", Right: true},
	{Text: "comp ms/sample", MD: "compute CPU ms per sample", Right: true},
	{Text: "notes", MD: "notes"},
}

// none marks a figure a run does not have.
const none = "-"

// cellTable is a cell's rows, one per run, in the order of columns; with
// several pipelines, each pipeline's rows in turn, each compared with its
// own nooff and bound.
func cellTable(c *Cell) [][]string {
	if vs := views(c); len(vs) > 1 {
		var rows [][]string
		for _, v := range vs {
			rows = append(rows, cellTable(v)...)
		}
		return rows
	}
	var base *Epoch
	for i := range c.Runs {
		if run := &c.Runs[i]; run.Policy == "nooff" && charted(run) {
			base = run.Steady()
			break
		}
	}
	rows := make([][]string, 0, len(c.Runs))
	for i := range c.Runs {
		row := runRow(&c.Runs[i], base, cellBound(c))
		if flag := belowNote(c, &c.Runs[i]); flag != "" {
			if row[len(row)-1] != "" {
				flag = row[len(row)-1] + "; " + flag
			}
			row[len(row)-1] = flag
		}
		rows = append(rows, row)
	}
	return rows
}

// runRow is one run's row; base is nooff's steady epoch, or nil, and
// bound the cell's bound (0: none).
func runRow(run *Run, base *Epoch, bound float64) []string {
	row := make([]string, len(columns))
	for i := range row {
		row[i] = none
	}
	row[0] = rowName(run)
	row[len(row)-1] = notes(run)
	e := run.Steady()
	if e == nil {
		return row
	}
	row[1] = f2(e.Seconds)
	if e.PredictedSeconds > 0 {
		row[2] = f2(e.PredictedSeconds)
		row[4] = f2(e.Seconds / e.PredictedSeconds)
	}
	if bound > 0 && !run.Training {
		row[3] = f2(bound)
	}
	if base != nil && e.Seconds > 0 && run.Error == "" && !run.Training {
		row[5] = speedup(base.Seconds, e.Seconds)
	}
	row[6] = strconv.FormatFloat(e.SamplesPerSec(), 'f', 1, 64)
	row[7] = mb(e.AgentBytes)
	if e.KernelBytes > 0 {
		row[8] = mb(e.KernelBytes)
	}
	if e.KernelPayloadBytes > 0 {
		row[9] = strconv.FormatFloat(float64(e.AgentBytes)/float64(e.KernelPayloadBytes), 'f', 3, 64)
	}
	row[10] = f2(e.StorageCPUSeconds)
	row[11] = f2(e.ComputeCPUSeconds)
	row[12] = strconv.FormatFloat(e.GPUIdleFraction*100, 'f', 1, 64)
	row[13] = yesNO(run.ExactlyOnce)
	row[14] = yesNO(run.ContentMatches)
	if e.RTTSeconds > 0 {
		row[15] = fmt.Sprintf("%.1f / %s, %s", 1e3*e.RTTSeconds, mb(e.InFlightMeanBytes), mb(e.InFlightPeakBytes))
	}
	row[16], row[17] = perSample(e)
	switch run.Policy {
	case PeerPolicy:
		row[14] = "n/a" // torchvision draws its own random crops
	case TrainerPolicy:
		row[14] = "n/a" // uint8 slots: their hashes are not the float32 tensors'
	}
	return row
}

// rowName is a run's name in the tables: its policy, the agent's plan
// where the policy does not say it, and its pipeline where the experiment
// ran several ("optimal [imagenet-train-q95]").
func rowName(run *Run) string {
	name := run.Policy
	if run.Plan != "" {
		name += " (" + run.Plan + ")"
	}
	if run.Pipeline != "" {
		name += " [" + run.Pipeline + "]"
	}
	return name
}

// trainingColumns are the columns of a cell's training loop table.
var trainingColumns = []column{
	{Text: "row", MD: "row"},
	{Text: "img/s to loop", MD: "images/s reaching the loop", Right: true},
	{Text: "last epoch img/s", MD: "last epoch images/s", Right: true},
	{Text: "images", MD: "images", Right: true},
	{Text: "steps", MD: "steps", Right: true},
	{Text: "loop s", MD: "loop s", Right: true},
	{Text: "wait s", MD: "loop wait s", Right: true},
	{Text: "first losses", MD: fmt.Sprintf("loss of the first %d steps", FirstLossSteps)},
}

// trainingTable is a cell's training loop rows, one per run that fed a
// real training loop (Run.Training); nil when none did.
func trainingTable(c *Cell) [][]string {
	var rows [][]string
	for i := range c.Runs {
		run := &c.Runs[i]
		if !run.Training {
			continue
		}
		row := []string{rowName(run), none, none, none, none, none, none, none}
		if run.LoopSeconds > 0 {
			row[1] = strconv.FormatFloat(run.LoopImagesPerSec, 'f', 1, 64)
			row[3] = strconv.Itoa(run.LoopImages)
			row[4] = strconv.Itoa(run.LoopSteps)
			row[5] = f2(run.LoopSeconds)
			row[6] = f2(run.LoopWaitSeconds)
		}
		if e := run.Steady(); e != nil && e.Seconds > 0 {
			row[2] = strconv.FormatFloat(e.SamplesPerSec(), 'f', 1, 64)
		}
		if len(run.FirstLosses) > 0 {
			l := make([]string, len(run.FirstLosses))
			for k, v := range run.FirstLosses {
				l[k] = strconv.FormatFloat(v, 'f', 4, 64)
			}
			row[7] = strings.Join(l, " ")
		}
		rows = append(rows, row)
	}
	return rows
}

// notes says why a run has no figures, and what happened in its epochs.
func notes(run *Run) string {
	var n []string
	if run.Skipped != "" {
		n = append(n, "skipped: "+run.Skipped)
	}
	if run.Error != "" {
		n = append(n, "error: "+run.Error)
	}
	var profiled, replanned []string
	for _, e := range run.Epochs {
		if e.Profiled {
			profiled = append(profiled, strconv.Itoa(e.Epoch))
		}
		if e.Replanned {
			replanned = append(replanned, strconv.Itoa(e.Epoch))
		}
	}
	if len(profiled) > 0 {
		n = append(n, "profiled (epoch "+strings.Join(profiled, ",")+")")
	}
	if len(replanned) > 0 {
		n = append(n, "replanned (epoch "+strings.Join(replanned, ",")+")")
	}
	if e := run.Steady(); e != nil && (e.Duplicates > 0 || e.Failed > 0) {
		n = append(n, fmt.Sprintf("last epoch: %d duplicates, %d failed", e.Duplicates, e.Failed))
	}
	return oneLine(n)
}

// oneLine joins notes with "; " on one line, whatever they said.
func oneLine(n []string) string {
	if len(n) == 0 {
		return ""
	}
	// NB: one line per cell, whatever the error said.
	return strings.Join(strings.Fields(strings.Join(n, "; ")), " ")
}

// summary is a cell's one-line verdict: the fastest policy, sophon
// against nooff and optimal against the bound, where present; with several
// pipelines, each one's, then each policy against itself under the first.
func summary(c *Cell) string {
	if vs := views(c); len(vs) > 1 {
		var parts []string
		for _, v := range vs {
			if s := summary(v); s != "" {
				parts = append(parts, v.Pipelines()[0]+": "+s)
			}
		}
		if s := crossSummary(c); s != "" {
			parts = append(parts, s)
		}
		return strings.Join(parts, "; ")
	}
	var parts []string
	var fastest *Run
	steady := map[string]float64{}
	for i := range c.Runs {
		run := &c.Runs[i]
		if !charted(run) || run.Training || run.Steady().Seconds <= 0 {
			continue
		}
		if _, ok := steady[run.Policy]; !ok {
			steady[run.Policy] = run.Steady().Seconds
		}
		if fastest == nil || run.Steady().Seconds < fastest.Steady().Seconds {
			fastest = run
		}
	}
	if fastest != nil {
		parts = append(parts, fmt.Sprintf("fastest %s (%s s)", rowName(fastest), f2(fastest.Steady().Seconds)))
	}
	if s, ok := steady["sophon"]; ok {
		if n, ok := steady["nooff"]; ok {
			parts = append(parts, "sophon vs nooff "+speedup(n, s))
		}
	}
	if o, ok := steady["optimal"]; ok {
		if b := cellBound(c); b > 0 {
			parts = append(parts, fmt.Sprintf("optimal vs bound %+.1f%% (bound %s s)", (o-b)/b*100, f2(b)))
		}
	}
	return strings.Join(parts, "; ")
}

// writeText prints rows under the columns' headers, aligned.
func writeText(b *strings.Builder, columns []column, rows [][]string) {
	head := make([]string, len(columns))
	for i, c := range columns {
		head[i] = c.Text
	}
	all := append([][]string{head}, rows...)
	width := make([]int, len(columns))
	for _, row := range all {
		for i, cell := range row {
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	for _, row := range all {
		var line strings.Builder
		for i, cell := range row {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			if columns[i].Right {
				line.WriteString(pad + cell)
			} else {
				line.WriteString(cell + pad)
			}
		}
		b.WriteString(strings.TrimRight(line.String(), " "))
		b.WriteByte('\n')
	}
}

// writeMarkdownTable prints rows as a markdown table, padded so the
// source reads as a table too.
func writeMarkdownTable(b *strings.Builder, columns []column, rows [][]string) {
	head := make([]string, len(columns))
	for i, c := range columns {
		head[i] = c.MD
	}
	all := append([][]string{head}, rows...)
	for _, row := range all {
		for i := range row {
			row[i] = mdCell(row[i])
		}
	}
	width := make([]int, len(columns))
	for _, row := range all {
		for i, cell := range row {
			width[i] = max(width[i], utf8.RuneCountInString(cell), 3)
		}
	}
	line := func(row []string) {
		b.WriteString("|")
		for i, cell := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			if columns[i].Right {
				b.WriteString(" " + pad + cell + " |")
			} else {
				b.WriteString(" " + cell + pad + " |")
			}
		}
		b.WriteByte('\n')
	}
	line(all[0])
	b.WriteString("|")
	for i, c := range columns {
		if c.Right {
			b.WriteString(" " + strings.Repeat("-", width[i]-1) + ": |")
		} else {
			b.WriteString(" " + strings.Repeat("-", width[i]) + " |")
		}
	}
	b.WriteByte('\n')
	for _, row := range all[1:] {
		line(row)
	}
}

// writeMarkdown writes the whole report.
func writeMarkdown(b *strings.Builder, r *Results, perCell [][]chartFile, sweeps []chartFile) {
	b.WriteString("# Testbed report\n\n")
	m := r.Machine
	fmt.Fprintf(b, "- **Machine:** %s: %s, %d cores, kernel %s, %s\n",
		md(orNone(m.Hostname)), md(orNone(m.CPUModel)), m.Cores, md(orNone(m.Kernel)), md(orNone(m.GoVersion)))
	mode := orNone(r.Mode)
	if r.ModeNote != "" {
		mode += " (" + r.ModeNote + ")"
	}
	fmt.Fprintf(b, "- **Mode:** %s\n", md(mode))
	var rates, cpus []string
	for i := range r.Cells {
		c := &r.Cells[i]
		if s := c.Link(); !slices.Contains(rates, s) {
			rates = append(rates, s)
		}
		if s := cpusString(c.StorageCPUs); !slices.Contains(cpus, s) {
			cpus = append(cpus, s)
		}
	}
	fmt.Fprintf(b, "- **Link rates:** %s\n", md(orNone(strings.Join(rates, ", "))))
	fmt.Fprintf(b, "- **Storage CPU limits:** %s\n", md(orNone(strings.Join(cpus, ", "))))
	fmt.Fprintf(b, "- **Pinning:** %s\n", md(orDefault(m.Pinning, "none")))
	if s := congestionLine(r); s != "" {
		fmt.Fprintf(b, "- **TCP congestion control:** %s\n", md(s))
	}
	if s := topologyLine(r); s != "" {
		fmt.Fprintf(b, "- **Nodes:** %s\n", md(s))
	}
	if s := placementsLine(r); s != "" {
		fmt.Fprintf(b, "- **Placements:** %s\n", md(s))
	}
	if r.Reference != "" {
		fmt.Fprintf(b, "- **Reference:** every run's tensors were compared with the 1 x 1 run's samples in `%s`\n", strings.ReplaceAll(r.Reference, "`", "'"))
	}
	d := r.Dataset
	kind := "a user's folder"
	if d.Kind != "" {
		kind = fmt.Sprintf("generated %s, seed %d", d.Kind, d.Seed)
	}
	fmt.Fprintf(b, "- **Dataset:** `%s` (%s): %d samples, %s, mean %s per sample",
		strings.ReplaceAll(d.Path, "`", "'"), md(kind), d.Samples, size(float64(d.Bytes)), size(d.MeanBytes))
	if d.Fingerprint != "" {
		fmt.Fprintf(b, ", fingerprint %s", md(d.Fingerprint))
	}
	if d.Source != "" {
		fmt.Fprintf(b, "; the storage agents read it from the bucket `%s` (an S3 server on each storage node)", strings.ReplaceAll(d.Source, "`", "'"))
	}
	b.WriteString("\n")
	if len(r.Pipelines) > 1 {
		fmt.Fprintf(b, "- **Pipelines:** %s, side by side: every policy ran once per pipeline in each cell, on the same data "+
			"(each pipeline with its own profile and its own reference tensors)\n", md(strings.Join(r.Pipelines, ", ")))
	} else {
		fmt.Fprintf(b, "- **Pipeline:** %s\n", md(orNone(r.Pipeline)))
	}
	for i := range r.Fidelity {
		fmt.Fprintf(b, "- **Fidelity:** %s\n", md(r.Fidelity[i].Line()))
	}
	fmt.Fprintf(b, "- **GPU:** %s\n", md(orNone(r.GPU)))
	fmt.Fprintf(b, "- **Epochs:** %d per run; the tables and charts show the last (steady-state) one\n", r.Epochs)
	fmt.Fprintf(b, "- **Seed:** %d\n", r.Seed)
	fmt.Fprintf(b, "- **Scale:** %s\n", md(orDefault(r.Scale, "not stated")))
	if r.Repeat > 1 {
		fmt.Fprintf(b, "- **Repeat:** every cell ran %d times, with fresh agents each time\n", r.Repeat)
	}
	switch r.WorkConserving {
	case "off":
		b.WriteString("- **Work-conserving:** off: every compute agent ran with --work-conserving=false\n")
	case "both":
		b.WriteString("- **Work-conserving:** both: each policy but nooff also ran with --work-conserving=false, as <policy>-nowc\n")
	}
	if r.ContendAt > 0 {
		threads := max(r.ContendThreads, 1)
		unit := "threads"
		if threads == 1 {
			unit = "thread"
		}
		fmt.Fprintf(b, "- **Contention:** a CPU hog of %d busy %s in the storage agent's cgroup, started in each policy run "+
			"once floor(%s x %d) = %d epochs were done (so the steady epochs below are contended)\n",
			threads, unit, strconv.FormatFloat(r.ContendAt, 'f', -1, 64), r.Epochs, int(math.Floor(r.ContendAt*float64(r.Epochs))))
	}
	if r.RateSchedule != "" {
		fmt.Fprintf(b, "- **Rate schedule:** %s in every epoch of each policy run after the first (see \"Rate schedule\")\n", md(r.RateSchedule))
	}
	if !r.Started.IsZero() && !r.Finished.IsZero() {
		fmt.Fprintf(b, "- **Ran:** %s to %s (%s)\n", r.Started.UTC().Format(time.RFC3339),
			r.Finished.UTC().Format(time.RFC3339), r.Finished.Sub(r.Started).Round(time.Second))
	}

	b.WriteString("\n## How to read this\n\n")
	b.WriteString("Each section is one cell of the grid (link rate x storage CPU limit) and each row one policy's " +
		"last epoch: *predicted* is the planner's estimate, *bound* the least epoch time the link and the CPUs " +
		"allow, and *speed-up vs nooff* is nooff's epoch time divided by the row's, so above 1.00x is faster. " +
		"*MB on the wire* is what the compute agent received, *kernel MB* what its network interface counted " +
		"(frames and headers included), *agent/kernel payload* the first over the second less 66 bytes of headers per packet " +
		"(the TCP payload; it should be within 2% of 1), " +
		"*kB per sample on the wire* is the same per delivered sample (agent / kernel payload), *compute CPU ms per sample* " +
		"the compute agent's finishing workers' CPU per delivered sample, " +
		"and *exactly-once* and *content matches* must both read yes for a row's time to count. " +
		"With several pipelines each row names its pipeline in brackets and is compared with its own pipeline's nooff, bound " +
		"and reference tensors. *Fidelity* compares a lossy pipeline's delivered tensors with the lossless pipeline's for the " +
		"same seed, epoch and sample, on the 0-255 scale of the decoded crop (Normalize undone). " +
		"In the epoch time charts the black tick on a bar is its prediction and the dashed line the cell's bound. " +
		"The *bound* is one per cell (per pipeline with several), the same for every row: the least epoch time any plan could have under the model, " +
		"over the cell's profile and the cell's own resources (its shaped rate, storage quota and compute cores), " +
		"not those a run's stage 1 measured. A row whose epoch is more than " + strconv.FormatFloat(BoundNoise*100, 'f', -1, 64) +
		"% below it is flagged BELOW BOUND, with the resource its account says the model charged more than the epoch used.\n")

	for i := range r.Cells {
		c := &r.Cells[i]
		fmt.Fprintf(b, "\n## %s\n\n", md(cellLabel(c)))
		if s := summary(c); s != "" {
			fmt.Fprintf(b, "**Summary:** %s.\n\n", md(s))
		}
		if s := cellCPU(c); s != "" {
			fmt.Fprintf(b, "**CPU:** %s.\n\n", md(s))
		}
		if len(c.Runs) == 0 {
			b.WriteString("No runs.\n")
			continue
		}
		writeMarkdownTable(b, columns, cellTable(c))
		if rows := accountTable(c); len(rows) > 0 {
			b.WriteString("\n" + accountNote(c))
			writeMarkdownTable(b, accountColumns, rows)
		}
		if rows := trainingTable(c); len(rows) > 0 {
			fmt.Fprintf(b, "\n**Training loop.** The same small CNN trained by each row's loader, seeded alike, "+
				"on the same files over the same link; its steps replace the simulated GPU, so these rows' epoch times "+
				"include them and are left out of the speed-ups and the charts. *images/s reaching the loop* is the run's "+
				"images over the loop's wall time, every epoch and the loader's start-up (a policy's stage 1 and "+
				"profiling epoch) included; *last epoch images/s* is the steady state (the table's samples/s); "+
				"*loop wait* the time the loop was blocked on its loader. The losses differ between rows because "+
				"their orders and random crops differ.\n\n")
			writeMarkdownTable(b, trainingColumns, rows)
		}
		if rows := nodesTable(c); len(rows) > 0 {
			b.WriteString("\n" + nodesNote(c))
			writeMarkdownTable(b, nodesColumns, rows)
		}
		if rows := jobsTable(c); r.Jobs > 1 && len(rows) > 0 {
			b.WriteString("\n" + jobsNote(r))
			writeMarkdownTable(b, jobsColumns, rows)
		}
		if rows := cacheTable(c); len(rows) > 0 {
			fmt.Fprintf(b, "\nThe compute node's cache (a fresh %s MB cache per run; the steady epoch's hits, misses and refills):\n\n", mb(r.CacheBytes))
			writeMarkdownTable(b, cacheColumns, rows)
		}
		if len(perCell[i]) > 0 {
			b.WriteString("\n")
			for _, ch := range perCell[i] {
				fmt.Fprintf(b, "![%s](%s)\n", mdAlt(ch.Alt), ch.Name)
			}
		}
	}
	if rows := contentionTable(r); len(rows) > 0 {
		b.WriteString("\n## Contention\n\n")
		fmt.Fprintf(b, "From the epoch under way once floor(contend-at x epochs) epochs were done, `testbed hog` spun in the "+
			"storage agent's cgroup, under the same quota, taking *hog cores* of it (its CPU time over its wall time); "+
			"the agent kept *storage cores left*. *Reduced-CPU prediction* is the optimal plan's epoch time for the "+
			"experiment's profile and the run's stage 1 measurements with that many storage cores: the best a re-plan "+
			"could do. *Reference* is the least of it and nooff's steady epoch in the same cell; a run holds when its "+
			"slowest contended epoch is within %.0f%% of the reference (and it ran exactly once, without error). "+
			"*Hog lag* is the time from the end of the last uncontended epoch (as the compute agent reported it, "+
			"after re-planning) to the hog's start, and *hog start into epoch* the hog's start from the first contended "+
			"epoch's (negative: before it).\n\n",
			ContentionTolerance*100)
		writeMarkdownTable(b, contentionColumns, rows)
	}
	writeSchedule(b, r)
	if rows := repeatTable(r); len(rows) > 0 {
		b.WriteString("\n## Repeatability\n\n")
		fmt.Fprintf(b, "Each policy's steady-state epoch over the repetitions of each grid point (in order), their mean, "+
			"and their spread: (max - min) / mean. On optimal's rows, its steady epoch against sophon's in the same "+
			"repetition (+ is slower), flagged where it is more than %.0f%% slower in any repetition.\n\n", SophonTolerance*100)
		writeMarkdownTable(b, repeatColumns, rows)
	}
	if len(sweeps) > 0 {
		b.WriteString("\n## Sweeps\n\n")
		b.WriteString("Steady-state epoch time of each policy across the grid.\n\n")
		for _, ch := range sweeps {
			fmt.Fprintf(b, "![%s](%s)\n", mdAlt(ch.Alt), ch.Name)
		}
	}
}

func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

func mb(n int64) string { return strconv.FormatFloat(float64(n)/1e6, 'f', 1, 64) }

// speedup is how many times faster than base secs is: "2.50x".
func speedup(base, secs float64) string {
	if base <= 0 || secs <= 0 {
		return none
	}
	return f2(base/secs) + "x"
}

func yesNO(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

// size prints a byte count in decimal units.
func size(n float64) string {
	switch {
	case n >= 1e9:
		return strconv.FormatFloat(n/1e9, 'f', 2, 64) + " GB"
	case n >= 1e6:
		return strconv.FormatFloat(n/1e6, 'f', 1, 64) + " MB"
	case n >= 1e3:
		return strconv.FormatFloat(n/1e3, 'f', 1, 64) + " kB"
	}
	return strconv.FormatFloat(n, 'f', 0, 64) + " B"
}

func orNone(s string) string { return orDefault(s, "unknown") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// md escapes text for a markdown line.
func md(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	r := strings.NewReplacer(`\`, `\\`, "*", `\*`, "_", `\_`, "`", "\\`", "<", "&lt;", ">", "&gt;", "[", `\[`, "]", `\]`)
	return r.Replace(s)
}

// mdCell escapes text for a markdown table cell.
func mdCell(s string) string { return strings.ReplaceAll(md(s), "|", `\|`) }

// mdAlt escapes an image's alt text.
func mdAlt(s string) string { return strings.NewReplacer("[", "(", "]", ")").Replace(s) }

// congestionLine says which TCP congestion control the nodes ran with:
// --cc's, or the host's default that the cells recorded; "" when neither
// is known (loopback, files from before).
func congestionLine(r *Results) string {
	if r.CongestionControl != "" {
		return r.CongestionControl + " in both nodes' namespaces (--cc)"
	}
	var seen []string
	for i := range r.Cells {
		if cc := r.Cells[i].CongestionControl; cc != "" && !slices.Contains(seen, cc) {
			seen = append(seen, cc)
		}
	}
	if len(seen) == 0 {
		return ""
	}
	return strings.Join(seen, ", ") + " (the host's default)"
}
