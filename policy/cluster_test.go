package policy

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/sophon-dl/sophon/policy/cacheplan"
	"github.com/sophon-dl/sophon/policy/internal/relax"
	"github.com/sophon-dl/sophon/profiler"
)

// twoByTwo: 2 storage nodes, 2 compute nodes (1 rank each).
func twoByTwo() Cluster {
	return Cluster{
		Storage: []StorageNode{{Name: "s0", Cores: 2, EgressBytesPerSec: 100}, {Name: "s1", Cores: 1, EgressBytesPerSec: 50}},
		Compute: []ComputeNode{{Name: "c0", Cores: 4, IngressBytesPerSec: 200, GPUSamplesPerSec: 10, Ranks: 1},
			{Name: "c1", Cores: 4, GPUSamplesPerSec: 10, Ranks: 2}},
	}
}

func TestClusterValidate(t *testing.T) {
	if c := twoByTwo(); c.Validate() != nil {
		t.Fatalf("valid cluster: %v", c.Validate())
	}
	tooMany := make([]StorageNode, MaxStorageNodes+1)
	for _, c := range []struct {
		name  string
		edit  func(*Cluster)
		want  error
		field string
	}{
		{"no storage", func(c *Cluster) { c.Storage = nil }, ErrNoNodes, "storage"},
		{"no compute", func(c *Cluster) { c.Compute = nil }, ErrNoNodes, "compute"},
		{"unnamed", func(c *Cluster) { c.Storage[1].Name = "" }, ErrNodeName, "storage[1].name"},
		{"duplicate storage", func(c *Cluster) { c.Storage[1].Name = "s0" }, ErrDuplicateNode, "storage[1].name"},
		{"duplicate compute", func(c *Cluster) { c.Compute[1].Name = "c0" }, ErrDuplicateNode, "compute[1].name"},
		{"negative cores", func(c *Cluster) { c.Storage[0].Cores = -1 }, ErrBadFigure, "storage[0].cores"},
		{"NaN egress", func(c *Cluster) { c.Storage[1].EgressBytesPerSec = math.NaN() }, ErrBadFigure, "storage[1].egress_bytes_per_sec"},
		{"infinite ingress", func(c *Cluster) { c.Compute[0].IngressBytesPerSec = math.Inf(1) }, ErrBadFigure, "compute[0].ingress_bytes_per_sec"},
		{"negative gpu", func(c *Cluster) { c.Compute[1].GPUSamplesPerSec = -3 }, ErrBadFigure, "compute[1].gpu_samples_per_sec"},
		{"negative ranks", func(c *Cluster) { c.Compute[1].Ranks = -1 }, ErrBadFigure, "compute[1].ranks"},
		{"negative uplink", func(c *Cluster) { c.SharedUplinkBytesPerSec = -1 }, ErrBadFigure, "shared_uplink_bytes_per_sec"},
		{"negative speed", func(c *Cluster) { c.StorageSpeed = -0.5 }, ErrBadFigure, "storage_speed"},
		{"tiny cores", func(c *Cluster) { c.Storage[1].Cores = 1e-300 }, ErrBadFigure, "storage[1].cores"},
		{"link to unknown storage", func(c *Cluster) { c.Links = []LinkCap{{Storage: "s9", Compute: "c0", BytesPerSec: 1}} }, ErrUnknownNode, "links[0].storage"},
		{"link to unknown compute", func(c *Cluster) { c.Links = []LinkCap{{Storage: "s0", Compute: "s1", BytesPerSec: 1}} }, ErrUnknownNode, "links[0].compute"},
		{"duplicate link", func(c *Cluster) {
			c.Links = []LinkCap{{Storage: "s0", Compute: "c1", BytesPerSec: 1}, {Storage: "s0", Compute: "c1", BytesPerSec: 2}}
		}, ErrDuplicateLink, "links[1]"},
		{"negative link", func(c *Cluster) { c.Links = []LinkCap{{Storage: "s0", Compute: "c1", BytesPerSec: -1}} }, ErrBadFigure, "links[0].bytes_per_sec"},
		{"too many storage", func(c *Cluster) { c.Storage = tooMany }, ErrClusterTooBig, "storage"},
		{"too many ranks", func(c *Cluster) { c.Compute[0].Ranks = MaxRanks }, ErrClusterTooBig, "compute"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl := twoByTwo()
			c.edit(&cl)
			err := cl.Validate()
			var ce *ClusterError
			if !errors.Is(err, c.want) || !errors.As(err, &ce) || ce.Field != c.field {
				t.Errorf("got %v, want %v at %s", err, c.want, c.field)
			}
		})
	}
	// Zero is unlimited, not an error; Ranks zero counts as one.
	c := Cluster{Storage: []StorageNode{{Name: "s"}}, Compute: []ComputeNode{{Name: "c"}, {Name: "d", Ranks: 3}}}
	if err := c.Validate(); err != nil || c.Ranks() != 4 {
		t.Errorf("all-zero cluster: %v, %d ranks (want 4)", err, c.Ranks())
	}
}

