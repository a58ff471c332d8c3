package engine

import (
	"slices"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// splitCounter accumulates SplitStats by split.
type splitCounter map[int]*report.SplitStats

func (c splitCounter) add(k int, bytes int64) {
	s := c[k]
	if s == nil {
		s = &report.SplitStats{Split: k}
		c[k] = s
	}
	s.Samples++
	s.Bytes += bytes
}

func (c splitCounter) list() []report.SplitStats {
	out := make([]report.SplitStats, 0, len(c))
	for _, s := range c {
		out = append(out, *s)
	}
	slices.SortFunc(out, func(a, b report.SplitStats) int { return a.Split - b.Split })
	return out
}

// servedRaw is the epoch's ServedRaw, nil when no offload was answered raw.
func servedRaw(e *Epoch) *report.ServedRaw {
	c, u := e.servedRawContended.Load(), e.servedRawUncuttable.Load()
	if c == 0 && u == 0 {
		return nil
	}
	return &report.ServedRaw{Contended: int(c), Uncuttable: int(u)}
}
