package membership

import (
	"encoding/json"
	"fmt"
	"math"
	"net"

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
}

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
	return m, nil
}
