package experiment

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/testbed/bed"
	"github.com/sophon-dl/sophon/testbed/results"
)

// TrainScript is the example trainer's path inside the repository.
const TrainScript = "python/examples/train_cnn.py"

// trainTimeout is the trainer's --timeout: the seconds one batch may take
// to come before the client gives up. A batch of 128 openimages-like
// samples fetched raw over a 10 Mbit/s link takes about 30 s.
const trainTimeout = 300

// reportWait bounds how long the trainer row waits, after the trainer
// ended, for the agent's last report line (written once the trainer
// released the epoch's last batch).
const reportWait = 10 * time.Second

// findTrainScript resolves Config.TrainScript: as given, else
// python/examples/train_cnn.py under the binaries' folder's parent (make
// build puts them in bin/), the binaries' folder, then the working
// directory and its parents.
func findTrainScript(given, binDir string) (string, error) {
	if given != "" {
		if _, err := os.Stat(given); err != nil {
			return "", err
		}
		return filepath.Abs(given)
	}
	var dirs []string
	if binDir != "" {
		dirs = append(dirs, filepath.Dir(binDir), binDir)
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			dirs = append(dirs, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, TrainScript)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("%s not found next to the binaries (%s/..) or above the working directory; give its path", TrainScript, binDir)
}

// trainReady checks that python can import what train_cnn.py and the
// client need, and returns the script's path, or why the training rows
// cannot run.
func trainReady(python, given, binDir string) (string, error) {
	script, err := findTrainScript(given, binDir)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", "import torch, numpy").CombinedOutput()
	if err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		return "", fmt.Errorf("%s cannot import torch and numpy (apt-get install python3-torch python3-numpy): %v: %s",
			python, err, strings.TrimSpace(lines[len(lines)-1]))
	}
	return script, nil
}

// pythonPath is the PYTHONPATH entry that makes python/sophon importable
// for the script at path (python/examples/train_cnn.py: its folder's
// parent).
func pythonPath(script string) string {
	return filepath.Dir(filepath.Dir(script))
}

// trainStep is one step line of train_cnn.py's stdout.
type trainStep struct {
	Epoch  uint64   `json:"epoch"`
	Step   int      `json:"step"`
	Batch  int      `json:"batch"`
	Loss   *float64 `json:"loss"`
	Images int      `json:"images"`
}

// trainSummary is train_cnn.py's last line: what reached the loop, from
// just before it asked for its first batch to its loader's close.
type trainSummary struct {
	Summary      bool     `json:"summary"`
	Images       int      `json:"images"`
	Steps        int      `json:"steps"`
	Seconds      float64  `json:"seconds"`
	ImagesPerSec *float64 `json:"images_per_s"`
	WaitSeconds  float64  `json:"wait_s"`
}

// readTrainOut reads train_cnn.py's stdout: its step lines and its summary
// line (nil when missing).
func readTrainOut(path string) ([]trainStep, *trainSummary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var steps []trainStep
	var sum *trainSummary
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var keys map[string]json.RawMessage
		if json.Unmarshal(line, &keys) != nil {
			continue
		}
		if _, ok := keys["loss"]; ok {
			var s trainStep
			if err := json.Unmarshal(line, &s); err == nil && s.Loss != nil {
				steps = append(steps, s)
			}
			continue
		}
		var s trainSummary
		if err := json.Unmarshal(line, &s); err == nil && s.Summary {
			sum = &s
		}
	}
	return steps, sum, sc.Err()
}

// firstLosses is the losses of steps' first results.FirstLossSteps.
func firstLosses(steps []trainStep) []float64 {
	var out []float64
	for _, s := range steps[:min(len(steps), results.FirstLossSteps)] {
		out = append(out, *s.Loss)
	}
	return out
}

// trainerSocket is the trainer row's socket path in dir, or in a fresh
// temporary folder where dir's path is too long for a Unix socket (108
// bytes with its NUL).
func trainerSocket(dir string) (path string, cleanup func(), err error) {
	path = filepath.Join(dir, "trainer.sock")
	if len(path) < 100 {
		os.Remove(path)
		return path, func() { os.Remove(path) }, nil
	}
	tmp, err := os.MkdirTemp("", "sph-sock-")
	if err != nil {
		return "", nil, err
	}
	return filepath.Join(tmp, "trainer.sock"), func() { os.RemoveAll(tmp) }, nil
}

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
	sock, rmSock, err := trainerSocket(dir)
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
		"--pipeline", x.cfg.Pipeline, "--seed", strconv.FormatUint(x.cfg.Seed, 10), "--report", reportPath,
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
			args = append(args, "--policy", x.cfg.TrainPolicy, "--profile", x.trainProfile, "--force-profile", "--gpu", gpuFlag(x.cfg.GPURate))
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
	targs := []string{x.trainScript, "--socket", sock, "--epochs", strconv.Itoa(x.cfg.Epochs),
		"--num-classes", strconv.Itoa(x.numClasses())}
	targs = append(targs, "--timeout", strconv.Itoa(trainTimeout))
	label := fmt.Sprintf("[%s, %g storage cpus] %s", b.Label(), cpus, run.Policy)
	var rs []report.EpochReport
	err = x.runProcess(ctx, b, client{procs: []proc{{logPath: filepath.Join(dir, base+".log"), stdoutPath: out,
		env: []string{"PYTHONPATH=" + pythonPath(x.trainScript)}, name: x.cfg.Python, args: targs}},
		progress: func(mbps float64) string {
			steps, _, _ := readTrainOut(out)
			msg := fmt.Sprintf("%s: %d steps, link %.2f MB/s", label, len(steps), mbps)
			if k := len(steps); k > 0 {
				msg += fmt.Sprintf(", epoch %d, loss %.4f", steps[k-1].Epoch, *steps[k-1].Loss)
			}
			return msg
		},
		collect: func(s *bed.Series) error {
			steps, sum, err := readTrainOut(out)
			if err != nil {
				return err
			}
			run.FirstLosses = firstLosses(steps)
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
