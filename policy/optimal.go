package policy

import (
	"math"
	"slices"

	"github.com/sophon-dl/sophon/policy/internal/lp"
	"github.com/sophon-dl/sophon/policy/internal/relax"
)

// passRules are the improvement pass's settings: the cluster planner's
// (clusterPass) or the single-node one's (singlePass), which the model
// carries (cmodel.pass).
type passRules struct {
	// rounds caps the rounds; the pass stops within tol (relative) of the
	// bound, and after a round that lowers the epoch by less than minGain
	// (relative; with strict, after a round that does not lower it).
	rounds       int
	tol, minGain float64
	// strict is the single-node planner's pass, which the single-node
	// goldens pin: the plan starts from every sample's cheapest column at
	// the LP's weights (not the rounded LP plan), each round takes load
	// off the bottleneck alone, and a move is made only where it lowers
	// the epoch (every resource ends below the epoch before it), over
	// every proposal. Otherwise each round steps towards the bound (tau,
	// see improve), which a cluster's many near-equal resources need.
	//
	// With strict rules the bound's dual search is the single-node
	// planner's too (relax.Problem.Solve's three-resource search), to
	// lpTol.
	strict bool
	// lpTol is the relative gap at which the single-node bound's search
	// stops.
	lpTol float64
}

var (
	clusterPass = passRules{rounds: 6, tol: 1e-4, minGain: 1e-4}
	singlePass  = passRules{rounds: 16, tol: 1e-6, strict: true, lpTol: 1e-6}
)

// maxRefused ends a (cluster) round after this many proposals in a row
// could not be applied: the cheaper ones are spent and the rest are
// blocked.
const maxRefused = 4096

// optimal is Optimal (without a cache) given the baselines' plans, with the bound. A
// baseline that predicts better than the rounded plan is improved in its
// turn (unless the instance was solved exactly), and the best plan kept.
func (cm *cmodel) optimal(bases ...Plan) (Plan, BoundResult) {
	bk, sol := cm.solve()
	w := sol.W
	if w == nil {
		w = make([]float64, cm.NRes)
	}
	var rep []int16
	var opt []uint8
	var pt []relax.Totals
	var g float64
	if cm.pass.strict {
		n := len(cm.m.p.Samples)
		rep, opt, pt = make([]int16, n), make([]uint8, n), make([]relax.Totals, cm.NS*cm.NC)
		pr := cm.PricesAt(w)
		g = cm.Lagrangian(&pr, rep, opt, pt)
	} else {
		rep, opt, pt, g = cm.round(bk, cm.mix(bk, sol), w, cm.lpLoads(sol))
	}
	b := cm.boundResult(bk, sol, g)
	r, o, exact := cm.exact()
	if exact {
		rep, opt = r, o
	} else {
		cm.improve(rep, opt, pt, w, b.Seconds)
	}
	best := cm.plan(NameOptimal, rep, opt)
	for _, bp := range bases {
		if bp.Pred.Seconds >= best.Pred.Seconds {
			continue
		}
		next := bp
		next.Policy = NameOptimal
		next.Replica = slices.Clone(bp.Replica)
		next.Split = slices.Clone(bp.Split)
		next.Compress = slices.Clone(bp.Compress)
		if !exact {
			rep, opt := slices.Clone(bp.Replica), cm.m.choices(bp.Split, bp.Compress)
			cm.improve(rep, opt, cm.pairTotals(rep, opt), w, b.Seconds)
			if c := cm.plan(NameOptimal, rep, opt); c.Pred.Seconds < next.Pred.Seconds {
				next = c
			}
		}
		best = next
	}
	return best, b
}

// lpLoads is the loads of the LP's fractional plan (tiny where zero, as
// round divides by them).
func (cm *cmodel) lpLoads(sol *relax.Solution) []float64 {
	u := make([]float64, cm.NRes)
	for k, c := range sol.Cuts {
		for r, x := range c.Loads {
			u[r] += sol.Lam[k] * x
		}
	}
	for r := range u {
		u[r] = max(u[r], 1e-300)
	}
	return u
}

