package results

import (
	"fmt"
	"strings"
)

// cellCPU says in a line what CPU each node of cell c had, and what the
// testbed process itself used outside them; "" when the cell says
// nothing of either.
func cellCPU(c *Cell) string {
	var parts []string
	switch {
	case c.ComputeCPUsEach > 0:
		parts = append(parts, fmt.Sprintf("each storage agent a quota of %s cores, each job's compute agent a quota of its own of %s cores (of %s), "+
			"which its model planned with", cpusString(c.StorageCPUs), cpusString(c.ComputeCPUsEach), cpusString(c.ComputeCPUs)))
	case c.ComputeCPUs > 0:
		parts = append(parts, fmt.Sprintf("each storage agent a quota of %s cores, the compute agent (and the peer) %s cores, "+
			"which its model planned with", cpusString(c.StorageCPUs), cpusString(c.ComputeCPUs)))
	}
	if c.TestbedCPUSeconds > 0 && c.Seconds > 0 {
		parts = append(parts, fmt.Sprintf("the testbed process used %.1f CPU-s over the cell's %.0f s (%.2f cores), outside both quotas",
			c.TestbedCPUSeconds, c.Seconds, c.TestbedCPUSeconds/c.Seconds))
	}
	return strings.Join(parts, "; ")
}
