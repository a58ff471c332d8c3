package policy

import (
	"math"
	"slices"

	"github.com/sophon-dl/sophon/profiler"
)

// NameRoundRobin names the round-robin cluster policy.
const NameRoundRobin = "roundrobin"

// ClusterAll returns every cluster policy's plan, in ClusterNames order,
// and the bound (computed once, by the optimal policy).
func ClusterAll(p *profiler.Profile, c Cluster, pl *Placement) ([]Plan, ClusterBoundResult, error) {
	cm, err := newCModel(p, &c, pl, true)
	if err != nil {
		return nil, ClusterBoundResult{}, err
	}
	noff, rr, so := cm.noOff(), cm.roundRobin(), cm.sophon()
	opt, b := cm.optimal(noff, rr, so)
	return []Plan{noff, rr, so, opt}, b, nil
}

// ClusterNoOff sends every sample raw (split 0), each from the replica
// that is least loaded when its turn comes: samples are taken in order and
// each goes to the member of its replica set whose egress time, with the
// sample added, is smallest (ties to the fewest bytes so far, then to the
// first in the set).
func ClusterNoOff(p *profiler.Profile, c Cluster, pl *Placement) (Plan, error) {
	cm, err := newCModel(p, &c, pl, false)
	if err != nil {
		return Plan{}, err
	}
	return cm.noOff(), nil
}

func (cm *cmodel) noOff() Plan {
	p, pl := cm.m.p, cm.pl
	rep, opt := make([]int16, len(p.Samples)), make([]uint8, len(p.Samples))
	bytes := make([]float64, cm.ns)
	for i := range p.Samples {
		b := float64(p.Samples[i].Bytes[0])
		best, bt, bb := int16(0), math.Inf(1), math.Inf(1)
		for _, j := range pl.Sets[pl.Set[i]] {
			nb := bytes[j] + b
			if t := nb * cm.sEgrs[j]; t < bt || (t == bt && nb < bb) {
				best, bt, bb = j, t, nb
			}
		}
		rep[i] = best
		bytes[best] += b
	}
	return cm.plan(NameNoOff, rep, opt)
}

// ClusterRoundRobin sends every sample raw from its replicas in turn,
// ignoring every rate: the k-th sample (in profile order) with a given
// replica set goes to the set's (k mod size)-th member. It is the baseline
// a rate-blind client gives.
func ClusterRoundRobin(p *profiler.Profile, c Cluster, pl *Placement) (Plan, error) {
	cm, err := newCModel(p, &c, pl, false)
	if err != nil {
		return Plan{}, err
	}
	return cm.roundRobin(), nil
}

func (cm *cmodel) roundRobin() Plan {
	pl := cm.pl
	n := len(cm.m.p.Samples)
	rep, opt := make([]int16, n), make([]uint8, n)
	turn := make([]int, len(pl.Sets))
	for i := range n {
		set := pl.Sets[pl.Set[i]]
		rep[i] = set[turn[pl.Set[i]]%len(set)]
		turn[pl.Set[i]]++
	}
	return cm.plan(NameRoundRobin, rep, opt)
}

// rateReplicas gives each sample a replica in proportion to the replicas'
// egress rates: within each replica set, the k-th sample goes to the
// member furthest below its share (rate over the set's total rate) of the
// set's first k samples; where any storage node's egress is unlimited,
// every node weighs the same.
func (cm *cmodel) rateReplicas() []int16 {
	pl, c := cm.pl, cm.c
	n := len(cm.m.p.Samples)
	rep := make([]int16, n)
	wt := make([]float64, cm.ns)
	for j, s := range c.Storage {
		wt[j] = s.EgressBytesPerSec
	}
	if slices.Contains(wt, 0) {
		for j := range wt {
			wt[j] = 1
		}
	}
	off := make([]int, len(pl.Sets)+1)
	for k, set := range pl.Sets {
		off[k+1] = off[k] + len(set)
	}
	assigned := make([]float64, off[len(pl.Sets)])
	seen := make([]float64, len(pl.Sets))
	for i := range n {
		k := pl.Set[i]
		set := pl.Sets[k]
		var sum float64
		for _, j := range set {
			sum += wt[j]
		}
		seen[k]++
		best, bd := 0, math.Inf(-1)
		for jj, j := range set {
			if d := wt[j]/sum*seen[k] - assigned[off[k]+jj]; d > bd {
				best, bd = jj, d
			}
		}
		assigned[off[k]+best]++
		rep[i] = set[best]
	}
	return rep
}