// bucketMix is the support of the bucketed LP's fractional plan: per
// bucket, the columns (replica position * nopt + option) some plan of
// positive weight gives it.
type bucketMix struct {
	start []int32 // bucket b's columns are col[start[b]:start[b+1]]
	col   []uint16
}

// mix lists, per bucket, the columns of the LP's plans of positive
// weight, in the plans' order.
func (cm *cmodel) mix(bk *relax.Buckets, sol *relax.Solution) *bucketMix {
	mx := &bucketMix{start: make([]int32, bk.N+1)}
	for b := range bk.N {
		from := len(mx.col)
		for k, c := range sol.Cuts {
			if col := c.Choice[b]; sol.Lam[k] > 0 && !slices.Contains(mx.col[from:], col) {
				mx.col = append(mx.col, col)
			}
		}
		mx.start[b+1] = int32(len(mx.col))
	}
	return mx
}

// round assigns every sample a column of its bucket's mix, in profile
// order: the one that leaves the resources it loads least filled relative
// to the LP plan's loads u, so that every resource fills in step towards
// u. On the same pass it computes the exact Lagrangian dual value at w (the
// bound); it returns the replicas, options, pair totals and that value.
func (cm *cmodel) round(bk *relax.Buckets, mx *bucketMix, w, u []float64) ([]int16, []uint8, []relax.Totals, float64) {
	m, p, pl := cm.m, cm.m.p, cm.pl
	n, nopt, nc := len(p.Samples), m.nopt(), cm.NC
	pr := cm.PricesAt(w)
	buf := make([]raw, nopt)
	rep, opt := make([]int16, n), make([]uint8, n)
	pt := make([]relax.Totals, cm.NS*nc)
	L := make([]float64, cm.NRes)
	var g float64
	for i := range p.Samples {
		m.options(&p.Samples[i], buf)
		c := int(cm.Node[pl.Rank[i]])
		set := pl.Sets[pl.Set[i]]
		gc := pr.Gamma[c]
		best := math.Inf(1)
		for _, j := range set {
			a, be := pr.Alpha[int(j)*nc+c], pr.Beta[j]
			for _, q := range buf {
				if v := a*q[0] + be*q[1] + gc*q[2]; v < best {
					best = v
				}
			}
		}
		g += best
		b := bk.Of[i]
		bset := pl.Sets[bk.Set[b]]
		// The column of the bucket's mix that leaves the resources it
		// loads least filled relative to the LP's loads u: the plan fills
		// every resource in step, towards the LP's loads.
		pick, pf := -1, math.Inf(1)
		for e := mx.start[b]; e < mx.start[b+1]; e++ {
			col := int(mx.col[e])
			j := int(bset[col/nopt])
			q := buf[col%nopt]
			var d deltas
			cm.column(&d, j, c, q, 1)
			fill := 0.0
			for k := range d.n {
				fill = max(fill, (L[d.id[k]]+d.x[k])/u[d.id[k]])
			}
			if fill < pf {
				pick, pf = int(e), fill
			}
		}
		if pick < 0 {
			pick = int(mx.start[b])
		}
		col := int(mx.col[pick])
		j, q := bset[col/nopt], buf[col%nopt]
		var d deltas
		cm.column(&d, int(j), c, q, 1)
		for k := range d.n {
			L[d.id[k]] += d.x[k]
		}
		rep[i], opt[i] = j, uint8(col%nopt)
		t := &pt[int(j)*nc+c]
		t.B += q[0]
		t.S += q[1]
		t.P += q[2]
		t.N++
	}
	return rep, opt, pt, g
}

// deltas is the change a move makes to a few resources' loads.
type deltas struct {
	id [12]int32
	x  [12]float64
	n  int
}

func (d *deltas) add(id int32, x float64) {
	if id < 0 || x == 0 {
		return
	}
	for k := range d.n {
		if d.id[k] == id {
			d.x[k] += x
			return
		}
	}
	d.id[d.n], d.x[d.n] = id, x
	d.n++
}

