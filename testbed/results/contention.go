package results

import (
	"fmt"
	"strconv"
)

// ContentionTolerance is how far above its reference a contended epoch may
// be and still count as holding: the target is the reference x 1.10.
const ContentionTolerance = 0.10

// Contention is a run's CPU hog (`testbed run --contend-at`): `testbed
// hog` spinning in the storage agent's cgroup, under its quota, from an
// epoch on, and how the contended epochs fared against what a re-plan at
// the storage CPU left could do.
type Contention struct {
	// AfterEpochs is floor(contend-at x epochs): the epochs the compute
	// agent had reported when the hog started spinning. FromEpoch is the
	// first contended epoch, as the report numbers epochs: the one under
	// way then. LagSeconds is the time from the end of the last
	// uncontended epoch (its end_unix_ns) to the hog's start (0 when
	// AfterEpochs is 0: the hog started with the run). NB: the compute
	// agent writes an epoch's report line after re-planning for the next,
	// which waits for it, so a slow re-plan shows here; IntoEpochSeconds
	// is the hog's start from the start of epoch FromEpoch (start_unix_ns;
	// negative when it spun before that epoch began), how much of the
	// first contended epoch ran uncontended.
	AfterEpochs      int     `json:"after_epochs"`
	FromEpoch        int     `json:"from_epoch"`
	LagSeconds       float64 `json:"lag_seconds"`
	IntoEpochSeconds float64 `json:"into_epoch_seconds"`
	// Threads is the hog's busy threads (--contend-threads).
	Threads int `json:"threads"`
	// HogCPUSeconds is the hog's user and system CPU time while it spun
	// (its rusage at exit less its start-up's, read from /proc when it
	// started spinning) over HogSeconds, the wall time from its start
	// spinning to its stop when the compute agent exited; HogCores is their
	// ratio: the cores the hog took from the storage agent's quota.
	HogCPUSeconds float64 `json:"hog_cpu_seconds"`
	HogSeconds    float64 `json:"hog_seconds"`
	HogCores      float64 `json:"hog_cores"`
	// StorageCoresLeft is the cell's storage CPUs less HogCores: the
	// storage agent's share while contended.
	StorageCoresLeft float64 `json:"storage_cores_left"`
	// PredictedSeconds is the reduced-CPU prediction: the run's policy's
	// epoch time for the experiment's profile and the run's stage 1
	// resources with StorageCoresLeft storage cores, what its re-plan
	// predicts at the reduced CPU. 0 when it could not be made;
	// PredictionError then says why.
	PredictedSeconds float64 `json:"predicted_seconds,omitempty"`
	PredictionError  string  `json:"prediction_error,omitempty"`

	// Set by ScoreContention once the cell's runs are done.
	//
	// NoOffSeconds is nooff's steady-state epoch in the same cell (and
	// repetition); 0 when nooff did not run or failed. ReferenceSeconds
	// is the least of it and PredictedSeconds (of those known), and the
	// target is ReferenceSeconds x (1 + ContentionTolerance). WorstEpoch
	// and WorstSeconds are the slowest contended epoch (from FromEpoch
	// on); Ratio is WorstSeconds / ReferenceSeconds, and Holds is true
	// when it is within the target and the run did not fail and delivered
	// every sample exactly once.
	NoOffSeconds     float64 `json:"nooff_seconds,omitempty"`
	ReferenceSeconds float64 `json:"reference_seconds,omitempty"`
	WorstEpoch       int     `json:"worst_epoch,omitempty"`
	WorstSeconds     float64 `json:"worst_seconds,omitempty"`
	Ratio            float64 `json:"ratio,omitempty"`
	Holds            bool    `json:"holds"`
}