// ClusterSOPHON applies the paper's greedy on every storage agent. First
// each sample gets a replica in proportion to the replicas' egress rates:
// within each replica set, the k-th sample goes to the member furthest
// below its share (rate over the set's total rate) of the set's first k
// samples; where any storage node's egress is unlimited, every node weighs
// the same. Then each agent runs SOPHON's greedy (see SOPHON) on its own
// samples, with its egress as the link and its cores as the storage CPU:
// the split with the smallest output, samples by decreasing bytes saved
// per storage CPU second while the agent's egress time exceeds its CPU
// time, with SOPHON's guard. An agent with unlimited egress offloads
// nothing. Like SOPHON, it never compresses and never uses SplitCut. On
// SingleNode(r) its splits are SOPHON(p, r)'s.
func ClusterSOPHON(p *profiler.Profile, c Cluster, pl *Placement) (Plan, error) {
	cm, err := newCModel(p, &c, pl, false)
	if err != nil {
		return Plan{}, err
	}
	return cm.sophon(), nil
}

func (cm *cmodel) sophon() Plan {
	m, p := cm.m, cm.m.p
	n := len(p.Samples)
	rep, opt := cm.rateReplicas(), make([]uint8, n)
	// Per agent: SOPHON's candidates and greedy.
	type cand struct {
		eff   float64
		i     int32
		j     int16
		k     int8
		saved float64
		sns   float64
	}
	cands := make([]cand, 0, n)
	// Per agent: the raw payload it sends, and the storage ns sending it
	// costs.
	bytes, send := make([]float64, cm.ns), make([]float64, cm.ns)
	for i := range p.Samples {
		s := &p.Samples[i]
		bytes[rep[i]] += float64(s.Bytes[0])
		send[rep[i]] += float64(s.Bytes[0]) * m.perByte
		k := 0
		for j := 1; j <= m.n; j++ {
			if s.Bytes[j] < s.Bytes[k] {
				k = j
			}
		}
		if k == 0 {
			continue
		}
		sns := float64(s.PrefixNS(k))
		saved := float64(s.Bytes[0] - s.Bytes[k])
		eff := math.Inf(1)
		if sns > 0 {
			eff = saved / sns
		}
		cands = append(cands, cand{eff, int32(i), rep[i], int8(k), saved, sns})
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.j != b.j {
			return int(a.j) - int(b.j)
		}
		if a.eff != b.eff {
			return cmpDesc(a.eff, b.eff)
		}
		return int(a.i - b.i)
	})
	var sns float64
	for x, cd := range cands {
		j := cd.j
		if x == 0 || cands[x-1].j != j {
			sns = send[j] // the next agent: sending its raw bytes
		}
		link := func(b float64) float64 { return b * cm.sEgrs[j] }
		stor := func(s float64) float64 { return s * cm.sCPUs[j] }
		if bytes[j] < 0 || link(bytes[j]) <= stor(sns) || !(cd.eff > 0) {
			bytes[j] = -1 // this agent is done
			continue
		}
		nb, ns := bytes[j]-cd.saved, sns+cd.sns-cd.saved*m.perByte
		if link(nb) <= stor(ns) && max(link(nb), stor(ns)) > max(link(bytes[j]), stor(sns)) {
			bytes[j] = -1 // the guard: this overshooting pick does not pay
			continue
		}
		bytes[j], sns = nb, ns
		opt[cd.i] = uint8(m.option(int(cd.k), false))
	}
	return cm.plan(NameSOPHON, rep, opt)
}

// ClusterOptimal minimises the predicted epoch time over a replica and a
// split (compressed or not, SplitCut where the profile has the cut's
// measurements) per sample.
//
// Method: the bucketed LP of ClusterBound gives dual prices and a
// fractional plan (a mix of whole plans, so per bucket a few replica and
// option columns); each sample in turn takes the column of its bucket's
// mix that leaves the resources it loads least filled relative to the
// fractional plan's loads, so that every resource fills in step towards
// them; a local pass then repeatedly sets a target between the epoch and
// the bound and moves samples off the resources above it, those with the
// cheapest priced cost per second removed first, never loading another
// resource past the target. The result is compared with the baselines'
// plans (ClusterNoOff, ClusterRoundRobin, ClusterSOPHON) and the best one
// kept, so it never predicts worse than they do. Tiny instances (at most
// 65,536 joint assignments) are solved exhaustively. The cost is a few
// passes over the samples plus the LP on the buckets (docs/policy.md gives
// the figures at 1.28 M samples).
func ClusterOptimal(p *profiler.Profile, c Cluster, pl *Placement) (Plan, error) {
	plan, _, err := ClusterSolve(p, c, pl)
	return plan, err
}

// ClusterSolve returns ClusterOptimal's plan and the bound it computes on
// the way (ClusterBound's), for the price of one.
func ClusterSolve(p *profiler.Profile, c Cluster, pl *Placement) (Plan, ClusterBoundResult, error) {
	cm, err := newCModel(p, &c, pl, true)
	if err != nil {
		return Plan{}, ClusterBoundResult{}, err
	}
	plan, b := cm.optimal(cm.noOff(), cm.roundRobin(), cm.sophon())
	return plan, b, nil
}
