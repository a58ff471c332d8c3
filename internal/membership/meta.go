package membership

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strings"

	"github.com/hashicorp/memberlist"
)

// Role says what an agent does in the cluster.
type Role string

const (
	// RoleStorage is a storage agent: it serves samples over gRPC.
	RoleStorage Role = "storage"
	// RoleCompute is a compute agent: it fetches samples and feeds a GPU.
	RoleCompute Role = "compute"
)

// Valid reports whether r is one of the known roles.
func (r Role) Valid() bool { return r == RoleStorage || r == RoleCompute }

// Meta is what every agent announces. It travels as JSON in memberlist's node
// meta, which holds at most [memberlist.MetaMaxSize] (512) bytes; [New] and
// [Node.UpdateMeta] reject a Meta that does not fit with [ErrMetaTooLarge].
type Meta struct {
	// Role is required.
	Role Role `json:"role"`
	// GRPCAddr is the host:port of the agent's gRPC server. Empty means the
	// agent serves none (a compute agent, typically).
	GRPCAddr string `json:"grpc"`
	// Cores is the CPU budget the agent runs under (fractions allowed). Zero
	// means unknown.
	Cores float64 `json:"cores"`
	// Fingerprint identifies the dataset a storage agent serves. Empty means
	// none or not yet known.
	Fingerprint string `json:"fp,omitempty"`
	// Version is the agent's build version.
	Version string `json:"ver"`

	// Placement, announced by storage agents (see internal/placement). The
	// fields are compact: the full layout and held list are in the agent's
	// Info, which gossip's 512 bytes could not hold.

	// Replicas is how many storage agents hold each shard (--replicas).
	// Zero means every agent holds every shard.
	Replicas int `json:"rep,omitempty"`
	// Shards is the number of shards in the agent's layout. Zero means an
	// agent that announces no placement (one that predates it).
	Shards int `json:"sh,omitempty"`
	// Layout is the layout's digest (placement.Layout.Digest, 16 hex
	// digits). Storage agents place shards together only with peers of
	// the same fingerprint, layout and replicas.
	Layout string `json:"lay,omitempty"`
	// Held is the digest of the shards the agent holds (placement.Digest,
	// 16 hex digits), so a compute agent can tell whether the held list it
	// read from Info is still current.
	Held string `json:"held,omitempty"`
	// Egress is the agent's egress rate in bytes per second (--egress).
	// Zero means unknown.
	Egress uint64 `json:"egr,omitempty"`
}

// maxDigest bounds Meta.Layout and Meta.Held.
const maxDigest = 64

// Validate checks m and its encoded size.
func (m Meta) Validate() error {
	_, err := m.encode()
	return err
}

// encode validates m and returns its wire form.
func (m Meta) encode() ([]byte, error) {
	if !m.Role.Valid() {
		return nil, fmt.Errorf("%w: role %q, want %q or %q", ErrBadMeta, m.Role, RoleStorage, RoleCompute)
	}
	if m.Cores < 0 || math.IsNaN(m.Cores) || math.IsInf(m.Cores, 0) {
		return nil, fmt.Errorf("%w: cores %v", ErrBadMeta, m.Cores)
	}
	if m.GRPCAddr != "" {
		if _, _, err := net.SplitHostPort(m.GRPCAddr); err != nil {
			return nil, fmt.Errorf("%w: grpc address %q: %v", ErrBadMeta, m.GRPCAddr, err)
		}
	}
	if err := m.checkPlacement(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadMeta, err)
	}
	if len(b) > memberlist.MetaMaxSize {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrMetaTooLarge, len(b), memberlist.MetaMaxSize)
	}
	return b, nil
}

// decodeMeta parses a peer's node meta.
func decodeMeta(b []byte) (Meta, error) {
	var m Meta
	if err := json.Unmarshal(b, &m); err != nil {
		return Meta{}, fmt.Errorf("%w: %v", ErrBadMeta, err)
	}
	if m.Role == "" {
		return Meta{}, fmt.Errorf("%w: no role", ErrBadMeta)
	}
	if err := m.checkPlacement(); err != nil {
		return Meta{}, err
	}
	return m, nil
}

// checkPlacement checks the placement fields: no negative counts, digests
// of hex digits and bounded length.
func (m Meta) checkPlacement() error {
	if m.Replicas < 0 || m.Shards < 0 {
		return fmt.Errorf("%w: replicas %d, shards %d", ErrBadMeta, m.Replicas, m.Shards)
	}
	for _, d := range []struct{ name, v string }{{"layout", m.Layout}, {"held", m.Held}} {
		if len(d.v) > maxDigest || strings.Trim(d.v, "0123456789abcdef") != "" {
			return fmt.Errorf("%w: %s digest %q is not at most %d lower-case hex digits", ErrBadMeta, d.name, d.v, maxDigest)
		}
	}
	return nil
}
