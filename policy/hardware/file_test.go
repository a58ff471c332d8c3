package hardware

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	data, err := os.ReadFile("../cmd/policy/testdata/cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Storage) != 3 || c.Storage[0].EgressBytesPerSec != 250e6 || c.Compute[1].Ranks != 4 ||
		len(c.Links) != 1 || c.Links[0].Compute != "c1" || c.Ranks() != 8 {
		t.Errorf("parsed %+v", c)
	}
	// JSON is YAML too.
	if _, err := Parse([]byte(`{"storage": [{"name": "s"}], "compute": [{"name": "c"}]}`)); err != nil {
		t.Errorf("JSON: %v", err)
	}
	for _, c := range []struct {
		name, doc string
		want      error
		detail    string // in the error's text
	}{
		{"unknown field", "storage: [{name: s, egres_bytes_per_sec: 1}]\ncompute: [{name: c}]", ErrClusterFile, `"egres_bytes_per_sec"`},
		{"unknown top-level field", "storage: [{name: s}]\ncompute: [{name: c}]\nuplink: 5", ErrClusterFile, `"uplink"`},
		{"duplicate field", "storage: [{name: s, cores: 1, cores: 2}]\ncompute: [{name: c}]", ErrClusterFile, "cores"},
		{"wrong type", "storage: [{name: s, cores: many}]\ncompute: [{name: c}]", ErrClusterFile, "cores"},
		{"not yaml", "storage: [", ErrClusterFile, ""},
		{"empty", "", ErrNoNodes, "storage"},
		{"negative", "storage: [{name: s, cores: -1}]\ncompute: [{name: c}]", ErrBadFigure, "storage[0].cores"},
		{"unknown link node", "storage: [{name: s}]\ncompute: [{name: c}]\nlinks: [{storage: s, compute: d, bytes_per_sec: 1}]", ErrUnknownNode, `"d"`},
		{"too large", strings.Repeat("#", MaxClusterFileBytes+1), ErrClusterTooBig, "file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.doc))
			if !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.detail) {
				t.Errorf("got %v, want %v mentioning %s", err, c.want, c.detail)
			}
		})
	}
}

// FuzzParseCluster: outside bytes never crash the decoder, and whatever
// it accepts is a valid cluster.
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("../cmd/policy/testdata/cluster.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"storage": [{"name": "s"}], "compute": [{"name": "c", "ranks": 2}]}`))
	f.Add([]byte("storage: [{name: s}]\ncompute: [{name: c}]\nlinks: [{storage: s, compute: c, bytes_per_sec: 1}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data)
		if err != nil {
			var ce *ClusterError
			if !errors.As(err, &ce) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted an invalid cluster: %v", err)
		}
	})
}

// TestOver: the pooled figures are spread in proportion to the nodes' own,
// an unknown egress shares the link equally, an unknown core count is
// unlimited, and one node is SingleNode.
func TestOver(t *testing.T) {
	r := Resources{LinkBytesPerSec: 100, StorageCores: 3, ComputeCores: 2, GPUSamplesPerSec: 50, StorageSpeed: 0.5, StorageNSPerByte: 4}
	c := r.Over([]StorageNode{{Name: "a", EgressBytesPerSec: 30, Cores: 2}, {Name: "b", EgressBytesPerSec: 10, Cores: 1}})
	if len(c.Storage) != 2 || c.Storage[0] != (StorageNode{Name: "a", EgressBytesPerSec: 75, Cores: 2}) ||
		c.Storage[1] != (StorageNode{Name: "b", EgressBytesPerSec: 25, Cores: 1}) {
		t.Errorf("storage %+v", c.Storage)
	}
	if len(c.Compute) != 1 || c.Compute[0].Cores != 2 || c.Compute[0].GPUSamplesPerSec != 50 || c.Ranks() != 1 ||
		c.StorageSpeed != 0.5 || c.StorageNSPerByte != 4 {
		t.Errorf("cluster %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
	c = r.Over([]StorageNode{{Name: "a", EgressBytesPerSec: 30, Cores: 2}, {Name: "b"}})
	if c.Storage[1] != (StorageNode{Name: "b", EgressBytesPerSec: 50}) || c.Storage[0] != (StorageNode{Name: "a", EgressBytesPerSec: 50, Cores: 3}) {
		t.Errorf("unknown node: %+v", c.Storage)
	}
	one := r.Over([]StorageNode{{Name: "storage", EgressBytesPerSec: 7, Cores: 9}})
	if single := SingleNode(r); one.Storage[0] != single.Storage[0] || one.Compute[0] != single.Compute[0] {
		t.Errorf("one node: %+v, SingleNode %+v", one, single)
	}
}
