package planner

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/profiler/estimate"
)

// CalibrationSamples is how many of stage 1's raw samples (stage1.Result.Raws)
// calibrate the estimate: each runs through a profiler.Recorder (every op,
// every split's compression, the cut) before the first epoch starts.
const CalibrationSamples = 16

// CalibrationWindow is how many of the shard's first positions the first
// epoch's calibration samples are chosen from (CalibrationSet).
const CalibrationWindow = 2 * CalibrationSamples

// CalibrationSet is a first epoch's calibration samples when it plans from
// estimates: the CalibrationSamples smallest files (rawSizes by sample)
// among the shard's first CalibrationWindow positions that usable accepts
// (nil: every one), ties in shard order. They cross the link raw while the
// provisional plan cuts every other sample, so their bytes are most of
// what that epoch sends beyond a planned one, and the smaller half of a
// random window costs about half of what its first positions would
// (docs/policy.md, "Plans from estimates"). usable (Calibratable) leaves out what cannot calibrate: a file
// whose header the limits refuse would be the smallest of all (a
// 700-byte header bomb) and never arrive, and the plan would wait for it.
func CalibrationSet(shard, rawSizes []uint64, usable func(sample uint64) bool) map[uint64]bool {
	var w []uint64
	for _, s := range shard {
		if len(w) == CalibrationWindow {
			break
		}
		if usable == nil || usable(s) {
			w = append(w, s)
		}
	}
	slices.SortStableFunc(w, func(a, b uint64) int { return cmp.Compare(rawSizes[a], rawSizes[b]) })
	set := map[uint64]bool{}
	for _, s := range w[:min(len(w), CalibrationSamples)] {
		set[s] = true
	}
	return set
}

// Cheapest orders the provisional plan's requests of epoch num: by the
// bytes of each sample's file (rawSizes) in the region its cut keeps (the
// catalog's headers give the region: areas), smallest first, so that the
// samples any plan would cut (small boxes) go out while the plan is made
// and those a plan treats otherwise wait for it; a sample of unknown
// header by its file's bytes. The calibration samples (raw, calib) go
// first, in shard order. Nil where the pipeline cannot cut (areas nil).
func Cheapest(areas *profiler.CutAreas, rawSizes []uint64, num uint64, calib map[uint64]bool) func(uint64) float64 {
	if areas == nil {
		return nil
	}
	return func(s uint64) float64 {
		if calib[s] {
			return 0
		}
		raw := float64(rawSizes[s])
		if share, ok := areas.Shown(s, num); ok {
			return raw * share
		}
		return raw
	}
}

// Calibratable reports whether a sample can calibrate an estimate for p:
// its catalog header (header) is known and lim does not refuse it
// (ops.Pipeline.CheckHeader).
func Calibratable(p *ops.Pipeline, header func(sample uint64) (jpeg.Summary, bool), lim ops.Limits) func(sample uint64) bool {
	return func(s uint64) bool {
		h, ok := header(s)
		return ok && h.Known() && p.CheckHeader(s, h.Header(), lim) == nil
	}
}

// EstimateInput is what a plan from header estimates needs.
type EstimateInput struct {
	Pipeline    *ops.Pipeline
	Seed, Epoch uint64
	Fingerprint string
	// Shard is the samples to estimate; RawSizes the catalog's raw sizes
	// by sample and Header its header summaries (catalog.Catalog.Header).
	Shard    []uint64
	RawSizes []uint64
	Header   func(sample uint64) (jpeg.Summary, bool)
	// Raws is the calibration candidates' files by sample (stage 1's).
	Raws map[uint64][]byte
	// Limits and OpTimeout are the agents' limits (oplimits.Settings):
	// the calibration runs under them, and a sample whose header they
	// refuse is not priced.
	Limits    ops.Limits
	OpTimeout time.Duration
}

// Omitted counts the shard's samples an estimate leaves out of its
// profile; a plan gives them k = 0.
type Omitted struct {
	// Unknown have no known header in the catalog.
	Unknown int
	// Refused have a header the limits refuse (estimate.Model.Admit):
	// every run of them fails before decoding, whatever a storage agent's
	// catalog claims of their cost. First is the first one's error.
	Refused int
	First   error
}

// Estimate is the profile of the shard's samples estimated from their
// headers (profiler/estimate), calibrated on up to CalibrationSamples of
// in.Raws spread over their image sizes (estimate.Pick), under in.Limits.
// Samples without a known header, or whose header the limits refuse, are
// left out (a plan gives them k = 0) and counted in omitted.
func Estimate(in EstimateInput) (prof *profiler.Profile, omitted Omitted, err error) {
	var samples []estimate.Sample
	for _, id := range in.Shard {
		h, ok := in.Header(id)
		s, known := estimate.FromSummary(id, int64(in.RawSizes[id]), h)
		if !ok || !known {
			omitted.Unknown++
			continue
		}
		samples = append(samples, s)
	}
	if len(samples) == 0 {
		return nil, omitted, fmt.Errorf("planner: estimate: no sample of the shard has a known header (%d unknown)", omitted.Unknown)
	}
	var cands []estimate.Sample
	usable := Calibratable(in.Pipeline, in.Header, in.Limits)
	for _, id := range slices.Sorted(maps.Keys(in.Raws)) {
		h, _ := in.Header(id)
		if s, known := estimate.FromSummary(id, int64(len(in.Raws[id])), h); known && usable(id) && uint64(s.Raw) == in.RawSizes[id] {
			cands = append(cands, s)
		}
	}
	var cal []estimate.Calibrated
	for _, i := range estimate.Pick(cands, CalibrationSamples) {
		cal = append(cal, estimate.Calibrated{Sample: cands[i], Data: in.Raws[cands[i].ID]})
	}
	m, err := estimate.Calibrate(in.Pipeline, in.Seed, in.Epoch, cal, in.Limits, in.OpTimeout)
	if err != nil {
		return nil, omitted, fmt.Errorf("planner: estimate: %w", err)
	}
	samples, refused := m.Admit(samples)
	if omitted.Refused = len(refused); len(refused) > 0 {
		omitted.First = refused[0]
	}
	prof, err = m.Profile(in.Fingerprint, samples)
	if err != nil {
		return nil, omitted, fmt.Errorf("planner: estimate: %w", err)
	}
	return prof, omitted, nil
}
