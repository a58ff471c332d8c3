package results

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// Prediction is a compute agent's plan's prediction of an epoch per
// resource, and the resources its model assumed (report.Prediction, the
// agent's report's "prediction").
type Prediction = report.Prediction

// BoundNoise is how far below the cell's bound a measured epoch may be
// before the report flags it: 3%. The bound holds for every run however
// its epoch varies; what it leaves to chance is small (the sizes that
// vary by epoch at their expectation, the epoch's clock missing part of
// the link's ramp), so a row further below is a resource the model
// charged more than the epoch used (docs/policy.md, "The cell's bound").
const BoundNoise = 0.03

// CellBound is a cell's one lower bound on any plan's epoch: policy.Bound
// over one profile and the cell's own resources (not those a policy run's
// stage 1 measured), computed by the testbed once the cell's runs are done.
type CellBound struct {
	// Seconds is the bound; 0 when there is none (Error says why).
	Seconds float64 `json:"seconds,omitempty"`
	// LinkBytesPerSec is the payload rate of the cell's link
	// (Cell.PayloadBytesPerSec): the shaped rate less the headers that
	// every segment carries and tbf charges.
	LinkBytesPerSec float64 `json:"link_bytes_per_sec"`
	// StorageCores is the storage agents' quota (StorageCPUs per storage
	// node, summed).
	StorageCores float64 `json:"storage_cores"`
	// ComputeCores is the compute cores the compute agent's model is told
	// (its --workers, or the CPUs it sees).
	ComputeCores float64 `json:"compute_cores"`
	// GPUSamplesPerSec is the simulated GPU's rate.
	GPUSamplesPerSec float64 `json:"gpu_samples_per_sec,omitempty"`
	// StorageSpeed is the storage speed the bound prices the storage CPU
	// at: the fastest any of the cell's runs planned its steady epoch
	// with, and at least 1 (cellbound.StorageSpeed).
	StorageSpeed float64 `json:"storage_speed"`
	// Profile is the profile file the bound is over: the cell's, which
	// every policy run of the cell planned from; Samples its samples.
	Profile string `json:"profile,omitempty"`
	Samples int    `json:"samples,omitempty"`
	// Epoch is the epoch whose crop boxes the profile's cuts were scaled
	// to (the cell's steady epoch, profiler.CutAreas); absent when the cuts
	// are at their mean boxes (no headers, or no cut in the pipeline).
	Epoch *uint64 `json:"epoch,omitempty"`
	// Binding lists the resources the bound's dual weighs, heaviest
	// first.
	Binding []string `json:"binding,omitempty"`
	// Error is why there is no bound.
	Error string `json:"error,omitempty"`
	// Pipeline names the bound's pipeline in Cell.PipelineBounds.
	Pipeline string `json:"pipeline,omitempty"`
}

// Account is one epoch's use of each resource, as the plan predicted it
// (Epoch.Prediction) and as the epoch measured it, each as the resource's
// time: the quantity over the resource's capacity.
type Account struct {
	// PredBytes is the plan's payload; MeasBytes the kernel's TCP payload
	// (KernelPayloadBytes), or the agent's bytes where there is no kernel
	// count.
	PredBytes, MeasBytes float64
	// PredLink is the plan's link time (its bytes over the rate it
	// assumed); MeasLink MeasBytes over the cell's shaped rate.
	PredLink, MeasLink float64
	// PredStorageCPU is the plan's storage CPU-s, ops and transport;
	// MeasStorageCPU the ops' CPU the responses reported plus the
	// transport's the agent measured (StorageNSPerByte x AgentBytes).
	PredStorageCPU, MeasStorageCPU float64
	// PredStorage is the plan's storage time (its CPU-s over the cores it
	// assumed); MeasStorage MeasStorageCPU over the cell's storage cores.
	PredStorage, MeasStorage float64
	// PredComputeCPU is the plan's compute CPU-s: the finishing ops and
	// the CPU beyond them per sample it assumed; MeasComputeCPU the
	// compute agents' process CPU (ComputeProcessCPUSeconds), or their
	// finishing workers' CPU where they report no process CPU.
	PredComputeCPU, MeasComputeCPU float64
	// PredCompute is the plan's compute time (its compute CPU over the
	// cores it assumed); MeasCompute MeasComputeCPU over the cell's
	// compute cores (CellBound.ComputeCores, else the cores the plan
	// assumed).
	PredCompute, MeasCompute float64
}

// Resource names in an account, as Account.Under names them.
const (
	ResourceLink       = "link"
	ResourceStorageCPU = "storage CPU"
	ResourceComputeCPU = "compute CPU"
)

