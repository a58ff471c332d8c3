package planner

import (
	"math"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
)

// shedProfile is samples of 1000 raw bytes, 200 after both ops (split
// 2), whose two ops cost opMS ms each: offloaded at split 2 each saves
// 800 bytes for 2 x opMS ms of storage CPU, a priority of 400/opMS B/ms.
func shedProfile(opMS ...float64) *profiler.Profile {
	p := &profiler.Profile{Version: profiler.ProfileVersion, Ops: []string{"a", "b"}}
	for i, ms := range opMS {
		ns := int64(ms * 1e6)
		p.Samples = append(p.Samples, profiler.SampleProfile{ID: uint64(i + 1), Raw: 1000,
			Bytes: []int64{1000, 800, 200}, OpNS: []int64{ns, ns}})
	}
	return p
}

// allOff is p's plan with every sample at split 2 under r, as the planner
// indexes it.
func allOff(t *testing.T, p *profiler.Profile, r policy.Resources) (policy.Instance, policy.Plan, *RunPlan) {
	t.Helper()
	in := policy.OneNode(p, r)
	pl, err := policy.AllOff(in)
	if err != nil {
		t.Fatal(err)
	}
	return in, pl, NewRunPlan(&pl, p, r)
}

// TestShed: the prediction of a plan as the Shedder runs it, computed by
// hand. Samples of 100, 200, 400 and 50 ms per op (priorities 4, 2, 1
// and 8 B/ms), all offloaded at split 2: 1.5 s of storage CPU on one
// core and 800 bytes on the link.
//   - 2000 B/s (link 0.4 s; 1.5 > 0.4 x 1.05): the 400 ms sample goes raw
//     first, and then storage 0.7 s <= link 0.8 s x 1.05: one shed, the
//     epoch the link's 0.8 s, its 0.8 CPU-s on the compute side.
//   - 10000 B/s: storage 0.7 and 0.3 s against link 0.16 and 0.24 s: two
//     shed (1 and 2 B/ms); a third (4 B/ms) would leave 0.1 s against
//     0.32 s, more than 0.3 s, so it stays; the compute side's 1.2 CPU-s
//     on 2 cores (0.6 s) sets the epoch.
//   - 800/1.45 B/s (link 1.45 s): storage 1.5 s is within the slack
//     (1.5225 s): the plan's own prediction.
//   - 1000 B/s (link 0.8 s): shedding the 400 ms sample would leave 0.7 s
//     against 1.6 s, more than the plan's 1.5 s: nothing shed.
//   - No link rate: no Shedder either.
//   - Two samples of priority 1 go raw together (the Shedder's cut), at
//     5000 B/s: storage 2.3 s against link 0.2 s; both shed leave 0.7 s
//     against 0.52 s, and the 200 ms one 0.3 s against 0.68 s.
//   - Sending costs storage CPU (20 us a byte): 20 samples of 1-20 ms
//     per op (0.42 s of ops, 4000 bytes) at 16000 B/s. On their ops
//     alone two would go raw (0.342 s against 0.35 s); with sending, a
//     third (0.306 + 0.128 s against 0.4 s), and a fourth would leave
//     the link at 0.45 s.
func TestShed(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		opMS                  []float64
		link, computeCores    float64
		shed                  int
		seconds, linkS, stor  float64
		bytes, computeCPU     float64
		bottleneck            string
		planSeconds, planLink float64
		nsPerByte             float64
	}{
		{"one", []float64{100, 200, 400, 50}, 2000, 4, 1, 0.8, 0.8, 0.7, 1600, 0.8, policy.Link, 1.5, 0.4, 0},
		{"two, compute-bound", []float64{100, 200, 400, 50}, 10000, 2, 2, 0.6, 0.24, 0.3, 2400, 1.2, policy.ComputeCPU, 1.5, 0.08, 0},
		{"within the slack", []float64{100, 200, 400, 50}, 800 / 1.45, 4, 0, 1.5, 1.45, 1.5, 800, 0, policy.StorageCPU, 1.5, 1.45, 0},
		{"no gain", []float64{100, 200, 400, 50}, 1000, 4, 0, 1.5, 0.8, 1.5, 800, 0, policy.StorageCPU, 1.5, 0.8, 0},
		{"no link rate", []float64{100, 200, 400, 50}, 0, 4, 0, 1.5, 0, 1.5, 800, 0, policy.StorageCPU, 1.5, 0, 0},
		{"a tie", []float64{100, 200, 400, 50, 400}, 5000, 4, 3, 0.68, 0.68, 0.3, 3400, 2.0, policy.Link, 2.3, 0.2, 0},
		{"transport", ramp(20), 16000, 4, 3, 0.434, 0.4, 0.434, 6400, 0.114, policy.StorageCPU, 0.5, 0.25, 2e4},
	} {
		r := policy.Resources{LinkBytesPerSec: tc.link, StorageCores: 1, ComputeCores: tc.computeCores, StorageSpeed: 1, StorageNSPerByte: tc.nsPerByte}
		in, pl, run := allOff(t, shedProfile(tc.opMS...), r)
		if !near(pl.Pred.Seconds, tc.planSeconds) || !near(pl.Pred.LinkSeconds, tc.planLink) {
			t.Fatalf("%s: the plan predicts %.3f s (link %.3f s), want %.3f s (link %.3f s)", tc.name, pl.Pred.Seconds, pl.Pred.LinkSeconds, tc.planSeconds, tc.planLink)
		}
		got, n, err := Shed(in, &pl, run)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if n != tc.shed || !near(got.Seconds, tc.seconds) || !near(got.LinkSeconds, tc.linkS) || !near(got.StorageSeconds, tc.stor) ||
			!near(got.Bytes, tc.bytes) || !near(got.ComputeCPUSeconds, tc.computeCPU) || got.Bottleneck != tc.bottleneck {
			t.Errorf("%s: shed %d, %+v; want shed %d, %.3f s (link %.3f s, storage %.3f s, %.0f bytes, compute %.3f CPU-s, %s)",
				tc.name, n, got, tc.shed, tc.seconds, tc.linkS, tc.stor, tc.bytes, tc.computeCPU, tc.bottleneck)
		}
		if !near(pl.Pred.Seconds, tc.planSeconds) {
			t.Errorf("%s: Shed changed the plan's own prediction to %.3f s", tc.name, pl.Pred.Seconds)
		}
		// The engine's Shedder, primed before any offload is measured,
		// sheds from the first request what the model shed.
		order := make([]uint64, len(pl.Split))
		for i := range order {
			order[i] = uint64(i + 1)
		}
		wire := func(sample uint64, k int) float64 { return float64(in.Profile.Samples[sample-1].Bytes[k]) }
		sh := schedule.NewShedder(order, pl.Split, wire, run, run.StorageSpeed(), run.StorageNSPerByte(), tc.link, r.StorageCores, time.Now)
		sh.Prime()
		primed := 0
		for pos, k := range pl.Split {
			if sh.Split(pos, k) == 0 {
				primed++
			}
		}
		if primed != tc.shed {
			t.Errorf("%s: the primed Shedder requests %d offloads raw, the model shed %d", tc.name, primed, tc.shed)
		}
		for i, k := range pl.Split {
			if k != 2 {
				t.Errorf("%s: Shed changed the plan's split of entry %d to %d", tc.name, i, k)
			}
		}
	}
}