// column adds sign times the loads of raw quantities q served from storage
// node j to compute node c.
func (cm *cmodel) column(d *deltas, j, c int, q raw, sign float64) {
	pi := j*cm.NC + c
	d.add(cm.SEgr[j], sign*q[0]*cm.SEgrs[j])
	d.add(cm.Link[pi], sign*q[0]*cm.Links[pi])
	d.add(cm.Up, sign*q[0]*cm.Ups)
	d.add(cm.CIng[c], sign*q[0]*cm.CIngs[c])
	d.add(cm.SCPU[j], sign*q[1]*cm.SCPUs[j])
	d.add(cm.CCPU[c], sign*q[2]*cm.CCPUs[c])
}

// improve lowers the plan's epoch by local moves, in place, under the
// model's passRules. Each round sets a target tau a step below the current
// epoch T, towards the bound; the resources above tau are "over". Every
// sample whose column loads an over resource proposes its best alternative
// column: the one that most cheaply (in w-priced seconds per second of
// over-load removed) reduces the over resources' total. Proposals are
// applied cheapest first, each only if it takes load off an over resource
// and no resource it adds load to ends above tau, until no resource is
// over. A round that clears every over resource doubles the step (up to
// half the distance to the bound); one that lowers the epoch by less than
// minGain ends the pass. With strict rules the one over resource is the
// bottleneck (the first of equals), tau is the current epoch, falling with
// every move made, and every proposal is tried.
func (cm *cmodel) improve(rep []int16, opt []uint8, pt []relax.Totals, w []float64, lb float64) {
	if cm.NRes == 0 {
		return
	}
	rules := cm.pass
	m, p := cm.m, cm.m.p
	nopt, nc := m.nopt(), cm.NC
	L := make([]float64, cm.NRes)
	cm.Loads(pt, L)
	floor := max(lb, cm.gpuMax)
	pw := cm.PricesAt(w)
	buf := make([]raw, nopt)
	moves := make([]move, 0, len(p.Samples)/8)
	ind := make([]float64, cm.NRes)
	overPair := make([]bool, cm.NS*nc)
	step := 0.125
	for range rules.rounds {
		T := lp.MaxOf(L)
		if T <= cm.gpuMax || T <= floor*(1+rules.tol) {
			return
		}
		tau := T - (T-floor)*step
		over := 0
		for r, x := range L {
			ind[r] = 0
			if x > tau && !rules.strict {
				ind[r] = 1
				over++
			}
		}
		if rules.strict {
			tau, over = T, 1
			ind[slices.Index(L, T)] = 1
		}
		po := cm.PricesAt(ind)
		for j := range cm.NS {
			for c := range nc {
				overPair[j*nc+c] = po.Alpha[j*nc+c] > 0 || po.Beta[j] > 0 || po.Gamma[c] > 0
			}
		}
		moves = cm.propose(moves[:0], rep, opt, &po, &pw, overPair, buf, rules.strict, w)
		// Cheapest first: sort the cheapest sixteenth (at least 4096),
		// and the rest only if those do not clear the over resources.
		head := partitionCheapest(moves, max(4096, len(moves)/16))
		refused := 0
		for _, ms := range [][]move{moves[:head], moves[head:]} {
			if over == 0 || refused >= maxRefused {
				break
			}
			slices.SortFunc(ms, func(a, b move) int {
				if c := cmpDesc(b.key, a.key); c != 0 {
					return c
				}
				return int(a.i - b.i)
			})
			for _, mv := range ms {
				if over == 0 || refused >= maxRefused {
					break
				}
				cleared, ok := cm.apply(mv, rep, opt, pt, L, tau, rules.strict)
				switch {
				case rules.strict && ok:
					tau = lp.MaxOf(L)
				case !rules.strict:
					over -= cleared
					if refused++; ok {
						refused = 0
					}
				}
			}
		}
		if t := lp.MaxOf(L); t > T*(1-rules.minGain) || rules.strict && t >= T {
			return
		}
		if over == 0 {
			step = min(0.5, 2*step)
		}
	}
}