// ScoreContention sets the scored fields of the Contention of every run of
// c that has one, from nooff's steady epoch in c and the run's prediction
// and epochs. Calling it again gives the same values.
func ScoreContention(c *Cell) {
	var nooff float64
	for i := range c.Runs {
		if run := &c.Runs[i]; run.Policy == "nooff" && chartable(run) {
			nooff = run.Steady().Seconds
			break
		}
	}
	for i := range c.Runs {
		run := &c.Runs[i]
		k := run.Contention
		if k == nil {
			continue
		}
		k.NoOffSeconds, k.ReferenceSeconds = nooff, 0
		for _, v := range []float64{nooff, k.PredictedSeconds} {
			if v > 0 && (k.ReferenceSeconds == 0 || v < k.ReferenceSeconds) {
				k.ReferenceSeconds = v
			}
		}
		k.WorstEpoch, k.WorstSeconds, k.Ratio, k.Holds = 0, 0, 0, false
		for _, e := range run.Epochs {
			if e.Epoch >= k.FromEpoch && e.Seconds > k.WorstSeconds {
				k.WorstEpoch, k.WorstSeconds = e.Epoch, e.Seconds
			}
		}
		if k.WorstSeconds > 0 && k.ReferenceSeconds > 0 {
			k.Ratio = k.WorstSeconds / k.ReferenceSeconds
			// NB: a ratio printed as 1.10 holds; float noise must not fail it.
			k.Holds = k.Ratio <= 1+ContentionTolerance+1e-9 && run.Error == "" && run.ExactlyOnce
		}
	}
}

// contentionColumns are the columns of the Contention table.
var contentionColumns = []column{
	{Text: "cell", MD: "cell"},
	{Text: "policy", MD: "policy"},
	{Text: "from epoch", MD: "contended from epoch", Right: true},
	{Text: "lag s", MD: "hog lag s", Right: true},
	{Text: "into s", MD: "hog start into epoch s", Right: true},
	{Text: "hog cores", MD: "hog cores", Right: true},
	{Text: "left cores", MD: "storage cores left", Right: true},
	{Text: "reduced pred s", MD: "reduced-CPU prediction s", Right: true},
	{Text: "nooff s", MD: "nooff steady s", Right: true},
	{Text: "ref s", MD: "reference s", Right: true},
	{Text: "worst s", MD: "worst contended epoch s", Right: true},
	{Text: "ratio", MD: "worst/reference", Right: true},
	{Text: "within 10%", MD: "within 10%"},
	{Text: "notes", MD: "notes"},
}

// contentionTable is a row per run that had a hog, in cell order; nil
// when none did.
func contentionTable(r *Results) [][]string {
	var rows [][]string
	for i := range r.Cells {
		c := &r.Cells[i]
		for j := range c.Runs {
			run := &c.Runs[j]
			k := run.Contention
			if k == nil {
				continue
			}
			row := []string{cellLabel(c), rowName(run), strconv.Itoa(k.FromEpoch), f2(k.LagSeconds), f2(k.IntoEpochSeconds),
				f2(k.HogCores), f2(k.StorageCoresLeft), none, none, none, none, none, yesNO(k.Holds), ""}
			if k.PredictedSeconds > 0 {
				row[7] = f2(k.PredictedSeconds)
			}
			if k.NoOffSeconds > 0 {
				row[8] = f2(k.NoOffSeconds)
			}
			if k.ReferenceSeconds > 0 {
				row[9] = f2(k.ReferenceSeconds)
			}
			if k.WorstSeconds > 0 {
				row[10] = fmt.Sprintf("%s (epoch %d)", f2(k.WorstSeconds), k.WorstEpoch)
			}
			if k.Ratio > 0 {
				row[11] = f2(k.Ratio)
			}
			var notes []string
			if k.PredictionError != "" {
				notes = append(notes, "no prediction: "+k.PredictionError)
			}
			if run.Error != "" {
				notes = append(notes, "error: "+run.Error)
			}
			row[13] = oneLine(notes)
			rows = append(rows, row)
		}
	}
	return rows
}
