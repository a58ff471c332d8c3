// Package hardware describes the hardware a plan runs on: storage and
// compute nodes with their cores and rates, per-link caps and a shared
// uplink (Cluster), its common one-node case (Resources), the measured
// figures folded in (Resources.WithMeasured) and the YAML description of
// a cluster (Parse). Package policy plans on it; it decides nothing.
package hardware

import (
	"errors"
	"fmt"
	"math"

	"github.com/sophon-dl/sophon/profiler"
)

// Cluster describes the hardware a cluster plan is made for: N storage
// agents and M compute nodes, each with its own CPU and network rates,
// optional caps per (storage, compute) pair and an optional uplink shared by
// all of them. Where Resources pools everything into one link and one
// storage CPU, a Cluster keeps every node's resources apart, so a plan can
// choose which replica serves a sample as well as where it is split.
//
// Every rate follows Resources: zero means unlimited.
type Cluster struct {
	// Storage lists the storage agents. Placement.Sets index it.
	Storage []StorageNode `json:"storage"`
	// Compute lists the compute nodes. Ranks are numbered node by node in
	// this order: the first node's ranks are 0..Ranks-1, and so on.
	Compute []ComputeNode `json:"compute"`
	// Links caps individual (storage, compute) pairs, e.g. a rack's
	// oversubscribed path. A pair not listed is capped only by its
	// endpoints' egress and ingress. At most one entry per pair.
	Links []LinkCap `json:"links,omitempty"`
	// SharedUplinkBytesPerSec caps the payload bytes of all pairs together
	// (a shared core switch or uplink). Zero means unlimited.
	SharedUplinkBytesPerSec float64 `json:"shared_uplink_bytes_per_sec,omitempty"`
	// StorageSpeed is every storage CPU's speed relative to the clock the
	// profile was measured on, as Resources.StorageSpeed. Zero means 1.
	StorageSpeed float64 `json:"storage_speed,omitempty"`
	// StorageNSPerByte is the storage CPU, in ns on the storage nodes'
	// own clock, that sending one payload byte costs beyond the ops (gRPC,
	// TLS, copies), as Resources.StorageNSPerByte: every option's storage
	// cost includes it. Zero means free.
	StorageNSPerByte float64 `json:"storage_ns_per_byte,omitempty"`
	// ComputeNSPerSample is the compute CPU, in ns on the compute nodes'
	// clock, that each sample costs beyond its ops, as
	// Resources.ComputeNSPerSample: every option's compute cost includes
	// it. Zero means free.
	ComputeNSPerSample float64 `json:"compute_ns_per_sample,omitempty"`
}

// StorageNode is one storage agent.
type StorageNode struct {
	// Name identifies the node in Links and in reports; unique among the
	// storage nodes.
	Name string `json:"name"`
	// Cores is the number of cores the agent may spend on preprocessing.
	// Zero means unlimited.
	Cores float64 `json:"cores,omitempty"`
	// EgressBytesPerSec is the payload bandwidth out of the node, to all
	// compute nodes together. Zero means unlimited.
	EgressBytesPerSec float64 `json:"egress_bytes_per_sec,omitempty"`
}

// ComputeNode is one compute node: one compute agent feeding Ranks
// trainer ranks.
type ComputeNode struct {
	// Name identifies the node in Links and in reports; unique among the
	// compute nodes.
	Name string `json:"name"`
	// Cores is the number of cores available to finishing the pipelines.
	// Zero means unlimited.
	Cores float64 `json:"cores,omitempty"`
	// IngressBytesPerSec is the payload bandwidth into the node, from all
	// storage nodes together. Zero means unlimited.
	IngressBytesPerSec float64 `json:"ingress_bytes_per_sec,omitempty"`
	// GPUSamplesPerSec is the rate at which all the node's ranks together
	// consume samples; each rank is taken to get an equal share of it.
	// Zero means unlimited.
	GPUSamplesPerSec float64 `json:"gpu_samples_per_sec,omitempty"`
	// Ranks is the number of trainer ranks on the node. Zero means 1.
	Ranks int `json:"ranks,omitempty"`
}

// LinkCap caps the payload bandwidth from one storage node to one compute
// node.
type LinkCap struct {
	// Storage and Compute name the pair's nodes.
	Storage string `json:"storage"`
	Compute string `json:"compute"`
	// BytesPerSec is the cap. Zero means unlimited.
	BytesPerSec float64 `json:"bytes_per_sec"`
}

