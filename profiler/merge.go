package profiler

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/sophon-dl/sophon/ops"
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
		out.Samples = append(out.Samples, mergeSample(id, byID[id], n))
	}
	return out, nil
}

// mergeSample is sample id's entry from its records recs (see Merge), for
// a pipeline of n ops.
func mergeSample(id uint64, recs []*SampleProfile, n int) SampleProfile {
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
	return m
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

// Observation is what a planned epoch saw of one sample without recording
// it (no op runs twice): the split it arrived at, its payload, and the CPU
// each side spent on it, both on the profile's clock (the storage side's
// storage_cpu_ns converted with the storage speed the plan assumed).
type Observation struct {
	ID uint64
	// Split is the split k it arrived at, or ops.SplitCut.
	Split int
	// Compressed: the payload is zstd-compressed.
	Compressed bool
	// Payload is the wire form's stored bytes (wireform.Info.StoredLen).
	Payload int64
	// StorageNS is the storage side's ops (and compression), LocalNS the
	// compute side's (decompression, ops[k:n] or the cut's finish); zero
	// means not measured.
	StorageNS, LocalNS int64
	// StorageEffNS is StorageNS as the storage agent's budget counted it:
	// its budget time times its worker's share of a core (the CPU quota's
	// throttling and the other threads' contention included), the time
	// an epoch's plan pays and its storage speed is measured against;
	// zero means not reported.
	StorageEffNS int64
}

// RefineStats is what Refine changed.
type RefineStats struct {
	// Observed counts the observations applied to their sample's entry.
	Observed int
	// CutNS, CutBytes, CutFinishNS and OpNS are the ratios measured over
	// estimated of the observed samples (1 where nothing was observed),
	// applied to the fields of the samples not observed there.
	CutNS, CutBytes, CutFinishNS, OpNS float64
}

// Refine merges a planned epoch's observations into p, an estimated
// profile (estimate.Model.Profile) or an earlier refinement of one, and
// returns the result; p is not changed. Each observed sample's entry takes
// what was measured of it: the payload's size at its split, and the
// storage and the compute side's CPU, each spread over the entry's fields
// that make it up in the proportions the entry had (so ops[0:k] together
// cost StorageNS, ops[k:n] LocalNS). A field measured on some samples but
// estimated on others (say the cut's cost, measured on the samples cut
// and estimated on those fetched raw) is scaled on the others by the ratio
// of measured to estimated over the samples that measured it (the cut's
// size and costs over the samples cut, the ops' costs over the samples
// fetched raw), so that a calibration's bias found on some samples
// corrects all of them. Unknown
// ids and splits the entry cannot hold are skipped.
func Refine(p *Profile, obs []Observation) (*Profile, RefineStats) {
	out := *p
	out.Samples = make([]SampleProfile, len(p.Samples))
	for i, s := range p.Samples {
		out.Samples[i] = s.clone()
	}
	st := RefineStats{CutNS: 1, CutBytes: 1, CutFinishNS: 1, OpNS: 1}
	// Measured and estimated sums over the observed samples: the cut's
	// storage ns, bytes and compute side; the ops of the samples fetched
	// raw (all run here).
	var cut, estCut [3]float64
	var opsSeen [2]float64
	// cutSeen: the sample's cut was measured (and ops[2:n] with it);
	// opsSeen: its ops were, at a split.
	cutSeen, opsSet := map[uint64]bool{}, map[uint64]bool{}
	for _, o := range obs {
		i, ok := slices.BinarySearchFunc(out.Samples, o.ID, func(s SampleProfile, id uint64) int { return cmp.Compare(s.ID, id) })
		if !ok {
			continue
		}
		s := &out.Samples[i]
		n := len(s.OpNS)
		switch {
		case o.Split == ops.SplitCut:
			if !s.HasCut() || o.Payload <= 0 {
				continue
			}
			est := [3]float64{float64(s.CutNS), float64(s.CutBytes), float64(s.CutFinishNS) + float64(sum(s.OpNS[min(2, n):]))}
			s.CutBytes = o.Payload
			if o.StorageNS > 0 {
				s.CutNS = o.StorageNS
			}
			if o.LocalNS > 0 {
				parts := append([]*int64{&s.CutFinishNS}, ptrs(s.OpNS[min(2, n):])...)
				spread(parts, o.LocalNS)
			}
			cut[0], cut[1], cut[2] = cut[0]+float64(s.CutNS), cut[1]+float64(s.CutBytes), cut[2]+float64(s.CutFinishNS)+float64(sum(s.OpNS[min(2, n):]))
			estCut[0], estCut[1], estCut[2] = estCut[0]+est[0], estCut[1]+est[1], estCut[2]+est[2]
			cutSeen[o.ID] = true
		case o.Split >= 0 && o.Split <= n:
			k := o.Split
			if !o.Compressed && k > 0 && o.Payload > 0 {
				s.Bytes[k] = o.Payload
				if k < len(s.Compressed) {
					s.Compressed[k] = min(s.Compressed[k], s.Bytes[k])
				}
			}
			if o.Compressed && k < len(s.Compressed) && o.Payload > 0 {
				s.Compressed[k] = min(o.Payload, s.Bytes[k])
			}
			storage, local := ptrs(s.OpNS[:k]), ptrs(s.OpNS[k:])
			if o.Compressed && k < len(s.CompressNS) && k < len(s.DecompressNS) {
				storage, local = append(storage, &s.CompressNS[k]), append(local, &s.DecompressNS[k])
			}
			if o.StorageNS > 0 && len(storage) > 0 {
				spread(storage, o.StorageNS)
			}
			if o.LocalNS > 0 {
				if k == 0 && !o.Compressed {
					opsSeen[1] += float64(sum(s.OpNS))
					opsSeen[0] += float64(o.LocalNS)
				}
				spread(local, o.LocalNS)
			}
			opsSet[o.ID] = opsSet[o.ID] || o.LocalNS > 0 || (o.StorageNS > 0 && k > 0)
		default:
			continue
		}
		st.Observed++
	}
	ratio := func(got, est float64) float64 {
		if got > 0 && est > 0 {
			return got / est
		}
		return 1
	}
	st.CutNS, st.CutBytes, st.CutFinishNS = ratio(cut[0], estCut[0]), ratio(cut[1], estCut[1]), ratio(cut[2], estCut[2])
	st.OpNS = ratio(opsSeen[0], opsSeen[1])
	for i := range out.Samples {
		s := &out.Samples[i]
		if s.HasCut() && !cutSeen[s.ID] {
			s.CutNS = scale(s.CutNS, st.CutNS)
			s.CutBytes = max(1, min(scale(s.CutBytes, st.CutBytes), s.Raw))
			s.CutFinishNS = scale(s.CutFinishNS, st.CutFinishNS)
		}
		if opsSet[s.ID] {
			continue
		}
		unseen := s.OpNS
		if cutSeen[s.ID] {
			unseen = s.OpNS[:min(2, len(s.OpNS))] // what the cut replaces
		}
		for j := range unseen {
			unseen[j] = scale(unseen[j], st.OpNS)
		}
	}
	return &out, st
}

// clone is a deep copy of s.
func (s SampleProfile) clone() SampleProfile {
	s.Bytes, s.OpNS = slices.Clone(s.Bytes), slices.Clone(s.OpNS)
	s.Compressed, s.CompressNS, s.DecompressNS = slices.Clone(s.Compressed), slices.Clone(s.CompressNS), slices.Clone(s.DecompressNS)
	return s
}

func sum(v []int64) int64 {
	var t int64
	for _, x := range v {
		t += x
	}
	return t
}

func ptrs(v []int64) []*int64 {
	out := make([]*int64, len(v))
	for i := range v {
		out[i] = &v[i]
	}
	return out
}

// spread sets the fields to total in the proportions they had (evenly
// where they summed to zero).
func spread(fields []*int64, total int64) {
	if len(fields) == 0 {
		return
	}
	var was int64
	for _, f := range fields {
		was += *f
	}
	left := total
	for i, f := range fields {
		switch {
		case i == len(fields)-1:
			*f = max(left, 0)
		case was > 0:
			*f = int64(float64(total) * float64(*f) / float64(was))
		default:
			*f = total / int64(len(fields))
		}
		left -= *f
	}
}

func scale(x int64, r float64) int64 { return max(int64(float64(x)*r+0.5), 0) }
