package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/policy/explain"
	"github.com/sophon-dl/sophon/policy/instance"
	"github.com/sophon-dl/sophon/profiler"
)

// resourceFlags are the single-link resources a cluster file replaces.
var resourceFlags = []string{"link-mbit", "storage-cores", "compute-cores", "gpu-rate", "storage-speed"}

// clusterOnly refuses the resource flags beside --cluster, and the
// cluster flags without it.
func (o *options) clusterOnly(fs *flag.FlagSet) error {
	var err error
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "cache-bytes" && err == nil {
			err = errors.New("--cache-bytes does not apply with --cluster: cluster plans have no cache yet")
		}
		for _, name := range resourceFlags {
			if f.Name == name && err == nil {
				err = fmt.Errorf("--%s does not apply with --cluster: the cluster file gives every node's resources", name)
			}
		}
	})
	return err
}

// loadCluster reads and parses a cluster file, reading at most one byte
// more than policy.MaxClusterFileBytes so that an oversized file is refused
// without being read whole.
func loadCluster(path string) (policy.Cluster, error) {
	f, err := os.Open(path)
	if err != nil {
		return policy.Cluster{}, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, policy.MaxClusterFileBytes+1))
	if err != nil {
		return policy.Cluster{}, err
	}
	c, err := policy.ParseCluster(data)
	if err != nil {
		return policy.Cluster{}, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// explainCluster is `policy explain --cluster`.
func explainCluster(o *options, p *profiler.Profile, out, errOut io.Writer) int {
	c, err := loadCluster(o.clusterPath)
	if err != nil {
		fmt.Fprintln(errOut, "policy:", err)
		return 2
	}
	r := int(o.replicas)
	if o.replicas == allReplicas {
		r = len(c.Storage)
	} else if r < 1 || r > len(c.Storage) {
		fmt.Fprintf(errOut, "policy: --replicas %d: want 1 to %d (the cluster's storage nodes) or all\n", r, len(c.Storage))
		return 2
	}
	pl, err := instance.Placement(len(p.Samples), c, r, o.seed)
	if o.replicas == allReplicas {
		pl, err = instance.Replicated(len(p.Samples), c)
	}
	if err != nil {
		fmt.Fprintln(errOut, "policy:", err)
		return 2
	}
	fmt.Fprintf(out, "profile: %d samples, pipeline %s, %d ops\n", len(p.Samples), p.Pipeline, p.N())
	fmt.Fprintf(out, "cluster: %d storage nodes, %d compute nodes, %d ranks, %d capped links, shared uplink %.0f B/s (0 = unlimited); %d replicas per sample, %d distinct replica sets\n\n",
		len(c.Storage), len(c.Compute), c.Ranks(), len(c.Links), c.SharedUplinkBytesPerSec, r, len(pl.Sets))
	if err := explain.Cluster(out, p, c, pl, o.detail); err != nil {
		fmt.Fprintln(errOut, "policy:", err)
		if errors.Is(err, policy.ErrUnknownPolicy) {
			return 2
		}
		return 1
	}
	return 0
}

// replicas is --replicas: a count, or allReplicas.
type replicas int

// allReplicas is --replicas all: every sample on every storage node.
const allReplicas replicas = -1

func (r *replicas) String() string {
	if *r == allReplicas {
		return "all"
	}
	return strconv.Itoa(int(*r))
}

func (r *replicas) Set(s string) error {
	if s == "all" {
		*r = allReplicas
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("%q: want a count of at least 1, or all", s)
	}
	*r = replicas(n)
	return nil
}