// AccountOf is e's account in cell c; ok false when e has no prediction.
func AccountOf(c *Cell, e *Epoch) (a Account, ok bool) {
	p := e.Prediction
	if p == nil {
		return a, false
	}
	a.PredBytes, a.PredLink = p.Bytes, p.LinkSeconds
	a.PredStorageCPU, a.PredStorage = p.StorageCPUSeconds, p.StorageSeconds
	a.PredComputeCPU, a.PredCompute = p.ComputeCPUSeconds, p.ComputeSeconds
	a.MeasBytes = float64(e.AgentBytes)
	if e.KernelPayloadBytes > 0 {
		a.MeasBytes = float64(e.KernelPayloadBytes)
	}
	if c.RateBitsPerSec > 0 {
		a.MeasLink = a.MeasBytes / c.PayloadBytesPerSec()
	}
	a.MeasStorageCPU = e.StorageCPUSeconds + e.StorageNSPerByte*float64(e.AgentBytes)/1e9
	if cores := c.storageCores(p.StorageCores); cores > 0 {
		a.MeasStorage = a.MeasStorageCPU / cores
	}
	a.MeasComputeCPU = max(e.ComputeProcessCPUSeconds, e.ComputeCPUSeconds)
	cores := p.ComputeCores
	if c.Bound != nil && c.Bound.ComputeCores > 0 {
		cores = c.Bound.ComputeCores
	}
	if cores > 0 {
		a.MeasCompute = a.MeasComputeCPU / cores
	}
	return a, true
}

// storageCores is the cell's storage quota, every storage node's
// together; assumed (the plan's) where the cell has none.
func (c *Cell) storageCores(assumed float64) float64 {
	if c.StorageCPUs <= 0 {
		return assumed
	}
	return c.StorageCPUs * float64(max(len(c.StorageRates), 1))
}

// Under names the resource whose measured time fell furthest below the
// plan's, when one fell below it by more than BoundNoise, with its
// measured/predicted ratio; "" when none did.
func (a Account) Under() (resource string, ratio float64) {
	ratio = 1 - BoundNoise
	for _, r := range []struct {
		name       string
		pred, meas float64
	}{
		{ResourceLink, a.PredLink, a.MeasLink},
		{ResourceStorageCPU, a.PredStorage, a.MeasStorage},
		{ResourceComputeCPU, a.PredCompute, a.MeasCompute},
	} {
		if r.pred > 0 && r.meas/r.pred < ratio {
			resource, ratio = r.name, r.meas/r.pred
		}
	}
	if resource == "" {
		return "", 0
	}
	return resource, ratio
}

// BoundSeconds is the cell's one bound (Cell.Bound), or 0 when it has
// none. A file from before the cell bound has the agents' own instead:
// then the optimal run's steady one, or else the least of the policy
// runs' steady ones.
func (c *Cell) BoundSeconds() float64 {
	if c.Bound != nil {
		return c.Bound.Seconds
	}
	b := 0.0
	for i := range c.Runs {
		run := &c.Runs[i]
		if !chartable(run) || run.Policy == PeerPolicy {
			continue
		}
		s := run.Steady().AgentBoundSeconds
		if run.Policy == "optimal" && s > 0 {
			return s
		}
		if s > 0 && (b == 0 || s < b) {
			b = s
		}
	}
	return b
}

// BelowBound reports by how much e's measured time is below the cell's
// bound (a share of the bound) when it is more than BoundNoise below it.
func (c *Cell) BelowBound(e *Epoch) (by float64, below bool) {
	b := c.BoundSeconds()
	if b <= 0 || e.Seconds <= 0 {
		return 0, false
	}
	by = (b - e.Seconds) / b
	return by, by > BoundNoise
}

// accountColumns are the columns of a cell's per-resource account: each
// resource's time as predicted / measured.
var accountColumns = []column{
	{Text: "policy", MD: "policy"},
	{Text: "pred bneck", MD: "predicted bottleneck"},
	{Text: "MB p/m", MD: "payload MB pred / meas", Right: true},
	{Text: "link s p/m", MD: "link s pred / meas", Right: true},
	{Text: "stor CPU-s p/m", MD: "storage CPU-s pred / meas", Right: true},
	{Text: "stor s p/m", MD: "storage s pred / meas", Right: true},
	{Text: "comp CPU-s p/m", MD: "compute CPU-s pred / meas", Right: true},
	{Text: "comp s p/m", MD: "compute s pred / meas", Right: true},
	{Text: "raw offl p/m", MD: "offloads sent raw pred / meas", Right: true},
	{Text: "assumed", MD: "model assumed"},
	{Text: "vs cell bound", MD: "vs cell bound"},
}

// accountTable is a cell's per-resource account, one row per run whose
// steady epoch has a prediction; nil when none has.
func accountTable(c *Cell) [][]string {
	if vs := views(c); len(vs) > 1 { // each against its own pipeline's bound
		var rows [][]string
		for _, v := range vs {
			rows = append(rows, accountTable(v)...)
		}
		return rows
	}
	var rows [][]string
	for i := range c.Runs {
		run := &c.Runs[i]
		e := run.Steady()
		if e == nil {
			continue
		}
		a, ok := AccountOf(c, e)
		if !ok {
			continue
		}
		p := e.Prediction
		rows = append(rows, []string{
			rowName(run), orDefault(p.Bottleneck, none),
			pm(a.PredBytes/1e6, a.MeasBytes/1e6, 1), pm(a.PredLink, a.MeasLink, 2),
			pm(a.PredStorageCPU, a.MeasStorageCPU, 2), pm(a.PredStorage, a.MeasStorage, 2),
			pm(a.PredComputeCPU, a.MeasComputeCPU, 2), pm(a.PredCompute, a.MeasCompute, 2),
			rawOffloads(p, e), assumed(p), boundNote(c, e, a),
		})
	}
	return rows
}

