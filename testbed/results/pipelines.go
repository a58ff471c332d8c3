package results

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

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
