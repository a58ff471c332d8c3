package policy

import (
	"errors"

	"github.com/sophon-dl/sophon/policy/hardware"
)

// The hardware a plan runs on is described once, in package hardware;
// these are its names as policy's callers know them.
type (
	// Resources is the one-node case of a Cluster (hardware.Resources).
	Resources = hardware.Resources
	// Cluster is the hardware a plan runs on (hardware.Cluster).
	Cluster     = hardware.Cluster
	StorageNode = hardware.StorageNode
	ComputeNode = hardware.ComputeNode
	LinkCap     = hardware.LinkCap
	// ClusterError is a description's, placement's or plan's error at a
	// field (hardware.ClusterError).
	ClusterError = hardware.ClusterError
)

// Limits on a cluster description (hardware's).
const (
	MaxStorageNodes     = hardware.MaxStorageNodes
	MaxComputeNodes     = hardware.MaxComputeNodes
	MaxLinks            = hardware.MaxLinks
	MaxRanks            = hardware.MaxRanks
	MaxClusterFileBytes = hardware.MaxClusterFileBytes
)

// Limits of the planner.
const (
	// MaxReplicas bounds the size of one replica set.
	MaxReplicas = 64
	// MaxClusterOps bounds the pipeline length a cluster plan handles:
	// the planner numbers a sample's options (split x codec, the cut) in
	// a byte.
	MaxClusterOps = 126
)

// Errors of cluster descriptions (hardware's), placements and plans. A
// *ClusterError wraps one of them with the field at fault; test with
// errors.Is.
var (
	ErrNoNodes       = hardware.ErrNoNodes
	ErrNodeName      = hardware.ErrNodeName
	ErrDuplicateNode = hardware.ErrDuplicateNode
	ErrDuplicateLink = hardware.ErrDuplicateLink
	ErrUnknownNode   = hardware.ErrUnknownNode
	ErrBadFigure     = hardware.ErrBadFigure
	ErrClusterTooBig = hardware.ErrClusterTooBig
	ErrClusterFile   = hardware.ErrClusterFile

	ErrPlacement      = errors.New("policy: placement does not fit the cluster or profile")
	ErrClusterPlan    = errors.New("policy: cluster plan does not fit the placement")
	ErrClusterProfile = errors.New("policy: profile does not fit a cluster plan")
)

// SingleNode is the cluster of one storage node and one compute node that
// r describes (hardware.SingleNode); plans and bounds on it are the
// single-node ones on r.
func SingleNode(r Resources) Cluster { return hardware.SingleNode(r) }

// ParseCluster decodes and validates a cluster description in YAML or
// JSON (hardware.Parse).
func ParseCluster(data []byte) (Cluster, error) { return hardware.Parse(data) }

// clusterErr is a *ClusterError wrapping err at field.
func clusterErr(err error, field, format string, args ...any) error {
	return hardware.NewError(err, field, format, args...)
}