func TestNewPlacement(t *testing.T) {
	sets := [][]int16{{0, 1}, {1, 0}, {0, 1}, {1}, {0, 1}}
	pl, err := NewPlacement([]int32{0, 1, 2, 0, 1}, func(i int) []int16 { return sets[i] })
	if err != nil {
		t.Fatal(err)
	}
	// Identical sets are stored once; order distinguishes them.
	if want := [][]int16{{0, 1}, {1, 0}, {1}}; !reflect.DeepEqual(pl.Sets, want) {
		t.Errorf("sets: got %v, want %v", pl.Sets, want)
	}
	if want := []int32{0, 1, 0, 2, 0}; !reflect.DeepEqual(pl.Set, want) {
		t.Errorf("set: got %v, want %v", pl.Set, want)
	}
	// A reused buffer is copied.
	buf := []int16{0}
	pl, err = NewPlacement([]int32{0, 0}, func(i int) []int16 { buf[0] = int16(i); return buf })
	if err != nil || !reflect.DeepEqual(pl.Sets, [][]int16{{0}, {1}}) {
		t.Errorf("reused buffer: %v, %v", pl.Sets, err)
	}
	for _, bad := range [][]int16{nil, make([]int16, MaxReplicas+1)} {
		if _, err := NewPlacement([]int32{0}, func(int) []int16 { return bad }); !errors.Is(err, ErrPlacement) {
			t.Errorf("%d replicas: got %v, want ErrPlacement", len(bad), err)
		}
	}
}

func TestPlacementCheck(t *testing.T) {
	c := twoByTwo() // 3 ranks
	p := &profiler.Profile{Ops: []string{"op"}, Samples: []profiler.SampleProfile{
		{Raw: 10, Bytes: []int64{10, 5}, OpNS: []int64{1}}, {Raw: 10, Bytes: []int64{10, 5}, OpNS: []int64{1}}}}
	good := func() *Placement { return &Placement{Rank: []int32{0, 2}, Sets: [][]int16{{0, 1}}, Set: []int32{0, 0}} }
	if _, err := Bound(On(p, c, good())); err != nil {
		t.Fatalf("good placement: %v", err)
	}
	for _, cs := range []struct {
		name  string
		edit  func(*Placement)
		field string
	}{
		{"short", func(pl *Placement) { pl.Rank = pl.Rank[:1] }, "placement"},
		{"rank too large", func(pl *Placement) { pl.Rank[1] = 3 }, "rank[1]"},
		{"negative rank", func(pl *Placement) { pl.Rank[0] = -1 }, "rank[0]"},
		{"unknown node", func(pl *Placement) { pl.Sets[0][1] = 2 }, "sets[0]"},
		{"node twice", func(pl *Placement) { pl.Sets[0][1] = 0 }, "sets[0]"},
		{"empty set", func(pl *Placement) { pl.Sets[0] = nil }, "sets[0]"},
		{"bad set index", func(pl *Placement) { pl.Set[1] = 1 }, "set[1]"},
	} {
		t.Run(cs.name, func(t *testing.T) {
			pl := good()
			cs.edit(pl)
			_, err := Bound(On(p, c, pl))
			var ce *ClusterError
			if !errors.Is(err, ErrPlacement) || !errors.As(err, &ce) || ce.Field != cs.field {
				t.Errorf("got %v, want ErrPlacement at %s", err, cs.field)
			}
		})
	}
	if _, err := Bound(On(p, c, nil)); !errors.Is(err, ErrPlacement) {
		t.Errorf("nil placement: got %v", err)
	}
	if _, err := Bound(On(nil, c, good())); !errors.Is(err, ErrClusterProfile) {
		t.Errorf("nil profile: got %v", err)
	}
	bad := &profiler.Profile{Ops: []string{"op"}, Samples: []profiler.SampleProfile{{Bytes: []int64{1}}, {Bytes: []int64{1}}}}
	if _, err := Bound(On(bad, c, good())); !errors.Is(err, ErrClusterProfile) {
		t.Errorf("malformed profile: got %v", err)
	}
}