// Limits on a cluster and its placement, checked before anything is sized
// by them (a cluster file is outside input).
const (
	// MaxStorageNodes bounds len(Cluster.Storage); replica indices are
	// int16.
	MaxStorageNodes = 1024
	// MaxComputeNodes bounds len(Cluster.Compute).
	MaxComputeNodes = 1024
	// MaxLinks bounds len(Cluster.Links).
	MaxLinks = 4096
	// MaxRanks bounds the ranks of all compute nodes together.
	MaxRanks = 1 << 20
)

// Errors of cluster descriptions. A *ClusterError wraps one of them (or
// one of package policy's, for placements and plans) with the field at
// fault; test with errors.Is.
var (
	ErrNoNodes       = errors.New("hardware: cluster needs at least one storage and one compute node")
	ErrNodeName      = errors.New("hardware: node without a name")
	ErrDuplicateNode = errors.New("hardware: duplicate node name")
	ErrDuplicateLink = errors.New("hardware: duplicate link")
	ErrUnknownNode   = errors.New("hardware: unknown node")
	ErrBadFigure     = errors.New("hardware: negative or non-finite figure")
	ErrClusterTooBig = errors.New("hardware: cluster exceeds a limit")
)

// ClusterError reports what is wrong with a cluster description, a
// placement or a plan: the field at fault (as a path, e.g.
// "links[2].compute" or "set[7]") and a sentinel error it wraps.
type ClusterError struct {
	// Field is the path of the offending field.
	Field string
	// Err is one of the sentinel errors above.
	Err error
	// Detail says what the field holds and what was wanted.
	Detail string
}

func (e *ClusterError) Error() string {
	return fmt.Sprintf("%v: %s: %s", e.Err, e.Field, e.Detail)
}

// Unwrap returns the sentinel.
func (e *ClusterError) Unwrap() error { return e.Err }

// NewError is a *ClusterError wrapping err at field, its detail
// formatted.
func NewError(err error, field, format string, args ...any) error {
	return &ClusterError{Field: field, Err: err, Detail: fmt.Sprintf(format, args...)}
}

// Validate checks c: at least one storage and one compute node, each named
// and unique within its kind, every figure zero or finite and at least
// 1e-9, every
// link naming known nodes and no pair twice, and the counts within the
// limits above (checked first).
func (c *Cluster) Validate() error {
	switch {
	case len(c.Storage) > MaxStorageNodes:
		return NewError(ErrClusterTooBig, "storage", "%d nodes, at most %d", len(c.Storage), MaxStorageNodes)
	case len(c.Compute) > MaxComputeNodes:
		return NewError(ErrClusterTooBig, "compute", "%d nodes, at most %d", len(c.Compute), MaxComputeNodes)
	case len(c.Links) > MaxLinks:
		return NewError(ErrClusterTooBig, "links", "%d links, at most %d", len(c.Links), MaxLinks)
	case len(c.Storage) == 0:
		return NewError(ErrNoNodes, "storage", "none")
	case len(c.Compute) == 0:
		return NewError(ErrNoNodes, "compute", "none")
	}
	for _, f := range []struct {
		name string
		x    float64
	}{{"shared_uplink_bytes_per_sec", c.SharedUplinkBytesPerSec}, {"storage_speed", c.StorageSpeed}, {"storage_ns_per_byte", c.StorageNSPerByte}, {"compute_ns_per_sample", c.ComputeNSPerSample}} {
		if err := checkFigure(f.name, f.x); err != nil {
			return err
		}
	}
	storage := make(map[string]int, len(c.Storage))
	for i, s := range c.Storage {
		at := fmt.Sprintf("storage[%d]", i)
		if err := checkName("storage", i, s.Name, storage); err != nil {
			return err
		}
		if err := checkFigure(at+".cores", s.Cores); err != nil {
			return err
		}
		if err := checkFigure(at+".egress_bytes_per_sec", s.EgressBytesPerSec); err != nil {
			return err
		}
	}
	compute := make(map[string]int, len(c.Compute))
	ranks := 0
	for i, n := range c.Compute {
		at := fmt.Sprintf("compute[%d]", i)
		if err := checkName("compute", i, n.Name, compute); err != nil {
			return err
		}
		for _, f := range []struct {
			name string
			x    float64
		}{{".cores", n.Cores}, {".ingress_bytes_per_sec", n.IngressBytesPerSec}, {".gpu_samples_per_sec", n.GPUSamplesPerSec}} {
			if err := checkFigure(at+f.name, f.x); err != nil {
				return err
			}
		}
		if n.Ranks < 0 || n.Ranks > MaxRanks {
			return NewError(ErrBadFigure, at+".ranks", "%d, want 0 (meaning 1) to %d", n.Ranks, MaxRanks)
		}
		ranks += max(n.Ranks, 1)
		if ranks > MaxRanks {
			return NewError(ErrClusterTooBig, "compute", "more than %d ranks in all", MaxRanks)
		}
	}
	pairs := make(map[[2]int]int, len(c.Links))
	for i, l := range c.Links {
		at := fmt.Sprintf("links[%d]", i)
		s, ok := storage[l.Storage]
		if !ok {
			return NewError(ErrUnknownNode, at+".storage", "%q is not a storage node", l.Storage)
		}
		n, ok := compute[l.Compute]
		if !ok {
			return NewError(ErrUnknownNode, at+".compute", "%q is not a compute node", l.Compute)
		}
		if j, dup := pairs[[2]int{s, n}]; dup {
			return NewError(ErrDuplicateLink, at, "%s -> %s already capped by links[%d]", l.Storage, l.Compute, j)
		}
		pairs[[2]int{s, n}] = i
		if err := checkFigure(at+".bytes_per_sec", l.BytesPerSec); err != nil {
			return err
		}
	}
	return nil
}

