package policy

import (
	"math"
	"slices"
	"strings"

	"github.com/sophon-dl/sophon/profiler"
)

// Policy names, as reported in Plan.Policy.
const (
	NameNoOff     = "nooff"
	NameAllOff    = "alloff"
	NameResizeOff = "resizeoff"
	NameFastFlow  = "fastflow"
	NameSOPHON    = "sophon"
	NameOptimal   = "optimal"
)

// uniform is the plan that splits every sample at k in [0, n],
// uncompressed (never SplitCut).
func uniform(m *model, name string, k int, r Resources) Plan {
	ch := make([]int32, len(m.p.Samples))
	o := int32(m.option(min(max(k, 0), m.n), false))
	for i := range ch {
		ch[i] = o
	}
	return m.plan(name, ch, r)
}

// NoOff runs the whole pipeline on the compute node: every sample crosses
// the link raw.
func NoOff(p *profiler.Profile, r Resources) Plan {
	return uniform(newModel(p, r, false), NameNoOff, 0, r)
}

// AllOff runs the whole pipeline on storage.
func AllOff(p *profiler.Profile, r Resources) Plan {
	m := newModel(p, r, false)
	return uniform(m, NameAllOff, m.n, r)
}

// ResizeOff runs ops [0:k] on storage for every sample; k is normally
// CropSplit(p).
func ResizeOff(p *profiler.Profile, r Resources, k int) Plan {
	return uniform(newModel(p, r, false), NameResizeOff, k, r)
}

// resizeOps are the crop ops ResizeSplit looks for.
var resizeOps = []string{"random_resized_crop", "decode_random_resized_crop", "center_crop"}

// ResizeSplit returns the split just after the first crop op in ops
// (random_resized_crop, decode_random_resized_crop or center_crop; a name
// matches when it equals one or starts with one followed by a non-letter,
// e.g. "center_crop(224)"), or -1 when there is none.
func ResizeSplit(ops []string) int {
	for i, name := range ops {
		for _, c := range resizeOps {
			if name == c || (strings.HasPrefix(name, c) && !isWordByte(name[len(c)])) {
				return i + 1
			}
		}
	}
	return -1
}

// CropSplit is profile p's crop split: the one the profile records
// (profiler.Profile.CropSplit, from the pipeline itself), else, for a
// profile that predates the field, ResizeSplit of its op names; -1 when
// there is none.
func CropSplit(p *profiler.Profile) int {
	if p.CropSplit > 0 {
		return p.CropSplit
	}
	return ResizeSplit(p.Ops)
}

func isWordByte(b byte) bool {
	return b == '_' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9'
}

// FastFlow makes one decision for the whole dataset at op granularity, as
// FastFlow offloads whole stages: the uniform split with the smallest
// predicted epoch time (ties go to the smaller split). Its splits are the
// ops' boundaries 0..n; it never uses SplitCut.
func FastFlow(p *profiler.Profile, r Resources) Plan {
	m := newModel(p, r, false)
	// Totals per uniform split in one pass over the samples.
	tot := make([]raw, m.n+1)
	buf := make([]raw, m.nopt())
	for i := range p.Samples {
		m.options(&p.Samples[i], buf)
		for k := range tot {
			q := buf[m.option(k, false)]
			tot[k][0] += q[0]
			tot[k][1] += q[1]
			tot[k][2] += q[2]
		}
	}
	best := 0
	for k := 1; k <= m.n; k++ {
		if m.predict(tot[k], r).Seconds < m.predict(tot[best], r).Seconds {
			best = k
		}
	}
	return uniform(m, NameFastFlow, best, r)
}

// SOPHON is the paper's greedy. Per sample it considers only the split
// with the smallest output (the smallest such split on ties); its
// offloading efficiency is the bytes saved (the raw payload, Bytes[0],
// less the bytes at that split) over the storage CPU time of ops [0:k].
// Samples are taken in decreasing efficiency (ties by position) while the
// predicted link time exceeds the predicted storage CPU time, recomputed
// after each pick, and the efficiency is positive. It ignores compute CPU,
// the GPU and compression, as the paper does, and never uses SplitCut,
// which the paper does not have, so that comparisons with it stay fair.
//
// NB: one guard beyond the paper: the pick that makes storage CPU time
// reach link time is undone when it raises max(link, storage) above what it
// was before the pick, so that SOPHON never predicts worse than NoOff (one
// expensive sample can otherwise overshoot on small profiles).
func SOPHON(p *profiler.Profile, r Resources) Plan {
	m := newModel(p, r, false)
	type cand struct {
		eff   float64
		i     int32
		k     int32
		saved float64 // bytes
		sns   float64 // storage ns on the compute node's clock
	}
	cands := make([]cand, 0, len(p.Samples))
	var tot raw
	for i := range p.Samples {
		s := &p.Samples[i]
		k := 0
		for j := 1; j <= m.n; j++ {
			if s.Bytes[j] < s.Bytes[k] {
				k = j
			}
		}
		for _, ns := range s.OpNS {
			tot[2] += float64(ns)
		}
		tot[0] += float64(s.Bytes[0])
		tot[1] += float64(s.Bytes[0]) * m.perByte // sending it (Resources.StorageNSPerByte)
		if k == 0 {
			continue
		}
		var sns float64
		for _, ns := range s.OpNS[:k] {
			sns += float64(ns)
		}
		saved := float64(s.Bytes[0] - s.Bytes[k])
		eff := math.Inf(1)
		if sns > 0 {
			eff = saved / sns
		}
		cands = append(cands, cand{eff, int32(i), int32(k), saved, sns})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.eff != b.eff {
			if a.eff > b.eff {
				return -1
			}
			return 1
		}
		return int(a.i - b.i)
	})
	ch := make([]int32, len(p.Samples))
	link := func(t raw) float64 { return t[0] * m.scale[0] }
	stor := func(t raw) float64 { return t[1] * m.scale[1] }
	for _, c := range cands {
		if link(tot) <= stor(tot) || !(c.eff > 0) {
			break
		}
		next := tot
		next[0] -= c.saved
		next[1] += c.sns - c.saved*m.perByte
		next[2] -= c.sns
		if link(next) <= stor(next) && max(link(next), stor(next)) > max(link(tot), stor(tot)) {
			break // the guard: this overshooting pick does not pay
		}
		tot = next
		ch[c.i] = int32(m.option(int(c.k), false))
	}
	return m.plan(NameSOPHON, ch, r)
}