// TestClusterPredictHandmade checks every load of a plan worked out by
// hand. Ops [a, b]; storage s0 (2 cores, 100 B/s), s1 (1 core, 50 B/s);
// compute c0 (4 cores, ingress 200 B/s, GPU 10/s, 1 rank), c1 (4 cores,
// GPU 10/s, 2 ranks); link s1->c1 capped at 20 B/s; uplink 400 B/s.
func TestClusterPredictHandmade(t *testing.T) {
	c := twoByTwo()
	c.Links = []LinkCap{{Storage: "s1", Compute: "c1", BytesPerSec: 20}}
	c.SharedUplinkBytesPerSec = 400
	s := func(b0, b1, b2 int64) profiler.SampleProfile {
		return profiler.SampleProfile{Raw: b0, Bytes: []int64{b0, b1, b2}, OpNS: []int64{1e9, 2e9}}
	}
	p := &profiler.Profile{Ops: []string{"a", "b"}, Samples: []profiler.SampleProfile{s(100, 50, 10), s(200, 40, 20), s(300, 60, 30)}}
	pl := &Placement{Rank: []int32{0, 1, 2}, Sets: [][]int16{{0, 1}}, Set: []int32{0, 0, 0}}
	// Sample 0: s0 -> c0 raw: 100 B, storage 0, compute 3 s.
	// Sample 1: s1 -> c1 at split 1: 40 B, storage 1 s, compute 2 s.
	// Sample 2: s1 -> c1 at split 2: 30 B, storage 3 s, compute 0.
	pr, err := Predict(On(p, c, pl), []int16{0, 1, 1}, []int{0, 1, 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"s0 bytes", pr.Storage[0].Bytes, 100}, {"s0 egress", pr.Storage[0].EgressTime, 1}, {"s0 cpu", pr.Storage[0].CPUTime, 0},
		{"s1 bytes", pr.Storage[1].Bytes, 70}, {"s1 egress", pr.Storage[1].EgressTime, 1.4},
		{"s1 cpu seconds", pr.Storage[1].CPUSeconds, 4}, {"s1 cpu", pr.Storage[1].CPUTime, 4},
		{"c0 bytes", pr.Compute[0].Bytes, 100}, {"c0 ingress", pr.Compute[0].IngressTime, 0.5}, {"c0 cpu", pr.Compute[0].CPUTime, 0.75},
		{"c1 ingress (unlimited)", pr.Compute[1].IngressTime, 0}, {"c1 cpu", pr.Compute[1].CPUTime, 0.5},
		// c0: 1 sample on its one rank at 10/s; c1: 1 sample on each of
		// its 2 ranks, each at 5/s.
		{"c0 gpu", pr.Compute[0].GPUTime, 0.1}, {"c1 gpu", pr.Compute[1].GPUTime, 0.2},
		{"link", pr.Links[0].Time, 3.5}, {"uplink", pr.UplinkTime, 0.425}, {"bytes", pr.Bytes, 170},
		{"seconds", pr.Seconds, 4},
	} {
		if !near(f.got, f.want) {
			t.Errorf("%s: got %v, want %v", f.name, f.got, f.want)
		}
	}
	if want := (ClusterResource{Kind: StorageCPU, Storage: "s1"}); pr.Bottleneck != want {
		t.Errorf("bottleneck: got %v, want %v", pr.Bottleneck, want)
	}
	if pr.Storage[1].Samples != 2 || pr.Compute[1].Samples != 2 {
		t.Errorf("samples: s1 %d, c1 %d, want 2 and 2", pr.Storage[1].Samples, pr.Compute[1].Samples)
	}
	// With more storage cores the capped link binds; the cluster's
	// order puts it before everything but egress.
	c.Storage[1].Cores = 4
	pr, _ = Predict(On(p, c, pl), []int16{0, 1, 1}, []int{0, 1, 2}, nil)
	if want := (ClusterResource{Kind: Link, Storage: "s1", Compute: "c1"}); pr.Bottleneck != want || !near(pr.Seconds, 3.5) {
		t.Errorf("bottleneck: got %v %v, want %v 3.5", pr.Bottleneck, pr.Seconds, want)
	}
	if got := pr.Bottleneck.String(); got != "link s1->c1" {
		t.Errorf("String: got %q", got)
	}
	// A replica outside the set, or arrays of the wrong length, fail.
	pl2 := &Placement{Rank: []int32{0, 1, 2}, Sets: [][]int16{{0}}, Set: []int32{0, 0, 0}}
	if _, err := Predict(On(p, c, pl2), []int16{0, 1, 0}, []int{0, 0, 0}, nil); !errors.Is(err, ErrClusterPlan) {
		t.Errorf("replica outside the set: got %v", err)
	}
	if _, err := Predict(On(p, c, pl), []int16{0}, []int{0, 0, 0}, nil); !errors.Is(err, ErrClusterPlan) {
		t.Errorf("short replicas: got %v", err)
	}
}

