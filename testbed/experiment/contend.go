package experiment

import (
	"errors"
	"math"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/profiler"
	"github.com/sophon-dl/sophon/testbed/cellbound"
	"github.com/sophon-dl/sophon/testbed/hog"
	"github.com/sophon-dl/sophon/testbed/results"
)

// Contention (Config.ContendAt): each policy run starts a gated CPU hog
// in the storage agent's cgroup (package hog) and opens its gate once the
// compute agent's report shows floor(ContendAt x Epochs) epochs; what the
// hog took is scored here, against the reduced-CPU prediction.

// minCoresLeft stands in for a storage share the hog took entirely: a
// zero would mean unlimited to the planner.
const minCoresLeft = 1e-3

// contendAfter is the epochs a policy run reports before its hog starts.
func (x *experiment) contendAfter() int {
	return int(math.Floor(x.cfg.ContendAt * float64(x.cfg.Epochs)))
}

// contended stops the run's hog and records it in run.Contention, with
// the reduced-CPU prediction; nothing when the hog never started (the run
// ended or failed first). policy is the run's.
func (x *experiment) contended(run *results.Run, policy string, h *hog.Hog, rs []report.EpochReport, cpus float64) {
	u := h.Stop()
	if u.Opened.IsZero() {
		x.cfg.Log.Warn().Str("policy", run.Policy).Int("epochs", len(rs)).Msg("the run ended before its hog started")
		return
	}
	k := &results.Contention{AfterEpochs: u.After, Threads: u.Threads, HogCPUSeconds: u.CPU.Seconds(), HogSeconds: u.Wall.Seconds()}
	if k.HogSeconds > 0 {
		k.HogCores = k.HogCPUSeconds / k.HogSeconds
	}
	k.StorageCoresLeft = cpus - k.HogCores
	switch {
	case len(rs) > u.After:
		k.FromEpoch = int(rs[u.After].Epoch)
		if st := rs[u.After].StartUnixNS; st > 0 {
			k.IntoEpochSeconds = float64(u.Opened.UnixNano()-st) / 1e9
		}
	case u.After > 0 && len(rs) >= u.After:
		k.FromEpoch = int(rs[u.After-1].Epoch) + 1
	}
	if u.LastEnd > 0 {
		k.LagSeconds = float64(u.Opened.UnixNano()-u.LastEnd) / 1e9
	}
	var err error
	if k.PredictedSeconds, err = x.reducedPrediction(policy, rs, k.FromEpoch, k.StorageCoresLeft); err != nil {
		k.PredictionError = err.Error()
	}
	run.Contention = k
	x.cfg.Log.Info().Str("policy", run.Policy).Int("from_epoch", k.FromEpoch).Float64("lag_seconds", k.LagSeconds).
		Float64("into_epoch_seconds", k.IntoEpochSeconds).
		Float64("hog_cores", k.HogCores).Float64("storage_cores_left", k.StorageCoresLeft).
		Float64("reduced_prediction_seconds", k.PredictedSeconds).Msg("contended")
}

// reducedPrediction is the named policy's epoch time for the experiment's
// profile and the run's stage 1 resources (its first report line) with
// storageCores storage cores, and the storage CPU per byte sent as the
// last epoch before the hog (before epoch from) measured it: what its
// re-plan predicts at that CPU.
func (x *experiment) reducedPrediction(name string, rs []report.EpochReport, from int, storageCores float64) (float64, error) {
	if len(rs) == 0 || rs[0].Stage1 == nil {
		return 0, errors.New("no stage 1 in the compute agent's report")
	}
	prof, err := profiler.Load(x.cellProfile, "", "")
	if err != nil {
		return 0, err
	}
	cores := rs[0].Stage1.ComputeCores // what its model planned with: its quota
	if cores <= 0 {
		cores = cellbound.ComputeCores(x.cfg.ComputeFlags)
	}
	res := stage1Resources(*rs[0].Stage1, storageCores, cores)
	for _, r := range rs {
		if int(r.Epoch) < from && r.StorageNSPerByte > 0 {
			res.StorageNSPerByte = r.StorageNSPerByte
		}
	}
	plan, err := policy.ByName(name, policy.OneNode(prof, res))
	if err != nil {
		return 0, err
	}
	return plan.Pred.Seconds, nil
}

// stage1Resources is the planner's policy.Resources as the compute agent
// builds them from stage 1 (computeagent's stage1), with storageCores
// storage cores instead of the storage agents' --cpus (at least
// minCoresLeft: zero would mean unlimited).
func stage1Resources(s report.Stage1Summary, storageCores, computeCores float64) policy.Resources {
	return policy.Resources{
		LinkBytesPerSec:  s.LinkBytesPerSec,
		StorageCores:     max(storageCores, minCoresLeft),
		ComputeCores:     computeCores,
		GPUSamplesPerSec: s.GPUSamplesPerSec,
		StorageSpeed:     s.StorageSpeed,
	}
}