// propose appends to moves, for every sample whose pair loads a resource
// priced in po (the over resources), its best alternative column: the one
// that takes po-priced load off most cheaply in pw-priced seconds per
// second removed. With strict rules the cost is summed resource by
// resource (w, in id order), as the single-node planner priced it.
func (cm *cmodel) propose(moves []move, rep []int16, opt []uint8, po, pw *relax.Prices, overPair []bool, buf []raw, strict bool, w []float64) []move {
	m, p, pl, nc := cm.m, cm.m.p, cm.pl, cm.NC
	minGain := 1e-12
	if strict {
		minGain = 0
	}
	for i := range p.Samples {
		c := int(cm.Node[pl.Rank[i]])
		j0 := int(rep[i])
		if !overPair[j0*nc+c] {
			continue
		}
		m.options(&p.Samples[i], buf)
		q0 := buf[opt[i]]
		cur := po.Alpha[j0*nc+c]*q0[0] + po.Beta[j0]*q0[1] + po.Gamma[c]*q0[2]
		if cur <= 0 {
			continue
		}
		curW := pw.Alpha[j0*nc+c]*q0[0] + pw.Beta[j0]*q0[1] + pw.Gamma[c]*q0[2]
		bk, bj, bo := math.Inf(1), int16(-1), 0
		for _, j := range pl.Sets[pl.Set[i]] {
			ao, bo2, go2 := po.Alpha[int(j)*nc+c], po.Beta[j], po.Gamma[c]
			aw, bw, gw := pw.Alpha[int(j)*nc+c], pw.Beta[j], pw.Gamma[c]
			for o, q := range buf {
				if math.IsInf(q[0], 1) {
					continue
				}
				gain := cur - (ao*q[0] + bo2*q[1] + go2*q[2])
				if gain <= cur*minGain {
					continue
				}
				cost := aw*q[0] + bw*q[1] + gw*q[2] - curW
				if strict {
					cost = cm.priced(w, j0, int(j), c, q0, q)
				}
				if k := cost / gain; k < bk {
					bk, bj, bo = k, j, o
				}
			}
		}
		if bj >= 0 {
			moves = append(moves, move{bk, int32(i), bj, uint8(bo)})
		}
	}
	return moves
}

// priced is the w-priced seconds that moving a sample on compute node c
// from column (j0, q0) to (j, q) adds, summed resource by resource in id
// order.
func (cm *cmodel) priced(w []float64, j0, j, c int, q0, q raw) float64 {
	var d deltas
	cm.column(&d, j0, c, q0, -1)
	cm.column(&d, j, c, q, 1)
	var sum float64
	for last := int32(-1); ; {
		k := -1
		for e := range d.n {
			if d.id[e] > last && (k < 0 || d.id[e] < d.id[k]) {
				k = e
			}
		}
		if k < 0 {
			return sum
		}
		sum += w[d.id[k]] * d.x[k]
		last = d.id[k]
	}
}

// move is a proposed change of one sample's column, and its priced cost
// per second of over-load removed.
type move struct {
	key float64
	i   int32
	j   int16
	o   uint8
}

// partitionCheapest moves the about n cheapest moves to the front and
// returns how many it moved: those whose key is at most the n-th smallest
// key of an evenly spaced sample. It works in place; the order within
// each part is arbitrary (each is sorted afterwards).
func partitionCheapest(moves []move, n int) int {
	if n >= len(moves) {
		return len(moves)
	}
	stride := max(1, len(moves)/1024)
	var keys []float64
	for i := 0; i < len(moves); i += stride {
		keys = append(keys, moves[i].key)
	}
	slices.Sort(keys)
	th := keys[min(len(keys)-1, n*len(keys)/len(moves))]
	k := 0
	for i := range moves {
		if moves[i].key <= th {
			moves[k], moves[i] = moves[i], moves[k]
			k++
		}
	}
	return k
}