// randomCluster draws a cluster of 1-4 storage and 1-3 compute nodes
// with rates around a profile's scale (randomProfile: ~500 KB and ~10 ms
// a sample), sometimes with link caps and an uplink.
func randomCluster(rng *rand.Rand, n int) Cluster {
	var c Cluster
	for j := range 1 + rng.IntN(4) {
		s := StorageNode{Name: fmt.Sprintf("s%d", j), Cores: 0.3 * math.Exp(rng.NormFloat64()), EgressBytesPerSec: 1e5 * math.Exp(rng.NormFloat64())}
		if rng.IntN(8) == 0 {
			s.Cores = 0
		}
		c.Storage = append(c.Storage, s)
	}
	for k := range 1 + rng.IntN(3) {
		cn := ComputeNode{Name: fmt.Sprintf("c%d", k), Cores: 0.5 * math.Exp(rng.NormFloat64()), Ranks: 1 + rng.IntN(3)}
		if rng.IntN(2) == 0 {
			cn.IngressBytesPerSec = 2e5 * math.Exp(rng.NormFloat64())
		}
		if rng.IntN(3) == 0 {
			cn.GPUSamplesPerSec = 50 * math.Exp(rng.NormFloat64())
		}
		c.Compute = append(c.Compute, cn)
	}
	for _, s := range c.Storage {
		for _, cn := range c.Compute {
			if rng.IntN(4) == 0 {
				c.Links = append(c.Links, LinkCap{Storage: s.Name, Compute: cn.Name, BytesPerSec: 5e4 * math.Exp(rng.NormFloat64())})
			}
		}
	}
	if rng.IntN(4) == 0 {
		c.SharedUplinkBytesPerSec = 2e5 * math.Exp(rng.NormFloat64())
	}
	c.StorageSpeed = math.Exp(0.3 * rng.NormFloat64())
	return c
}

// randomPlacement gives each sample a random rank and 1-3 random replicas.
func randomPlacement(rng *rand.Rand, n int, c Cluster) *Placement {
	rank := make([]int32, n)
	for i := range rank {
		rank[i] = int32(rng.IntN(c.Ranks()))
	}
	pl, err := NewPlacement(rank, func(int) []int16 {
		r := 1 + rng.IntN(min(3, len(c.Storage)))
		perm := rng.Perm(len(c.Storage))[:r]
		set := make([]int16, r)
		for k, j := range perm {
			set[k] = int16(j)
		}
		return set
	})
	if err != nil {
		panic(err)
	}
	return pl
}

// checkCluster asserts what must hold for every instance and returns the
// optimal plan's prediction and the bound.
func checkCluster(t *testing.T, p *profiler.Profile, c Cluster, pl *Placement) (opt, bound float64) {
	t.Helper()
	plans, b, err := All(On(p, c, pl))
	if err != nil {
		t.Fatal(err)
	}
	if want := ClusterNames; len(plans) != len(want) {
		t.Fatalf("%d plans, want %d", len(plans), len(want))
	}
	for k, plan := range plans {
		if plan.Policy != ClusterNames[k] {
			t.Errorf("plan %d is %s, want %s", k, plan.Policy, ClusterNames[k])
		}
		// Valid decisions, and Pred agrees with ClusterPredict on them.
		for i, j := range plan.Replica {
			if !slices.Contains(pl.Sets[pl.Set[i]], j) {
				t.Fatalf("%s: sample %d served by %d, not in its set %v", plan.Policy, i, j, pl.Sets[pl.Set[i]])
			}
		}
		got, err := Predict(On(p, c, pl), plan.Replica, plan.Split, plan.Compress)
		if err != nil || !near(got.Seconds, plan.Pred.Seconds) {
			t.Errorf("%s: Pred %v, ClusterPredict %v (%v)", plan.Policy, plan.Pred.Seconds, got.Seconds, err)
		}
		if plan.Policy != NameOptimal && (slices.Contains(plan.Split, SplitCut) || (plan.Compress != nil && slices.Contains(plan.Compress, true))) {
			t.Errorf("%s cuts or compresses", plan.Policy)
		}
	}
	opt = plans[len(plans)-1].Pred.Seconds
	slack := 1e-9 * max(opt, 1e-300)
	for _, plan := range plans {
		if opt > plan.Pred.Seconds+slack {
			t.Errorf("optimal %v > %s %v", opt, plan.Policy, plan.Pred.Seconds)
		}
	}
	if b.Seconds > opt+slack {
		t.Errorf("bound %v > optimal %v", b.Seconds, opt)
	}
	if b.BucketLP < b.Seconds-slack {
		t.Errorf("bucketed LP %v < bound %v", b.BucketLP, b.Seconds)
	}
	// The bound agrees with ClusterBound; everything is deterministic.
	if b2, err := Bound(On(p, c, pl)); err != nil || b2.Seconds != b.Seconds {
		t.Errorf("ClusterBound %v, ClusterAll's %v (%v)", b2.Seconds, b.Seconds, err)
	}
	if again, _, _ := All(On(p, c, pl)); !reflect.DeepEqual(plans, again) {
		t.Errorf("plans differ between two runs")
	}
	return opt, b.Seconds
}

func TestClusterRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	worst := 1.0
	for trial := range 40 {
		n := 20 + rng.IntN(400)
		p := randomProfile(rng, n, 1+rng.IntN(5), rng.IntN(2) == 0)
		if p.N() >= 2 && rng.IntN(2) == 0 {
			addRandomCut(rng, p)
		}
		c := randomCluster(rng, n)
		opt, bound := checkCluster(t, p, c, randomPlacement(rng, n, c))
		if bound > 0 {
			worst = max(worst, opt/bound)
		}
		_ = trial
	}
	t.Logf("worst optimal/bound over random clusters: %.4f", worst)
}

// bruteCluster is the best predicted epoch over every joint (replica,
// split, compress) assignment.
func bruteCluster(p *profiler.Profile, c Cluster, pl *Placement) float64 {
	n, nops := len(p.Samples), p.N()
	comp := n > 0 && p.Samples[0].Compressed != nil
	first := 0
	if nops >= 2 && slices.ContainsFunc(p.Samples, func(s profiler.SampleProfile) bool { return s.HasCut() }) {
		first = SplitCut
	}
	rep, split, compress := make([]int16, n), make([]int, n), make([]bool, n)
	best := math.Inf(1)
	var rec func(i int)
	rec = func(i int) {
		if i == n {
			pr, err := Predict(On(p, c, pl), rep, split, compress)
			if err != nil {
				panic(err)
			}
			best = min(best, pr.Seconds)
			return
		}
		for _, j := range pl.Sets[pl.Set[i]] {
			for k := first; k <= nops; k++ {
				for cc := range 2 {
					if cc == 1 && (!comp || k == SplitCut) {
						continue
					}
					rep[i], split[i], compress[i] = j, k, cc == 1
					rec(i + 1)
				}
			}
		}
	}
	rec(0)
	return best
}

// TestClusterBruteForce: on tiny instances ClusterOptimal is exact, the
// bound is below the optimum, and the rounding path (what larger instances
// get) is never better than the optimum, and not far from it.
func TestClusterBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	var worst, sum float64
	const trials = 150
	for trial := range trials {
		n, nops := 1+rng.IntN(3), 1+rng.IntN(3)
		p := randomProfile(rng, n, nops, rng.IntN(3) == 0)
		if nops >= 2 && rng.IntN(2) == 0 {
			addRandomCut(rng, p)
		}
		c := randomCluster(rng, n)
		pl := randomPlacement(rng, n, c)
		bf := bruteCluster(p, c, pl)
		opt, bound := checkCluster(t, p, c, pl)
		if !near(opt, bf) {
			t.Errorf("trial %d: optimal %v, brute force %v", trial, opt, bf)
		}
		if bound > bf*(1+1e-9) {
			t.Errorf("trial %d: bound %v > brute force %v", trial, bound, bf)
		}
		cm, err := newCModel(p, &c, pl, true)
		if err != nil {
			t.Fatal(err)
		}
		rrep, ropt := roundingPath(cm)
		h := cm.plan("", rrep, ropt).Pred.Seconds
		if h < bf*(1-1e-9) {
			t.Errorf("trial %d: rounding %v beats brute force %v", trial, h, bf)
		}
		if bf > 0 {
			worst = max(worst, h/bf)
			sum += h / bf
		}
	}
	t.Logf("rounding path / optimum on tiny instances: worst %.4f, mean %.4f", worst, sum/trials)
}

// roundingPath is ClusterOptimal without the exhaustive search and the
// baselines: the LP, the rounding and the improvement pass.
func roundingPath(cm *cmodel) ([]int16, []uint8) {
	bk, sol := cm.SolveLP(cm.Bucket())
	w := sol.W
	if w == nil {
		w = make([]float64, cm.NRes)
	}
	rep, opt, pt, g := cm.round(bk, cm.mix(bk, sol), w, cm.lpLoads(sol))
	cm.improve(rep, opt, pt, w, max(g, cm.gpuMax))
	return rep, opt
}

