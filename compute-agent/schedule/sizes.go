package schedule

import (
	"sync"

	"github.com/sophon-dl/sophon/ops"
)

// Wire header sizes (ops' wire form).
const (
	wireHeaderEncoded = 36
	wireHeaderShaped  = 44
)

// SizeModel estimates a response's wire size before it is sent, for the
// byte bound of the window:
//
//   - split 0: the catalog's raw size plus the wire header.
//   - a split whose output has a fixed shape (after a crop or a resize to
//     [h, w], e.g. 224x224x3 uint8 or 3x224x224 float32): that exact size.
//   - any other split (a full decoded image): the raw size times a ratio
//     learned from the responses seen at that split (a running mean of
//     wire/raw), starting at 10, a JPEG's typical compression ratio.
//   - the JPEG-domain crop (ops.SplitCut): likewise, starting at 1 (a cut
//     is at most the file).
//
// Compression is ignored, so estimates err on the large side. When a
// response arrives, the window holds its actual size instead.
type SizeModel struct {
	fixed []int64 // by slot (see slot); 0 where the shape varies

	mu    sync.Mutex
	ratio []float64
	seen  []int
}

// slot is split k's index into the model's slices: k itself, and n+1 for
// ops.SplitCut.
func (m *SizeModel) slot(k int) int {
	if k == ops.SplitCut {
		return len(m.fixed) - 1
	}
	return k
}

const initialRatio = 10

func NewSizeModel(p *ops.Pipeline) *SizeModel {
	n := p.Len()
	m := &SizeModel{fixed: make([]int64, n+2), ratio: make([]float64, n+2), seen: make([]int, n+2)}
	m.ratio[n+1] = 1
	var h, w int64
	known := false
	for j := range n {
		switch o := p.Op(j).(type) {
		case ops.Decode:
			known = false
		case ops.RandomResizedCrop:
			h, w, known = int64(o.H), int64(o.W), true
		case ops.DecodeRandomResizedCrop:
			h, w, known = int64(o.H), int64(o.W), true
		case ops.CenterCrop:
			h, w, known = int64(o.H), int64(o.W), true
		case ops.Resize:
			h, w, known = int64(o.H), int64(o.W), o.Short == 0 && o.H > 0 && o.W > 0
		}
		k := j + 1
		m.ratio[k] = initialRatio
		if known {
			px := h * w * ops.Channels
			if p.KindAt(k) == ops.KindTensor {
				px *= 4
			}
			m.fixed[k] = px + wireHeaderShaped
		}
	}
	return m
}

// Estimate is the expected wire size of sample with raw bytes at split k.
func (m *SizeModel) Estimate(k int, raw uint64) int64 {
	if k == 0 {
		return int64(raw) + wireHeaderEncoded
	}
	k = m.slot(k)
	if f := m.fixed[k]; f > 0 {
		return f
	}
	m.mu.Lock()
	r := m.ratio[k]
	m.mu.Unlock()
	return int64(float64(raw)*r) + wireHeaderShaped
}

// Observe learns from a response of wire bytes at split k.
func (m *SizeModel) Observe(k int, raw uint64, wire int) {
	if k == 0 {
		return
	}
	if k = m.slot(k); m.fixed[k] > 0 || raw == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen[k]++
	r := float64(wire) / float64(raw)
	if m.seen[k] == 1 {
		m.ratio[k] = r
		return
	}
	m.ratio[k] += (r - m.ratio[k]) / float64(min(m.seen[k], 64))
}
