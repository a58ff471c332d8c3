package stage1

import (
	"testing"
	"time"
)

// TestStage1ComputeCores: the model's compute cores are Config.Cores
// (the agent's CPU quota) when set, not its workers, and the first
// epoch's report says so; without Cores they are the workers, as before.
func TestStage1ComputeCores(t *testing.T) {
	st := storageRates{speed: 1, cores: 0.5, rate: 50, localNS: 1e7}
	for _, tc := range []struct {
		workers int
		cores   float64
		want    float64
	}{{2, 1.5, 1.5}, {2, 1, 1}, {3, 0, 3}, {0, 0, 1}} {
		cfg := &Config{Workers: tc.workers, Cores: tc.cores, Now: time.Now}
		res := cfg.decide(1e7, 100, st, nil, nil, []uint64{1000}, []uint64{0}, time.Now())
		if res.Res.ComputeCores != tc.want || res.Summary().ComputeCores != tc.want {
			t.Errorf("workers %d, cores %g: model %g, report %g; want %g", tc.workers, tc.cores,
				res.Res.ComputeCores, res.Summary().ComputeCores, tc.want)
		}
	}
}