// TestClusterSingleNode: on SingleNode(r) the cluster planner agrees with
// the single-node one: the bound equals Bound (within Bound's own 1e-6),
// nooff's and sophon's plans are NoOff's and SOPHON's, and optimal is as
// good as Optimal.
func TestClusterSingleNode(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	worstBound, worstOpt := 0.0, 1.0
	for trial := range 60 {
		n := 20 + rng.IntN(500)
		p := randomProfile(rng, n, 1+rng.IntN(6), rng.IntN(2) == 0)
		if trial%2 == 0 && p.N() >= 2 {
			addRandomCut(rng, p)
		}
		r := randomResources(rng, n)
		pl, err := NewPlacement(make([]int32, n), func(int) []int16 { return []int16{0} })
		if err != nil {
			t.Fatal(err)
		}
		c := SingleNode(r)
		plans, cb, err := All(On(p, c, pl))
		if err != nil {
			t.Fatal(err)
		}
		b := bound1(p, r)
		if rel := math.Abs(cb.Seconds-b) / max(b, 1e-300); rel > 1e-6 {
			t.Errorf("trial %d: cluster bound %v, Bound %v (relative %.2g)", trial, cb.Seconds, b, rel)
		} else {
			worstBound = max(worstBound, rel)
		}
		for _, c := range []struct {
			got  Plan
			want Plan
		}{{plans[0], one(NoOff, p, r)}, {plans[2], one(SOPHON, p, r)}} {
			for i, k := range c.got.Split {
				if int(k) != c.want.Split[i] {
					t.Fatalf("trial %d: %s: sample %d at %d, single-node %d", trial, c.got.Policy, i, k, c.want.Split[i])
				}
			}
			if !near(c.got.Pred.Seconds, c.want.Pred.Seconds) {
				t.Errorf("trial %d: %s predicts %v, single-node %v", trial, c.got.Policy, c.got.Pred.Seconds, c.want.Pred.Seconds)
			}
		}
		opt, single := plans[3].Pred.Seconds, one(Optimal, p, r).Pred.Seconds
		if opt > single*1.01 {
			t.Errorf("trial %d: cluster optimal %v, Optimal %v", trial, opt, single)
		}
		worstOpt = max(worstOpt, opt/single)
	}
	t.Logf("single node: worst |cluster bound / Bound - 1| %.2g, worst cluster optimal / Optimal %.4f", worstBound, worstOpt)
}

// TestClusterBucketedBound checks what ClusterBound's comment claims about
// bucketing, on an instance too large for one bucket per sample: the LP's
// optimum (computed with one bucket per sample) lies between the bound
// and the bucketed LP's value.
func TestClusterBucketedBound(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for trial := range 3 {
		n := relax.BucketExact + 4000
		p := randomProfile(rng, n, 3, trial != 1)
		addRandomCut(rng, p)
		c := randomCluster(rng, n)
		c.Storage = append(c.Storage, StorageNode{Name: "extra", Cores: 0.5, EgressBytesPerSec: 3e5})
		pl := randomPlacement(rng, n, c)
		cm, err := newCModel(p, &c, pl, true)
		if err != nil {
			t.Fatal(err)
		}
		b := cm.bound()
		if b.Buckets >= n {
			t.Fatalf("trial %d: %d buckets for %d samples: not bucketed", trial, b.Buckets, n)
		}
		cm.ExactBuckets = n
		lp := cm.bound()
		if lp.Buckets != n || lp.BucketLP-lp.Seconds > 2*relax.LPTol*lp.BucketLP {
			t.Fatalf("trial %d: per-sample LP: %d buckets, [%v, %v] not closed", trial, lp.Buckets, lp.Seconds, lp.BucketLP)
		}
		if b.Seconds > lp.BucketLP*(1+1e-9) || b.BucketLP < lp.Seconds*(1-1e-9) {
			t.Errorf("trial %d: LP %v not in [bound %v, bucketed LP %v]", trial, lp.Seconds, b.Seconds, b.BucketLP)
		}
		opt, err := Optimal(On(p, c, pl))
		if err != nil || opt.Pred.Seconds < b.Seconds*(1-1e-9) {
			t.Errorf("trial %d: optimal %v below the bound %v (%v)", trial, opt.Pred.Seconds, b.Seconds, err)
		}
		t.Logf("trial %d: %d buckets: bound %.6g <= LP %.6g <= bucketed LP %.6g; optimal %.6g", trial, b.Buckets, b.Seconds, lp.Seconds, b.BucketLP, opt.Pred.Seconds)
	}
}

func TestClusterRoundRobinAndNoOff(t *testing.T) {
	// Four samples of 100 B, all on {s0, s1}; s0 has four times s1's
	// egress.
	c := Cluster{
		Storage: []StorageNode{{Name: "s0", EgressBytesPerSec: 400}, {Name: "s1", EgressBytesPerSec: 100}},
		Compute: []ComputeNode{{Name: "c0"}},
	}
	s := profiler.SampleProfile{Raw: 100, Bytes: []int64{100, 10}, OpNS: []int64{1e6}}
	p := &profiler.Profile{Ops: []string{"op"}, Samples: []profiler.SampleProfile{s, s, s, s, s}}
	pl := &Placement{Rank: make([]int32, 5), Sets: [][]int16{{0, 1}, {1, 0}}, Set: []int32{0, 1, 0, 1, 0}}
	rr, err := RoundRobin(On(p, c, pl))
	if err != nil {
		t.Fatal(err)
	}
	// In turn within each set: set {0,1} gives 0, 1, 0; set {1,0} gives 1, 0.
	if want := []int16{0, 1, 1, 0, 0}; !slices.Equal(rr.Replica, want) {
		t.Errorf("round robin: got %v, want %v", rr.Replica, want)
	}
	no, err := NoOff(On(p, c, pl))
	if err != nil {
		t.Fatal(err)
	}
	// Least egress time after each sample (0.25 s per sample on s0, 1 s
	// on s1): s0 three times; the fourth ties at 1 s and goes to the node
	// with fewer bytes, s1; the fifth to s0 (1 s against 2 s).
	if want := []int16{0, 0, 0, 1, 0}; !slices.Equal(no.Replica, want) {
		t.Errorf("nooff: got %v, want %v", no.Replica, want)
	}
	if !near(no.Pred.Seconds, 1) || !near(rr.Pred.Seconds, 2) {
		t.Errorf("epochs: nooff %v (want 1), round robin %v (want 2)", no.Pred.Seconds, rr.Pred.Seconds)
	}
	for _, pl := range []Plan{no, rr} {
		if !slices.Equal(pl.Split, []int{0, 0, 0, 0, 0}) || pl.Compress != nil {
			t.Errorf("%s: splits %v, compress %v: want raw", pl.Policy, pl.Split, pl.Compress)
		}
	}
}

