package profiler

import (
	"fmt"
	"maps"
	"slices"
)

// Merge averages several records of the same dataset and pipeline, say the
// stage 2 records of epochs 0, 1 and 2, into one profile: per sample, every
// size and cost is the mean (rounded to the nearest integer) over the
// profiles that hold that sample. A record without Compressed counts as
// uncompressible there (Compressed equal to Bytes); CompressNS and
// DecompressNS are averaged over the records that have them and left empty
// where none has. The cut's fields (CutBytes, CutNS, CutFinishNS) are
// averaged only where every record of the sample has them and are zero
// otherwise: whether a cut is smaller than the file depends on the epoch's
// crop box, and a cut declined in one recorded epoch may be declined
// again, so the plan should not count on it. Resources are combined with
// [MeasuredResources.Update], each record weighing its Epochs (1 where
// that is zero). The profiles must share fingerprint, pipeline and ops
// (ErrProfileMismatch otherwise) and pass Validate.
func Merge(ps ...*Profile) (*Profile, error) {
	if len(ps) == 0 {
		return nil, fmt.Errorf("%w: nothing to merge", ErrProfileInvalid)
	}
	first := ps[0]
	for _, p := range ps {
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if p.Fingerprint != first.Fingerprint {
			return nil, &MismatchError{Field: "fingerprint", Got: p.Fingerprint, Want: first.Fingerprint}
		}
		if p.Pipeline != first.Pipeline || !slices.Equal(p.Ops, first.Ops) {
			return nil, &MismatchError{Field: "pipeline", Got: p.Pipeline, Want: first.Pipeline}
		}
	}
	n := len(first.Ops)
	byID := map[uint64][]*SampleProfile{}
	for _, p := range ps {
		for i := range p.Samples {
			s := &p.Samples[i]
			byID[s.ID] = append(byID[s.ID], s)
		}
	}
	out := &Profile{
		Version:     ProfileVersion,
		Fingerprint: first.Fingerprint,
		Pipeline:    first.Pipeline,
		Ops:         slices.Clone(first.Ops),
		Samples:     make([]SampleProfile, 0, len(byID)),
	}
	for _, p := range ps {
		if p.Resources == nil {
			continue
		}
		if out.Resources == nil {
			out.Resources = &MeasuredResources{}
		}
		w := p.Resources.Epochs
		if !measured(w) {
			w = 1
		}
		out.Resources.Update(*p.Resources, w)
	}
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		recs := byID[id]
		m := SampleProfile{ID: id}
		var raw, bs, comp, cns, dns, opns, cut [][]int64
		anyComp, allCut := false, true
		for _, r := range recs {
			raw = append(raw, []int64{r.Raw})
			bs = append(bs, r.Bytes)
			opns = append(opns, r.OpNS)
			if len(r.Compressed) > 0 {
				anyComp = true
				comp = append(comp, r.Compressed)
			} else {
				comp = append(comp, r.Bytes)
			}
			if len(r.CompressNS) > 0 {
				cns = append(cns, r.CompressNS)
			}
			if len(r.DecompressNS) > 0 {
				dns = append(dns, r.DecompressNS)
			}
			allCut = allCut && r.HasCut()
			cut = append(cut, []int64{r.CutBytes, r.CutNS, r.CutFinishNS})
		}
		m.Raw = meanOf(raw, 1)[0]
		m.Bytes = meanOf(bs, n+1)
		m.OpNS = meanOf(opns, n)
		if anyComp {
			m.Compressed = meanOf(comp, n+1)
		}
		m.CompressNS = meanOf(cns, n+1)
		m.DecompressNS = meanOf(dns, n+1)
		if allCut {
			c := meanOf(cut, 3)
			m.CutBytes, m.CutNS, m.CutFinishNS = c[0], c[1], c[2]
		}
		out.Samples = append(out.Samples, m)
	}
	return out, nil
}

// meanOf is the element-wise mean of vs (each of length n), rounded half
// up, or nil for no vs. Rounding the same way everywhere keeps the means
// ordered as the inputs were (mean Compressed <= mean Bytes).
func meanOf(vs [][]int64, n int) []int64 {
	if len(vs) == 0 {
		return nil
	}
	c := int64(len(vs))
	out := make([]int64, n)
	for k := range out {
		var sum int64
		for _, v := range vs {
			sum += v[k]
		}
		out[k] = (sum + c/2) / c
	}
	return out
}
