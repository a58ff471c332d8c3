// Package relax is the LP relaxation of the planner's per-sample problem
// and its Lagrangian dual, from which policy's Bound and Optimal take their
// lower bound and their weights: an instance's limited resources indexed
// with their seconds per unit (Resources), the prices a weight vector puts
// on them (Prices), the exact dual value at those prices, every sample at
// its cheapest column (Problem.Lagrangian), and the search for the weights
// that make it tightest (Problem.Solve): cutting planes over the bucketed
// LP (packages bucket, dual and lp), or, for the single-node planner, over
// three resources (Simplex3).
//
// It knows samples only by their options' raw quantities and where they
// may be served; it is pure arithmetic: no I/O, goroutines or clock.
package relax

// Raw holds an option's raw quantities: payload bytes, storage ns (on the
// compute node's clock) and compute ns. It is an alias so that package
// bucket, which sums them, takes a sample's options as they are.
type Raw = [3]float64

// Totals is one (storage, compute) pair's totals: payload bytes (B),
// storage ns on the profile's clock (S), compute ns (P) and samples (N).
type Totals struct{ B, S, P, N float64 }

// Resources is an instance's limited resources, indexed for pricing.
// Resources with a limit have ids 0..NRes-1 in the bottleneck order; an
// unlimited one has id -1 and costs nothing. Per storage node: CPU (per
// ns) and egress (per byte); per compute node: ingress (per byte) and CPU
// (per ns); per (storage, compute) pair, index j*NC+c: the link (per
// byte); and the shared uplink (per byte). Each has its id and its
// seconds per unit.
type Resources struct {
	// NS and NC are the numbers of storage and compute nodes; NRes the
	// number of limited resources.
	NS, NC, NRes                 int
	SCPU, SEgr, CIng, CCPU, Link []int32
	SCPUs, SEgrs, CIngs, CCPUs   []float64
	Links                        []float64
	Up                           int32
	Ups                          float64
}

// Prices are a weight vector's prices per unit: seconds of weighted load
// per byte on each (storage, compute) pair (Alpha, NS*NC), per storage ns
// on each storage node (Beta, NS) and per compute ns on each compute node
// (Gamma, NC).
type Prices struct {
	Alpha []float64
	Beta  []float64
	Gamma []float64
}

// PricesAt returns w's prices; a nil w weighs every resource 1 (the
// unweighted seconds, which break ties).
func (r *Resources) PricesAt(w []float64) Prices {
	wt := func(id int32) float64 {
		switch {
		case id < 0:
			return 0
		case w == nil:
			return 1
		}
		return w[id]
	}
	pr := Prices{make([]float64, r.NS*r.NC), make([]float64, r.NS), make([]float64, r.NC)}
	for j := range r.NS {
		pr.Beta[j] = wt(r.SCPU[j]) * r.SCPUs[j]
		for c := range r.NC {
			pi := j*r.NC + c
			pr.Alpha[pi] = wt(r.SEgr[j])*r.SEgrs[j] + wt(r.Link[pi])*r.Links[pi] + wt(r.Up)*r.Ups + wt(r.CIng[c])*r.CIngs[c]
		}
	}
	for c := range r.NC {
		pr.Gamma[c] = wt(r.CCPU[c]) * r.CCPUs[c]
	}
	return pr
}

// Loads converts pair totals (len NS*NC) into every resource's seconds
// (out, len NRes).
func (r *Resources) Loads(pt []Totals, out []float64) {
	clear(out)
	add := func(id int32, x float64) {
		if id >= 0 {
			out[id] += x
		}
	}
	for j := range r.NS {
		for c := range r.NC {
			t := pt[j*r.NC+c]
			add(r.SCPU[j], t.S*r.SCPUs[j])
			add(r.SEgr[j], t.B*r.SEgrs[j])
			add(r.Link[j*r.NC+c], t.B*r.Links[j*r.NC+c])
			add(r.Up, t.B*r.Ups)
			add(r.CIng[c], t.B*r.CIngs[c])
			add(r.CCPU[c], t.P*r.CCPUs[c])
		}
	}
}