// pm is "pred / meas" at prec decimals.
func pm(pred, meas float64, prec int) string {
	return strconv.FormatFloat(pred, 'f', prec, 64) + " / " + strconv.FormatFloat(meas, 'f', prec, 64)
}

// rawOffloads is "pred / meas" of the plan's offloads that went raw: the
// prediction's shed cut against what the epoch's compute agents shed and
// its storage agents answered raw for lack of CPU ("shed + contended"
// when both happened).
func rawOffloads(p *Prediction, e *Epoch) string {
	meas := strconv.Itoa(e.Shed + e.Contended)
	if e.Shed > 0 && e.Contended > 0 {
		meas = fmt.Sprintf("%d (%d + %d)", e.Shed+e.Contended, e.Shed, e.Contended)
	}
	return strconv.Itoa(p.Shed) + " / " + meas
}

// assumed is the resources the plan assumed, in brief.
func assumed(p *Prediction) string {
	speed := p.StorageSpeed
	if speed <= 0 {
		speed = 1
	}
	s := fmt.Sprintf("%.2f MB/s, %s+%s cores, speed %.2f", p.LinkBytesPerSec/1e6,
		cpusString(p.StorageCores), cpusString(p.ComputeCores), speed)
	if p.ComputeNSPerSample > 0 {
		s += fmt.Sprintf(", %.2f ms a sample beyond the compute ops", p.ComputeNSPerSample/1e6)
	}
	return s
}

// boundNote is e against the cell's bound: how far above it, or the flag
// when it is below by more than BoundNoise, naming the resource the
// account says the model over-charged.
func boundNote(c *Cell, e *Epoch, a Account) string {
	b := c.BoundSeconds()
	if b <= 0 {
		return none
	}
	by, below := c.BelowBound(e)
	if !below {
		return fmt.Sprintf("%+.1f%%", -by*100)
	}
	s := fmt.Sprintf("BELOW BOUND by %.1f%%", by*100)
	if r, ratio := a.Under(); r != "" {
		return s + fmt.Sprintf(": %s measured %.2fx the model's", r, ratio)
	}
	return s + ": no resource measured below the model's (the cell's resources are off)"
}

// belowNote is the main table's flag for a run whose steady epoch is
// below the cell's bound by more than BoundNoise ("" otherwise).
func belowNote(c *Cell, run *Run) string {
	e := run.Steady()
	if e == nil || run.Training || run.Policy == PeerPolicy {
		return ""
	}
	by, below := c.BelowBound(e)
	if !below {
		return ""
	}
	s := fmt.Sprintf("BELOW BOUND by %.1f%%", by*100)
	if a, ok := AccountOf(c, e); ok {
		if r, _ := a.Under(); r != "" {
			s += " (" + r + " below the model's)"
		}
	}
	return s
}

// accountNote introduces a cell's account table in the report.
func accountNote(c *Cell) string {
	s := "Per-resource account of each row's steady epoch: each resource's time as the plan predicted it " +
		"(its quantity over the resource the model assumed) / as measured (payload: the kernel's TCP payload, " +
		"or the agent's bytes without a kernel count, over the shaped rate; storage: the ops' CPU the responses " +
		"reported plus the transport's the agent measured, over the cell's storage cores; compute: the compute agent's " +
		"process CPU, every thread, or its finishing workers' CPU where it reports no process CPU, over the cell's " +
		"compute cores; the model's compute CPU holds what earlier epochs measured beyond the ops per sample). *Offloads sent raw* is work-conserving offload's departure " +
		"from the plan: the offloads the prediction's shed cut sends raw / those the epoch sent raw, shed by the " +
		"compute agent plus answered raw by a storage agent whose CPU could not finish them in time " +
		"(shed + contended); a measured count above the predicted one is an epoch whose storage side fell behind " +
		"the plan. *Model assumed* is the link rate, storage + compute cores and storage speed the plan was made with."
	if b := c.Bound; b != nil {
		if b.Seconds > 0 {
			s += fmt.Sprintf(" The cell's bound, %s s, is over `%s` (%d samples) at %.2f MB/s, %s + %s cores",
				f2(b.Seconds), strings.ReplaceAll(filepath.Base(b.Profile), "`", "'"), b.Samples, b.LinkBytesPerSec/1e6,
				cpusString(b.StorageCores), cpusString(b.ComputeCores))
			if b.Epoch != nil {
				s += fmt.Sprintf(", its cuts at epoch %d's crop boxes", *b.Epoch)
			}
			s += "."
		} else if b.Error != "" {
			s += " The cell has no bound: " + md(b.Error) + "."
		}
	}
	return s + "\n\n"
}