func checkName(kind string, i int, name string, seen map[string]int) error {
	at := fmt.Sprintf("%s[%d].name", kind, i)
	if name == "" {
		return NewError(ErrNodeName, at, "empty")
	}
	if j, dup := seen[name]; dup {
		return NewError(ErrDuplicateNode, at, "%q is also %s[%d]", name, kind, j)
	}
	seen[name] = i
	return nil
}

// minFigure is the smallest positive figure a cluster may give: smaller
// ones are typos, and their reciprocals would overflow the planner's
// arithmetic.
const minFigure = 1e-9

func checkFigure(field string, x float64) error {
	if !(x >= 0) || math.IsInf(x, 1) || (x > 0 && x < minFigure) {
		return NewError(ErrBadFigure, field, "%v, want 0 (unlimited) or a finite number >= %v", x, minFigure)
	}
	return nil
}

// Ranks is the number of ranks over all compute nodes (each node's Ranks,
// zero counting as 1).
func (c *Cluster) Ranks() int {
	n := 0
	for _, cn := range c.Compute {
		n += max(cn.Ranks, 1)
	}
	return n
}

// SingleNode is the cluster of one storage node and one compute node that
// r describes: the storage node has r's storage cores and r's link as its
// egress, the compute node r's compute cores and GPU and one rank, and the
// storage speed and transport cost are r's. Cluster
// plans and bounds on it agree with the single-node ones on r.
func SingleNode(r Resources) Cluster {
	return Cluster{
		Storage:            []StorageNode{{Name: "storage", Cores: r.StorageCores, EgressBytesPerSec: r.LinkBytesPerSec}},
		Compute:            []ComputeNode{{Name: "compute", Cores: r.ComputeCores, GPUSamplesPerSec: r.GPUSamplesPerSec, Ranks: 1}},
		StorageSpeed:       r.StorageSpeed,
		StorageNSPerByte:   r.StorageNSPerByte,
		ComputeNSPerSample: r.ComputeNSPerSample,
	}
}

// Speed is StorageSpeed, zero meaning 1.
func (c *Cluster) Speed() float64 {
	if c.StorageSpeed <= 0 {
		return 1
	}
	return c.StorageSpeed
}

