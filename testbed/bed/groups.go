package bed

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/sophon-dl/sophon/internal/cpuquota"
	"github.com/sophon-dl/sophon/testbed/cgroup"
	"github.com/sophon-dl/sophon/testbed/netns"
)

// storageWeight is each storage node's cgroup CPU weight, in default
// groups. A storage node's cores are its own: where the nodes share the
// machine's cores (too few to pin), the weight gives a storage agent its
// quota whenever it is runnable, as on a node of its own, instead of a
// fair share against the compute agent's threads. With the default
// weight a storage agent got well under its quota while the compute
// agent's workers ran, and the link waited on it (docs/results.md, "Hits
// no longer hold requests back", has the figures).
const storageWeight = 16

// groupSeq numbers the cgroups of this process's beds.
var groupSeq atomic.Uint32

// Pins says which cores each node's processes get: Storage[i] is storage
// node i's cpuset, Compute the compute nodes' (all of them share it);
// nil or "" = not pinned. Why says so in words, for the report.
type Pins struct {
	Storage []string
	Compute string
	Why     string
}

// PinCores pins each of storage storage nodes to per cores of its own
// (0, 1, ... for one core each), and the compute nodes to the others when
// that leaves them at least 3 cores of cores for finishing work; with
// fewer, pinning would starve the compute node, so nothing is pinned and
// the CPU limit is each storage node's quota alone. Before per, a storage
// agent had one core whatever its quota: with --storage-cpus 4 on 16
// cores it ran on one.
func PinCores(cores, storage, per int) Pins {
	if cores < storage*per+3 {
		if storage == 1 {
			return Pins{Why: fmt.Sprintf("not pinned: %d cores are too few to split (the storage and compute agents share them by their quotas)", cores)}
		}
		return Pins{Why: fmt.Sprintf("not pinned: %d cores are too few to give each of %d storage agents %s and the compute agents 3 (the agents share them by their quotas)", cores, storage, coresWord(per))}
	}
	p := Pins{Compute: fmt.Sprintf("%d-%d", storage*per, cores-1)}
	for i := range storage {
		p.Storage = append(p.Storage, coreRange(i*per, per))
	}
	if storage == 1 {
		word := "core"
		if per > 1 {
			word = "cores"
		}
		p.Why = fmt.Sprintf("storage agent on %s %s, compute agent on cores %s", word, p.Storage[0], p.Compute)
		return p
	}
	p.Why = fmt.Sprintf("storage agents on cores %s (%s each), compute agents on cores %s", strings.Join(p.Storage, ", "), coresWord(per), p.Compute)
	return p
}

// coreRange is the cpuset of n cores from first: "3" or "4-7".
func coreRange(first, n int) string {
	if n == 1 {
		return strconv.Itoa(first)
	}
	return fmt.Sprintf("%d-%d", first, first+n-1)
}

// coresWord is "one" for a core, else "N cores".
func coresWord(n int) string {
	if n == 1 {
		return "one"
	}
	return fmt.Sprintf("%d cores", n)
}

// StorageCores is storage node i's cpuset; "" when not pinned.
func (p Pins) StorageCores(i int) string {
	if i < len(p.Storage) {
		return p.Storage[i]
	}
	return ""
}

// MinComputeCPUs is the least CPU quota a cell may leave its compute
// nodes: below it the compute agent's own work (receiving, finishing,
// batching) would be what the cell measures.
const MinComputeCPUs = 0.5