func TestClusterSOPHONShares(t *testing.T) {
	// 400 samples on {s0, s1}, s0 with 3x s1's egress: 300 go to s0.
	c := Cluster{
		Storage: []StorageNode{{Name: "s0", Cores: 1, EgressBytesPerSec: 3e5}, {Name: "s1", Cores: 1, EgressBytesPerSec: 1e5}},
		Compute: []ComputeNode{{Name: "c0"}},
	}
	rng := rand.New(rand.NewPCG(5, 5))
	p := randomProfile(rng, 400, 3, false)
	pl, _ := NewPlacement(make([]int32, 400), func(int) []int16 { return []int16{1, 0} })
	so, err := SOPHON(On(p, c, pl))
	if err != nil {
		t.Fatal(err)
	}
	if so.Cluster.Storage[0].Samples != 300 || so.Cluster.Storage[1].Samples != 100 {
		t.Errorf("samples per node: %d, %d; want 300, 100", so.Cluster.Storage[0].Samples, so.Cluster.Storage[1].Samples)
	}
	// Each agent runs SOPHON on its own samples: the same splits as
	// SOPHON on a profile of just those samples, with the agent's
	// resources.
	for j := range 2 {
		sub := &profiler.Profile{Ops: p.Ops}
		var idx []int
		for i, r := range so.Replica {
			if int(r) == j {
				sub.Samples = append(sub.Samples, p.Samples[i])
				idx = append(idx, i)
			}
		}
		want := one(SOPHON, sub, Resources{LinkBytesPerSec: c.Storage[j].EgressBytesPerSec, StorageCores: 1})
		for k, i := range idx {
			if int(so.Split[i]) != want.Split[k] {
				t.Fatalf("agent %d: sample %d at %d, SOPHON on the agent's samples %d", j, i, so.Split[i], want.Split[k])
			}
		}
	}
}

func TestClusterByName(t *testing.T) {
	c := twoByTwo()
	rng := rand.New(rand.NewPCG(1, 1))
	p := randomProfile(rng, 30, 2, true)
	pl := randomPlacement(rng, 30, c)
	for _, name := range ClusterNames {
		plan, err := ByName(name, On(p, c, pl))
		if err != nil || plan.Policy != name || len(plan.Replica) != 30 {
			t.Errorf("%s: policy %q, %d samples, %v", name, plan.Policy, len(plan.Replica), err)
		}
	}
	if _, err := ByName("alloff", On(p, c, pl)); !errors.Is(err, ErrUnknownPolicy) || !strings.Contains(err.Error(), "alloff") {
		t.Errorf("unknown policy: got %v", err)
	}
	if _, err := ByName(NameOptimal, On(p, Cluster{}, pl)); !errors.Is(err, ErrNoNodes) {
		t.Errorf("empty cluster: got %v", err)
	}
}

func TestClusterDegenerate(t *testing.T) {
	c := twoByTwo()
	empty := &profiler.Profile{Ops: []string{"a", "b"}}
	pl := &Placement{}
	plans, b, err := All(On(empty, c, pl))
	if err != nil || len(plans) != 4 || b.Seconds != 0 || plans[3].Pred.Seconds != 0 {
		t.Errorf("no samples: %v, bound %v, %v", len(plans), b.Seconds, err)
	}
	// Everything unlimited: every plan takes no time, the bound is 0.
	free := Cluster{Storage: []StorageNode{{Name: "s"}, {Name: "t"}}, Compute: []ComputeNode{{Name: "c"}}}
	rng := rand.New(rand.NewPCG(2, 2))
	p := randomProfile(rng, 50, 2, true)
	pl = randomPlacement(rng, 50, free)
	if opt, bound := checkCluster(t, p, free, pl); opt != 0 || bound != 0 {
		t.Errorf("unlimited: optimal %v, bound %v; want 0, 0", opt, bound)
	}
	// Only the GPUs limit: every plan and the bound are the slowest
	// rank's GPU time.
	gpu := Cluster{Storage: []StorageNode{{Name: "s"}}, Compute: []ComputeNode{{Name: "c", GPUSamplesPerSec: 10, Ranks: 2}}}
	pl, _ = NewPlacement(make([]int32, 50), func(int) []int16 { return []int16{0} }) // all on rank 0
	if opt, bound := checkCluster(t, p, gpu, pl); !near(opt, 10) || !near(bound, 10) {
		t.Errorf("GPU bound: optimal %v, bound %v; want 10 (50 samples at 5/s)", opt, bound)
	}
	tooLong := &profiler.Profile{Ops: make([]string, MaxClusterOps+1)}
	if _, err := Bound(On(tooLong, c, &Placement{})); !errors.Is(err, ErrClusterProfile) {
		t.Errorf("%d ops: got %v", MaxClusterOps+1, err)
	}
}