// Resources is the common case of a Cluster: one storage node and one
// compute node, with the storage agents' links and cores pooled into one.
// SingleNode gives it as the Cluster every planner function plans on; it
// stays a type of its own so that a single-node caller names its five
// figures directly.
type Resources struct {
	// LinkBytesPerSec is the total payload bandwidth from storage to the
	// compute node, summed over all storage agents (the planner treats the
	// agents' links as one pooled link). Zero means unlimited.
	LinkBytesPerSec float64
	// StorageCores is the number of storage-side cores available to
	// preprocessing, summed over all storage agents. Zero means unlimited.
	StorageCores float64
	// ComputeCores is the number of compute-node cores available to
	// preprocessing. Zero means unlimited.
	ComputeCores float64
	// GPUSamplesPerSec is the rate at which training consumes samples.
	// Zero means unlimited.
	GPUSamplesPerSec float64
	// StorageSpeed is the storage CPU's speed relative to the compute
	// node's (1 = same, 0.5 = half as fast): storage CPU time is the
	// measured compute-node time divided by StorageSpeed. The paper assumes
	// homogeneous CPUs; this handles heterogeneous ones. Zero means 1.
	StorageSpeed float64
	// StorageNSPerByte is the storage CPU (ns, on the storage side's own
	// clock) each payload byte costs to send beyond the ops: reading,
	// gRPC framing, TLS. The storage agent's process CPU less its ops'
	// CPU over the bytes it sent measures it (docs/policy.md, "The model",
	// has measured figures); every option then costs the storage side its
	// bytes times this, raw ones included. Zero means free.
	StorageNSPerByte float64
	// ComputeNSPerSample is the compute CPU (ns, on the compute node's
	// clock) each sample costs beyond its ops, whatever its split:
	// receiving it (gRPC, TLS, copies), the engine's bookkeeping, the
	// hand-off and the garbage it leaves. The compute agent's process CPU
	// less its finishing workers' CPU over the samples it delivered
	// measures it (docs/policy.md, "The compute side beyond its ops");
	// every option then costs the compute side this much more. Zero means
	// free.
	ComputeNSPerSample float64
	// CacheBytes is the compute node's cache budget (compute-agent
	// --cache-bytes): the bytes of samples a plan may keep resident there
	// at the pipeline's cache split (policy.Plan.Cached). Zero means no
	// cache.
	CacheBytes float64
}

// WithMeasured returns r with every field that m measured (a positive one)
// in place of r's; a nil m returns r. A compute agent plans from the
// profile's running means this way, keeping its own figures for what the
// means lack.
func (r Resources) WithMeasured(m *profiler.MeasuredResources) Resources {
	if m == nil {
		return r
	}
	for _, f := range []struct {
		dst *float64
		x   float64
	}{
		{&r.LinkBytesPerSec, m.LinkBytesPerSec},
		{&r.StorageCores, m.StorageCores},
		{&r.ComputeCores, m.ComputeCores},
		{&r.GPUSamplesPerSec, m.GPUSamplesPerSec},
		{&r.StorageSpeed, m.StorageSpeed},
	} {
		if f.x > 0 && !math.IsInf(f.x, 1) {
			*f.dst = f.x
		}
	}
	return r
}

// Over is the cluster of the storage nodes given and one compute node
// with r's compute cores and GPU and one rank: r's pooled link and
// storage cores spread over the nodes in proportion to each node's own
// figure (its EgressBytesPerSec and Cores as measured or announced, e.g.
// by a compute agent's stage 1), so that re-measuring the pooled figures
// rescales every node alike. When any node's egress is zero (unknown) the
// link is shared equally; a node of zero (unknown) cores gets unlimited
// cores, and a zero pooled figure leaves every node unlimited. With one
// node it is SingleNode(r) but for the storage node's name.
func (r Resources) Over(storage []StorageNode) Cluster {
	c := SingleNode(r)
	c.Storage = make([]StorageNode, len(storage))
	var egress, cores float64
	known := true
	for _, s := range storage {
		egress += s.EgressBytesPerSec
		cores += s.Cores
		known = known && s.EgressBytesPerSec > 0
	}
	for j, s := range storage {
		n := StorageNode{Name: s.Name}
		switch {
		case r.LinkBytesPerSec <= 0:
		case known:
			n.EgressBytesPerSec = r.LinkBytesPerSec * s.EgressBytesPerSec / egress
		default:
			n.EgressBytesPerSec = r.LinkBytesPerSec / float64(len(storage))
		}
		if r.StorageCores > 0 && s.Cores > 0 {
			n.Cores = r.StorageCores * s.Cores / cores
		}
		c.Storage[j] = n
	}
	return c
}
