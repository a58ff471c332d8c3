package policy

import "github.com/sophon-dl/sophon/profiler"

// one is policy f's plan of the one-node instance of p and r (OneNode),
// which cannot fail on the tests' profiles: an error panics, failing the
// test.
func one(f func(Instance) (Plan, error), p *profiler.Profile, r Resources) Plan {
	pl, err := f(OneNode(p, r))
	if err != nil {
		panic(err)
	}
	return pl
}

// bound1 is the bound of the one-node instance of p and r without a
// cache.
func bound1(p *profiler.Profile, r Resources) float64 {
	r.CacheBytes = 0
	return cacheBound1(p, r)
}

// cacheBound1 is the bound of the one-node instance of p and r, with r's
// cache.
func cacheBound1(p *profiler.Profile, r Resources) float64 {
	b, err := Bound(OneNode(p, r))
	if err != nil {
		panic(err)
	}
	return b.Seconds
}

// predict1 is Predict on the one-node instance of p and r, in totals.
func predict1(p *profiler.Profile, r Resources, split []int, compress []bool) Prediction {
	cp, err := Predict(OneNode(p, r), nil, split, compress)
	if err != nil {
		panic(err)
	}
	return cp.Totals()
}

// byName1 is ByName on the one-node instance of p and r.
func byName1(name string, p *profiler.Profile, r Resources) (Plan, error) {
	return ByName(name, OneNode(p, r))
}

// resident1 is Resident's plan on the one-node instance of p and r.
func resident1(name string, p *profiler.Profile, r Resources, cached []bool) (Plan, error) {
	pl, _, err := Resident(name, OneNode(p, r), cached)
	return pl, err
}

// first1 is FirstEpoch on the one-node instance of p and r.
func first1(p *profiler.Profile, r Resources, pl Plan) Plan {
	f, err := FirstEpoch(OneNode(p, r), pl)
	if err != nil {
		panic(err)
	}
	return f
}

// all1 is All's plans on the one-node instance of p and r.
func all1(p *profiler.Profile, r Resources) []Plan {
	plans, _, err := All(OneNode(p, r))
	if err != nil {
		panic(err)
	}
	return plans
}

// uniform1 is the plan that splits every sample of the one-node instance
// of p and r at k (ResizeOff's at any k).
func uniform1(name string, k int, p *profiler.Profile, r Resources) Plan {
	in := OneNode(p, r)
	cm, err := in.model(false)
	if err != nil {
		panic(err)
	}
	return in.finish(cm.uniform(name, k))
}