// apply makes move mv when it takes load off a resource above tau and
// adds none past tau, updating the loads L and pair totals pt; it returns
// how many resources it brought down to tau and whether it made the move.
// With strict rules it makes the move when every resource ends below tau,
// each load updated as (load - old column's) + new column's, as the
// single-node planner did.
func (cm *cmodel) apply(mv move, rep []int16, opt []uint8, pt []relax.Totals, L []float64, tau float64, strict bool) (int, bool) {
	m, p, nc := cm.m, cm.m.p, cm.NC
	i := int(mv.i)
	c := int(cm.Node[cm.pl.Rank[i]])
	qo := m.optRaw(&p.Samples[i], int(opt[i]))
	qn := m.optRaw(&p.Samples[i], int(mv.o))
	cleared := 0
	if strict {
		var out, in deltas
		cm.column(&out, int(rep[i]), c, qo, -1)
		cm.column(&in, int(mv.j), c, qn, 1)
		next := func(r int32) float64 {
			x := L[r]
			for k := range out.n {
				if out.id[k] == r {
					x += out.x[k]
				}
			}
			for k := range in.n {
				if in.id[k] == r {
					x += in.x[k]
				}
			}
			return x
		}
		for r := range L {
			if next(int32(r)) >= tau {
				return 0, false
			}
		}
		for _, d := range []*deltas{&out, &in} {
			for k := range d.n {
				L[d.id[k]] += d.x[k]
			}
		}
	} else {
		var d deltas
		cm.column(&d, int(rep[i]), c, qo, -1)
		cm.column(&d, int(mv.j), c, qn, 1)
		helps := false
		for k := range d.n {
			id, x := d.id[k], d.x[k]
			if x > 0 && L[id]+x > tau {
				return 0, false
			}
			if x < 0 && L[id] > tau {
				helps = true
			}
		}
		if !helps {
			return 0, false
		}
		for k := range d.n {
			id := d.id[k]
			was := L[id] > tau
			L[id] += d.x[k]
			if was && L[id] <= tau {
				cleared++
			}
		}
	}
	o, n := &pt[int(rep[i])*nc+c], &pt[int(mv.j)*nc+c]
	o.B, o.S, o.P, o.N = o.B-qo[0], o.S-qo[1], o.P-qo[2], o.N-1
	n.B, n.S, n.P, n.N = n.B+qn[0], n.S+qn[1], n.P+qn[2], n.N+1
	rep[i], opt[i] = mv.j, mv.o
	return cleared, true
}

// clusterExactLimit is the largest number of joint assignments exact
// enumerates.
const clusterExactLimit = 1 << 16

// exact enumerates every joint assignment of a tiny instance.
func (cm *cmodel) exact() ([]int16, []uint8, bool) {
	m, p, pl := cm.m, cm.m.p, cm.pl
	n, nopt := len(p.Samples), m.nopt()
	opts := make([][]raw, n)
	combos := 1
	for i := range n {
		opts[i] = make([]raw, nopt)
		m.options(&p.Samples[i], opts[i])
		avail := 0
		for _, q := range opts[i] {
			if !math.IsInf(q[0], 1) {
				avail++
			}
		}
		combos *= avail * len(pl.Sets[pl.Set[i]])
		if combos > cm.exactLimit {
			return nil, nil, false
		}
	}
	rep, opt := make([]int16, n), make([]uint8, n)
	bestRep, bestOpt := make([]int16, n), make([]uint8, n)
	pt := make([]relax.Totals, cm.NS*cm.NC)
	L := make([]float64, cm.NRes)
	bestT := math.Inf(1)
	var rec func(i int)
	rec = func(i int) {
		if i == n {
			cm.Loads(pt, L)
			if t := cm.epoch(L); t < bestT {
				bestT = t
				copy(bestRep, rep)
				copy(bestOpt, opt)
			}
			return
		}
		c := int(cm.Node[pl.Rank[i]])
		for _, j := range pl.Sets[pl.Set[i]] {
			t := &pt[int(j)*cm.NC+c]
			for o, q := range opts[i] {
				if math.IsInf(q[0], 1) {
					continue
				}
				t.B, t.S, t.P = t.B+q[0], t.S+q[1], t.P+q[2]
				rep[i], opt[i] = j, uint8(o)
				rec(i + 1)
				t.B, t.S, t.P = t.B-q[0], t.S-q[1], t.P-q[2]
			}
		}
	}
	rec(0)
	return bestRep, bestOpt, true
}
