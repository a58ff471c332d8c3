package engine

import (
	"github.com/sophon-dl/sophon/compute-agent/report"
)

// servedRaw is the epoch's ServedRaw, nil when no offload was answered raw.
func servedRaw(e *Epoch) *report.ServedRaw {
	c, u := e.servedRawContended.Load(), e.servedRawUncuttable.Load()
	if c == 0 && u == 0 {
		return nil
	}
	return &report.ServedRaw{Contended: int(c), Uncuttable: int(u)}
}