// TestReplanShed: with Shedding (work-conserving offload, the default)
// the planner's Expected, and the report's account, are the shed
// prediction beside the plan's own; without it, the plan's.
func TestReplanShed(t *testing.T) {
	r := policy.Resources{LinkBytesPerSec: 2000, StorageCores: 1, ComputeCores: 4, StorageSpeed: 1}
	for _, shedding := range []bool{true, false} {
		pl := &Planner{Name: policy.NameAllOff, Prof: shedProfile(100, 200, 400, 50), Res: r, Shedding: shedding}
		if err := pl.Replan(); err != nil {
			t.Fatal(err)
		}
		a := pl.account()
		want, wantShed := 0.8, 1
		if !shedding {
			want, wantShed = 1.5, 0
		}
		if !near(pl.Expected.Seconds, want) || pl.ExpectedShed != wantShed || !near(a.Seconds, want) || a.Shed != wantShed ||
			!near(a.PlanSeconds, 1.5) || !near(pl.Plan.Pred.Seconds, 1.5) {
			t.Errorf("shedding %v: expected %.3f s (%d shed), account %.3f s (%d shed, plan %.3f s), plan %.3f s; want %.3f s (%d shed), plan 1.5 s",
				shedding, pl.Expected.Seconds, pl.ExpectedShed, a.Seconds, a.Shed, a.PlanSeconds, pl.Plan.Pred.Seconds, want, wantShed)
		}
	}
}

// ramp is 1, 2, ..., n.
func ramp(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(1, math.Abs(b)) }