// ComputeCPUs is the compute nodes' CPU quota (all of them together) on
// a machine of cores cores where each of storage storage nodes has a quota
// of cpus: the cores the storage nodes' quotas leave, and, when pins gives
// the compute nodes cores of their own, no more than those. A storage
// node pinned to a core of its own with a quota of half of it leaves the
// other half idle: the compute nodes cannot run there. apart is how many
// compute nodes split it into groups of their own (Config.ComputeApart;
// 1 when they share one). It is an error (ErrConfig) when a group's part
// is less than MinComputeCPUs.
func ComputeCPUs(cores float64, storage int, cpus float64, pins Pins, apart int) (float64, error) {
	c := cores - float64(storage)*cpus
	if pins.Compute != "" {
		n, err := cpuquota.CountList(pins.Compute)
		if err != nil {
			return 0, fmt.Errorf("%w: compute cpuset %q: %w", ErrConfig, pins.Compute, err)
		}
		c = min(c, float64(n))
	}
	apart = max(apart, 1)
	if c/float64(apart) < MinComputeCPUs {
		return 0, fmt.Errorf("%w: %d storage agents of %s cores each leave %d compute agent(s) %s of this machine's %s cores, less than %s each: "+
			"lower --storage-cpus or run on a machine with more cores", ErrConfig, storage, fmtCores(cpus), apart, fmtCores(max(c, 0)), fmtCores(cores), fmtCores(MinComputeCPUs))
	}
	return c, nil
}

// fmtCores writes a number of cores: "1.5".
func fmtCores(c float64) string { return strconv.FormatFloat(c, 'f', -1, 64) }

// MakeGroups makes the bed's cgroups: each storage node's CPU quota of
// cpus cores (and its cpuset of pins), and the compute nodes' group with
// a quota of compute cores (ComputeCPUs) and the cpuset of pins, if any
// (with Config.ComputeApart, a group per compute node, each with its
// equal part of compute); compute 0 and no compute cpuset: no compute
// group. Processes are born
// in them (Command) or join them through Place; Close removes them. On
// error it removes what it made, and the bed has no groups.
func (b *Bed) MakeGroups(cpus float64, pins Pins, compute float64) error {
	seq := groupSeq.Add(1)
	var made []*cgroup.Group
	undo := func(err error) error {
		for _, g := range made {
			err = errors.Join(err, g.Close())
		}
		for _, s := range b.storage {
			s.group = nil
		}
		b.computeGroups, b.computeCPUs = nil, 0
		return err
	}
	for i, s := range b.storage {
		name := fmt.Sprintf("%sst%d", netns.ProcessPrefix(), seq)
		if len(b.storage) > 1 {
			name += "-" + strconv.Itoa(i+1)
		}
		g, err := cgroup.New(cgroup.Config{Name: name, CPUs: cpus, Cpuset: pins.StorageCores(i), Weight: storageWeight})
		if err != nil {
			return undo(err)
		}
		made, s.group = append(made, g), g
	}
	if pins.Compute != "" || compute > 0 {
		n := 1
		if b.computeApart {
			n = b.compute
		}
		for i := range n {
			name := fmt.Sprintf("%scp%d", netns.ProcessPrefix(), seq)
			if n > 1 {
				name += "-" + strconv.Itoa(i+1)
			}
			c, err := cgroup.New(cgroup.Config{Name: name, CPUs: compute / float64(n), Cpuset: pins.Compute})
			if err != nil {
				return undo(err)
			}
			made, b.computeGroups = append(made, c), append(b.computeGroups, c)
		}
		b.computeCPUs = compute
	}
	for _, g := range made {
		b.AtClose(g.Close)
	}
	return nil
}

// group is host h's cgroup; nil without one (or unconfined).
func (b *Bed) group(h Host) *cgroup.Group {
	switch {
	case h.Unconfined:
		return nil
	case h.Storage:
		return b.storage[h.Index].group
	}
	switch {
	case len(b.computeGroups) == 0:
		return nil
	case len(b.computeGroups) == 1:
		return b.computeGroups[0]
	}
	return b.computeGroups[h.Index]
}

// joinScript is the shell that moves itself into the group directories
// before "--" (their cgroup.procs) and then execs the program after it:
// the program is born in its cgroup, so what it reads of its CPU limit
// at start is the group's.
const joinScript = `for d do shift; [ "$d" = -- ] && break; echo $$ >"$d/cgroup.procs" || exit 126; done; exec "$@"`

// joinArgs are sh's arguments to run name with args in the group
// directories dirs (joinScript).
func joinArgs(dirs []string, name string, args []string) []string {
	out := append([]string{"-c", joinScript, "sh"}, dirs...)
	out = append(out, "--", name)
	return append(out, args...)
}
