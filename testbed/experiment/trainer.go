package experiment

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/bed"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/trainscript"
)

// reportWait bounds how long the trainer row waits, after the trainer
// ended, for the agent's last report line (written once the trainer
// released the epoch's last batch).
const reportWait = 10 * time.Second

// runTrainer runs the trainer row: the compute agent serving its trainer
// socket on the compute side, fetching from the storage agent at addr
// over the link, and train_cnn.py training through the Python client
// beside it. Its epochs are the agent's report lines (exactly once from
// its --samples-out); the loop's figures are the script's.
func (x *experiment) runTrainer(ctx context.Context, b *bed.Bed, dir, addr string, cpus float64) results.Run {
	run := results.Run{Policy: results.TrainerPolicy, Plan: x.cfg.TrainPolicy, Training: true}
	if x.trainErr != nil {
		run.Skipped = x.trainErr.Error()
		return run
	}
	sock, rmSock, err := trainscript.Socket(dir)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	defer rmSock()
	base := results.TrainerPolicy
	reportPath := filepath.Join(dir, base+".jsonl")
	samples := filepath.Join(dir, base+".samples")
	for _, p := range []string{reportPath, samples} {
		os.Remove(p)
	}
	args := []string{"--storage", addr, "--trainer-socket", sock, "--strict-order", "--epochs", strconv.Itoa(x.cfg.Epochs),
		"--pipeline", x.pipe, "--seed", strconv.FormatUint(x.cfg.Seed, 10), "--report", reportPath,
		"--samples-out", samples, "--progress", "0", "--log-level", "warn", "--log-format", "json"}
	if x.cfg.TrainPolicy == "nooff" {
		args = append(args, "--plan", "nooff")
	} else {
		// Its own profile: with uint8 slots the agent's pipeline is cut
		// before to_tensor, so the policy rows' profile does not fit it.
		// The first trainer row profiles its first epoch (No-Off) and the
		// later cells' reuse that. Stage 1 rates the simulated GPU of the
		// other rows.
		if base, est := splitEst(x.cfg.TrainPolicy); est {
			// No saved profile: planned from header estimates.
			fresh := freshProfile(reportPath)
			os.Remove(fresh)
			args = append(args, "--policy", base, "--profile", fresh, "--gpu", gpuFlag(x.cfg.GPURate))
		} else {
			args = append(args, "--policy", x.cfg.TrainPolicy, "--profile", x.trainerProfile(x.pipeIdx), "--force-profile", "--gpu", gpuFlag(x.cfg.GPURate))
		}
	}
	if x.cfg.Batch > 0 {
		args = append(args, "--batch", strconv.Itoa(x.cfg.Batch))
	}
	if x.cfg.WorkConserving == WorkConservingOff {
		// "both" runs the trainer row once, with the agent's default.
		args = append(args, noWorkConserving)
		run.WorkConservingOff = true
	}
	// With --cache-bytes the trainer's agent gets a fresh cache too, its
	// plan choosing the residency as the policy rows' do.
	plan, _ := splitEst(x.cfg.TrainPolicy)
	args = append(args, x.cacheArgs(policyRun{name: base, policy: plan}, reportPath)...)
	args = append(args, x.computeTLS[0]...)
	args = append(args, x.cfg.ComputeFlags...)
	agentLog := filepath.Join(dir, base+"-agent.log")
	agent, err := b.StartDaemon(ctx, bed.ComputeHost(0), agentLog, "serving "+sock, func(context.Context) error {
		st, err := os.Stat(sock)
		if err == nil && st.Mode()&os.ModeSocket == 0 {
			err = fmt.Errorf("%s is not a socket", sock)
		}
		return err
	}, x.bins.compute, args...)
	if err != nil {
		run.Error = fmt.Sprintf("compute agent: %v", err)
		return run
	}
	defer agent.Stop()

	out := filepath.Join(dir, base+".out")
	targs := trainscript.Args(x.trainScript, sock, x.cfg.Epochs, x.numClasses())
	label := fmt.Sprintf("[%s, %g storage cpus] %s", b.Label(), cpus, run.Policy)
	var rs []report.EpochReport
	err = x.runProcess(ctx, b, client{procs: []proc{{logPath: filepath.Join(dir, base+".log"), stdoutPath: out,
		env: []string{"PYTHONPATH=" + trainscript.PythonPath(x.trainScript)}, name: x.cfg.Python, args: targs}},
		progress: func(mbps float64) string {
			steps, _, _ := trainscript.ReadOut(out)
			msg := fmt.Sprintf("%s: %d steps, link %.2f MB/s", label, len(steps), mbps)
			if k := len(steps); k > 0 {
				msg += fmt.Sprintf(", epoch %d, loss %.4f", steps[k-1].Epoch, *steps[k-1].Loss)
			}
			return msg
		},
		collect: func(s *bed.Series) error {
			steps, sum, err := trainscript.ReadOut(out)
			if err != nil {
				return err
			}
			run.FirstLosses = trainscript.FirstLosses(steps, results.FirstLossSteps)
			if sum != nil {
				run.LoopImages, run.LoopSteps, run.LoopSeconds, run.LoopWaitSeconds = sum.Images, sum.Steps, sum.Seconds, sum.WaitSeconds
				if sum.ImagesPerSec != nil {
					run.LoopImagesPerSec = *sum.ImagesPerSec
				}
			}
			// The agent writes an epoch's line once the trainer released
			// its last batch: it may come just after the trainer ended.
			for deadline := time.Now().Add(reportWait); ; time.Sleep(50 * time.Millisecond) {
				rs, err = report.ReadReport(reportPath)
				if (err == nil && len(rs) >= x.cfg.Epochs) || time.Now().After(deadline) || ctx.Err() != nil {
					break
				}
			}
			if err != nil {
				return err
			}
			if err := x.agentEpochs(b.Netns(), s, &run, [][]report.EpochReport{rs}); err != nil {
				return err
			}
			if sum == nil {
				return fmt.Errorf("%s printed no summary line (stdout: %s)", filepath.Base(x.trainScript), out)
			}
			return nil
		}})
	if serr := agent.Stop(); serr != nil && err == nil && ctx.Err() == nil {
		err = fmt.Errorf("compute agent: %v (log: %s)%s", serr, agentLog, bed.Tail(agentLog))
	}
	if err != nil {
		run.Error = err.Error()
	}
	x.checkSamples(&run, [][]report.EpochReport{rs}, []string{samples}, false)
	if len(run.Epochs) < x.cfg.Epochs && run.Error == "" {
		run.Error = fmt.Sprintf("%d of %d epochs reported", len(run.Epochs), x.cfg.Epochs)
	}
	x.cfg.Log.Info().Str("rate", b.Label()).Float64("storage_cpus", cpus).Str("plan", run.Plan).
		Float64("loop_images_per_sec", run.LoopImagesPerSec).Floats64("first_losses", run.FirstLosses).
		Bool("exactly_once", run.ExactlyOnce).Msg("trainer row done")
	return run
}

// numClasses is the CNN's classes: Config.NumClasses, else the dataset's
// class folders, else 1000.
func (x *experiment) numClasses() int {
	switch {
	case x.cfg.NumClasses > 0:
		return x.cfg.NumClasses
	case x.res.Dataset.Classes > 0:
		return x.res.Dataset.Classes
	}
	return 1000
}
