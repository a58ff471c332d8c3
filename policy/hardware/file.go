package hardware

import (
	"errors"

	"sigs.k8s.io/yaml"
)

// MaxClusterFileBytes bounds the size of a cluster description Parse
// accepts, so that decoding one allocates a bounded amount.
const MaxClusterFileBytes = 1 << 20

// ErrClusterFile is wrapped (in a *ClusterError) when a cluster
// description is not valid YAML for a Cluster: a syntax error, a field of
// the wrong type, an unknown or duplicate field (named in the detail).
var ErrClusterFile = errors.New("hardware: bad cluster description")

// Parse decodes a cluster description in YAML (or JSON) and
// validates it. Field names are the Cluster's JSON tags:
//
//	storage_speed: 1
//	storage_ns_per_byte: 4.5
//	shared_uplink_bytes_per_sec: 0
//	storage:
//	  - {name: s0, cores: 16, egress_bytes_per_sec: 5.0e9}
//	compute:
//	  - {name: c0, cores: 64, ingress_bytes_per_sec: 3.125e9, gpu_samples_per_sec: 20000, ranks: 8}
//	links:
//	  - {storage: s0, compute: c0, bytes_per_sec: 1.25e9}
//
// Decoding is strict: an unknown or repeated field is an error naming it.
// Input larger than MaxClusterFileBytes is refused before it is decoded
// (ErrClusterTooBig); the node and link counts are checked against their
// limits before anything is sized by them (Validate).
func Parse(data []byte) (Cluster, error) {
	if len(data) > MaxClusterFileBytes {
		return Cluster{}, NewError(ErrClusterTooBig, "file", "%d bytes, at most %d", len(data), MaxClusterFileBytes)
	}
	var c Cluster
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Cluster{}, &ClusterError{Field: "file", Err: ErrClusterFile, Detail: err.Error()}
	}
	if err := c.Validate(); err != nil {
		return Cluster{}, err
	}
	return c, nil
}
