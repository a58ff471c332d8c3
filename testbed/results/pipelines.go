package results

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Fidelity is a lossy pipeline's tensors (one with encode_jpeg) against a
// lossless pipeline's for the same (seed, epoch, sample), over the samples
// one of its runs delivered: the testbed recomputes each delivered tensor
// from the dataset with package ops, checks that it hashes to what the
// compute agent delivered, and compares it with the lossless pipeline's.
type Fidelity struct {
	// Pipeline is the lossy pipeline, Reference the lossless one.
	Pipeline  string `json:"pipeline"`
	Reference string `json:"reference"`
	// Run names the run whose delivered samples were compared: its cell
	// and policy.
	Run string `json:"run,omitempty"`
	// Samples is the (epoch, sample) pairs compared; Verified those whose
	// recomputed tensor hashed to the delivered one (all of them, or the
	// figures are not of the delivered tensors); Identical those equal to
	// the reference's (left out of the PSNR mean and minimum, being
	// infinite).
	Samples   int `json:"samples"`
	Verified  int `json:"verified"`
	Identical int `json:"identical,omitempty"`
	// PSNRMeanDB is the mean over the samples of each one's PSNR, and
	// PSNRMinDB the least, in dB, on the 0-255 scale of the decoded crop:
	// Normalize undone, each tensor value times its channel's std times
	// 255; PSNRPooledDB is over every value of every sample together.
	PSNRMeanDB   float64 `json:"psnr_mean_db,omitempty"`
	PSNRMinDB    float64 `json:"psnr_min_db,omitempty"`
	PSNRPooledDB float64 `json:"psnr_pooled_db,omitempty"`
	// MaxAbsError is the largest absolute difference of one tensor value,
	// in the tensors' own (normalized) units; MaxAbsLevels the same on the
	// 0-255 scale.
	MaxAbsError  float64 `json:"max_abs_error"`
	MaxAbsLevels float64 `json:"max_abs_levels"`
	// Seconds is the comparison's wall time.
	Seconds float64 `json:"seconds,omitempty"`
	// Error is why the figures are missing or partial.
	Error string `json:"error,omitempty"`
}

// Line is f as one line for people.
func (f *Fidelity) Line() string {
	s := fmt.Sprintf("%s against %s", f.Pipeline, f.Reference)
	if f.Samples > 0 {
		s += fmt.Sprintf(": PSNR mean %.2f dB, min %.2f dB, pooled %.2f dB; max abs error %.4f (%.1f levels of 255); over %d delivered samples, %d of them verified by hash",
			f.PSNRMeanDB, f.PSNRMinDB, f.PSNRPooledDB, f.MaxAbsError, f.MaxAbsLevels, f.Samples, f.Verified)
		if f.Identical > 0 {
			s += fmt.Sprintf(", %d identical", f.Identical)
		}
		if f.Run != "" {
			s += " (" + f.Run + ")"
		}
	}
	if f.Error != "" {
		s += "; error: " + f.Error
	}
	return s
}

// Pipelines are the pipelines c's runs name (Run.Pipeline), in order of
// their first run; nil when none names one (an experiment of one).
func (c *Cell) Pipelines() []string {
	var out []string
	for i := range c.Runs {
		if p := c.Runs[i].Pipeline; p != "" && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// View is c with pipeline p's runs only, and p's bound as its Bound: the
// runs the tables compare with each other (nooff's speed-ups, the bound).
// The rows that name no pipeline (the peer, the trainer) run the first
// pipeline and belong to its view.
func (c *Cell) View(p string) *Cell {
	v := *c
	v.Runs = nil
	first := ""
	if ps := c.Pipelines(); len(ps) > 0 {
		first = ps[0]
	}
	for _, run := range c.Runs {
		if run.Pipeline == p || run.Pipeline == "" && p == first {
			v.Runs = append(v.Runs, run)
		}
	}
	for _, b := range c.PipelineBounds {
		if b != nil && b.Pipeline == p {
			v.Bound = b
		}
	}
	v.PipelineBounds = nil
	return &v
}

// views are c's per-pipeline views, or c itself with one pipeline.
func views(c *Cell) []*Cell {
	ps := c.Pipelines()
	if len(ps) <= 1 {
		return []*Cell{c}
	}
	out := make([]*Cell, len(ps))
	for i, p := range ps {
		out[i] = c.View(p)
	}
	return out
}

// perSample is "agent / kernel payload" kB per delivered sample of e, and
// the compute agent's CPU ms per sample.
func perSample(e *Epoch) (wire, cpu string) {
	if e.Samples <= 0 {
		return none, none
	}
	n := float64(e.Samples)
	wire = strconv.FormatFloat(float64(e.AgentBytes)/n/1e3, 'f', 1, 64)
	if e.KernelPayloadBytes > 0 {
		wire += " / " + strconv.FormatFloat(float64(e.KernelPayloadBytes)/n/1e3, 'f', 1, 64)
	}
	if e.ComputeCPUSeconds > 0 {
		cpu = strconv.FormatFloat(e.ComputeCPUSeconds/n*1e3, 'f', 2, 64)
	} else {
		cpu = none
	}
	return wire, cpu
}

// crossSummary compares each policy of c's later pipelines with the same
// policy of its first ("optimal [imagenet-train-q95] vs [imagenet-train]
// 1.80x"); "" with one pipeline.
func crossSummary(c *Cell) string {
	vs := views(c)
	if len(vs) <= 1 {
		return ""
	}
	first := steadyByPolicy(vs[0])
	firstName := c.Pipelines()[0]
	var parts []string
	for _, v := range vs[1:] {
		name := v.Pipelines()[0]
		for _, run := range v.Runs {
			if !chartable(&run) || run.Error != "" {
				continue
			}
			if base, ok := first[run.Policy]; ok && run.Steady().Seconds > 0 {
				parts = append(parts, fmt.Sprintf("%s [%s] vs [%s] %s", run.Policy, name, firstName, speedup(base, run.Steady().Seconds)))
			}
		}
	}
	return strings.Join(parts, "; ")
}

// steadyByPolicy is each policy's steady epoch seconds in c (its first
// chartable run's).
func steadyByPolicy(c *Cell) map[string]float64 {
	out := map[string]float64{}
	for i := range c.Runs {
		run := &c.Runs[i]
		if !chartable(run) || run.Error != "" || run.Steady().Seconds <= 0 {
			continue
		}
		if _, ok := out[run.Policy]; !ok {
			out[run.Policy] = run.Steady().Seconds
		}
	}
	return out
}