// TestClusterManyResources: every pair capped plus an uplink, so the
// search generates rows; the bound stays below the plans and, with one
// bucket per sample, closes on the LP.
func TestClusterManyResources(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for range 5 {
		n := 2000
		p := randomProfile(rng, n, 4, true)
		addRandomCut(rng, p)
		c := randomCluster(rng, n)
		for len(c.Storage) < 4 {
			c.Storage = append(c.Storage, StorageNode{Name: fmt.Sprintf("x%d", len(c.Storage)), Cores: 0.3, EgressBytesPerSec: 1e5})
		}
		c.Links = nil
		for _, s := range c.Storage {
			for _, cn := range c.Compute {
				c.Links = append(c.Links, LinkCap{Storage: s.Name, Compute: cn.Name, BytesPerSec: 3e4 * math.Exp(rng.NormFloat64())})
			}
		}
		c.SharedUplinkBytesPerSec = 3e5
		pl := randomPlacement(rng, n, c)
		opt, bound := checkCluster(t, p, c, pl)
		b, _ := Bound(On(p, c, pl))
		if b.BucketLP-b.Seconds > 2*relax.LPTol*b.BucketLP {
			t.Errorf("per-sample LP not closed: [%v, %v] after %d iterations", b.Seconds, b.BucketLP, b.Iterations)
		}
		if opt > 1.1*bound {
			t.Errorf("optimal %v > 1.1 x bound %v", opt, bound)
		}
	}
}

// TestResidentCluster: Resident keeps a residency on a cluster as on one
// node: every policy's plan has exactly the given samples Cached at the
// cache split, each served by a replica that holds it, predicts the
// steady-state epoch (the resident samples fetched at split 0 of the
// profile in which they cost their cache reads), and is no faster than its
// bound, which is the bound of that profile.
func TestResidentCluster(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	n := 120
	p := randomProfile(rng, n, 3, true)
	c := randomCluster(rng, n)
	pl := randomPlacement(rng, n, c)
	cached := make([]bool, n)
	for i := range cached {
		cached[i] = i%3 == 0
	}
	k := CacheSplit(p)
	q := cacheplan.Rewrite(p, cached, k)
	want, err := Bound(On(q, c, pl))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ClusterNames {
		plan, b, err := Resident(name, On(p, c, pl), cached)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(plan.Cached, cached) || plan.Replica == nil || plan.Cluster == nil {
			t.Fatalf("%s: Cached %v, replicas %d, breakdown %v; want the residency kept on a cluster plan", name, plan.Cached, len(plan.Replica), plan.Cluster != nil)
		}
		split := slices.Clone(plan.Split)
		for i, in := range cached {
			if in && plan.Split[i] != k {
				t.Errorf("%s: resident sample %d at split %d, want the cache split %d", name, i, plan.Split[i], k)
			}
			if in {
				split[i] = 0
			}
		}
		cp, err := Predict(On(q, c, pl), plan.Replica, split, plan.Compress)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if cp.Seconds != plan.Pred.Seconds || cp.Bytes != plan.Pred.Bytes {
			t.Errorf("%s: predicted %v s, %v B; want the steady state's %v s, %v B", name, plan.Pred.Seconds, plan.Pred.Bytes, cp.Seconds, cp.Bytes)
		}
		if name != NameOptimal && b.Seconds != want.Seconds || b.Seconds > plan.Pred.Seconds*(1+1e-9) || b.CacheSeconds != 0 {
			t.Errorf("%s: bound %v (cache %v), want %v, at most the plan's %v s, no cache bound on a cluster", name, b.Seconds, b.CacheSeconds, want.Seconds, plan.Pred.Seconds)
		}
	}
	if _, _, err := Resident(NameSOPHON, On(p, c, pl), cached[1:]); !errors.Is(err, ErrResidency) {
		t.Errorf("short residency: %v, want ErrResidency", err)
	}
}
