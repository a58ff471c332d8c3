package testbed

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/testbed/shape"
)

const debianPython = "/usr/bin/python3"

// repoRoot is the repository's root (this file's folder's parent).
func repoRoot(tb testing.TB) string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		tb.Fatal("no caller")
	}
	return filepath.Dir(filepath.Dir(file))
}

// needTorch skips, saying why, where Debian's PyTorch is missing.
func needTorch(tb testing.TB) {
	tb.Helper()
	testutil.RequirePython(tb, "python3-torch python3-numpy", "torch", "numpy")
}

// startStorage starts the storage agent on data at a free loopback
// address, waits until it listens and returns the address.
func startStorage(t *testing.T, ctx context.Context, bins agentBinaries, data string) string {
	t.Helper()
	addr := testutil.FreeAddr(t)
	st := start(t, command(ctx, bins.storage, append([]string{"--data", data, "--listen", addr, "--cpus", "1", "--log-level", "warn"}, bins.storageSec...)...))
	st.waitListening(t, func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "tcp", addr) })
	return addr
}

// step is one line of python/examples/train_cnn.py's output.
type step struct {
	Epoch   uint64 `json:"epoch"`
	Step    int    `json:"step"`
	Batch   int    `json:"batch"`
	LossHex string `json:"loss_hex"`
	Images  int    `json:"images"`
}

// trainThrough runs the example trainer through a compute agent started
// with args, and returns its steps and the agent's reports.
func trainThrough(t *testing.T, bins agentBinaries, storage, dir string, epochs int, args ...string) ([]step, []report.EpochReport) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "trainer.sock")
	reportPath := filepath.Join(dir, "epochs.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	agent := command(ctx, bins.compute, append([]string{"--storage", storage, "--trainer-socket", sock,
		"--strict-order", "--batch", "8", "--seed", "3", "--report", reportPath, "--log-level", "warn"}, append(bins.computeSec, args...)...)...)
	p := start(t, agent)
	p.waitListening(t, func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "unix", sock) })
	cmd := exec.CommandContext(ctx, debianPython, filepath.Join(repoRoot(t), "python/examples/train_cnn.py"),
		"--socket", sock, "--epochs", fmt.Sprint(epochs), "--num-classes", "4")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("trainer: %v\n%s\nagent:\n%s", err, stderr.String(), p.logs.String())
	}
	var steps []step
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var s step
		if json.Unmarshal(sc.Bytes(), &s) == nil && s.LossHex != "" {
			steps = append(steps, s)
		}
	}
	// The agent writes its report line after the trainer released the
	// epoch's last batch.
	var reps []report.EpochReport
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if reps, err = report.ReadReport(reportPath); err == nil && len(reps) == epochs {
			break
		}
	}
	if len(reps) != epochs {
		t.Fatalf("%d report lines, want %d (%v)\n%s", len(reps), epochs, err, p.logs.String())
	}
	return steps, reps
}

// TestTrainingIdenticalAcrossPlans trains the example CNN through the real
// agents and the Python client under No-Off and a mixed per-sample plan
// for imagenet-train, and for imagenet-train-q95 (whose crop goes through
// a JPEG round trip on whichever node runs it) also under SOPHON's policy
// and optimal, its mixed plan sending some samples as the crop's JPEG:
// within a pipeline every step's loss must be identical, byte for
// byte, and q95's must differ from imagenet-train's (its tensors do). The
// storage agent sits behind a shaped link so that the policies offload.
func TestTrainingIdenticalAcrossPlans(t *testing.T) {
	needTorch(t)
	bins := buildAgents(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	paths, err := synth.WriteImageFolder(data, synth.ImageNetLike, 5, 48, 4)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := startStorage(t, ctx, bins, data)
	link := &shape.Proxy{Listen: "127.0.0.1:0", Target: addr, Rate: shape.MustParseRate("40mbit")}
	go link.Serve(ctx)
	for link.Addr() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	storage := link.Addr().String()

	var firsts []string
	for _, pc := range []struct {
		pipeline string
		// splits of the mixed plan, dealt round the samples; policies
		// beside nooff and the mixed plan.
		splits   []int
		policies []string
	}{
		// Raw, after the crop, after the flip (SOPHON's plans under this
		// pipeline keep No-Off's tensors: TestPolicySOPHON in
		// compute-agent).
		{"imagenet-train", []int{0, 2, 3}, nil},
		// Raw, after the flip, the crop's JPEG (after encode_jpeg), its
		// decode.
		{"imagenet-train-q95", []int{0, 3, 4, 5}, []string{"sophon", "optimal"}},
	} {
		ref := trainAcrossPlans(t, bins, storage, filepath.Join(dir, pc.pipeline), pc.pipeline, len(paths), pc.splits, pc.policies)
		firsts = append(firsts, ref[0].LossHex+" "+ref[1].LossHex)
		if strings.HasPrefix(ref[0].LossHex, "nan") {
			t.Errorf("%s: losses are NaN", pc.pipeline)
		}
	}
	if firsts[0] == firsts[1] {
		t.Errorf("imagenet-train-q95's first losses %s equal imagenet-train's: the JPEG round trip changed nothing", firsts[1])
	}
}

// trainAcrossPlans trains through pipeline under nooff, each of policies
// and a mixed plan dealing splits round the n samples, checks that every
// run's steps equal nooff's and that each plan but nooff offloaded (the
// mixed plan at each of its splits), and returns nooff's steps.
func trainAcrossPlans(t *testing.T, bins agentBinaries, storage, dir, pipeline string, n int, splits []int, policies []string) []step {
	t.Helper()
	plan := map[string]int{}
	for i := range n {
		plan[fmt.Sprint(i)] = splits[i%len(splits)]
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	planFile := filepath.Join(dir, "mixed.json")
	b, _ := json.Marshal(map[string]any{"default": 0, "splits": plan})
	if err := os.WriteFile(planFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	// Epoch 0 profiles under the policies; epoch 1 runs their plan.
	const epochs = 2
	type run struct {
		name string
		args []string
	}
	runs := []run{{"nooff", []string{"--plan", "nooff"}}}
	for _, p := range policies {
		runs = append(runs, run{p, []string{"--policy", p, "--force-profile", "--profile-budget", "500ms"}})
	}
	runs = append(runs, run{"mixed", []string{"--plan", planFile}})
	var ref []step
	for i, r := range runs {
		steps, reps := trainThrough(t, bins, storage, filepath.Join(dir, r.name), epochs, append([]string{"--pipeline", pipeline}, r.args...)...)
		if want := epochs * 6; len(steps) != want {
			t.Fatalf("%s %s: %d steps, want %d", pipeline, r.name, len(steps), want)
		}
		bySplit := map[int]int{}
		for _, rep := range reps {
			if rep.Consumer != "trainer" || len(rep.Trainers) != 1 || rep.Trainers[0].Batches != 6 {
				t.Errorf("%s %s epoch %d: consumer %q, trainers %+v", pipeline, r.name, rep.Epoch, rep.Consumer, rep.Trainers)
			}
			for _, s := range rep.BySplit {
				bySplit[s.Split] += s.Samples
			}
		}
		t.Logf("%s %s: samples by split over %d epochs %v; first losses %s %s", pipeline, r.name, epochs, bySplit, steps[0].LossHex, steps[1].LossHex)
		switch r.name {
		case "nooff":
		case "mixed":
			for _, k := range splits {
				if bySplit[k] == 0 {
					t.Errorf("%s mixed: no sample at split %d (%v)", pipeline, k, bySplit)
				}
			}
		default:
			if bySplit[0] == epochs*n {
				t.Errorf("%s %s offloaded nothing: the comparison would be vacuous", pipeline, r.name)
			}
		}
		if i == 0 {
			ref = steps
			continue
		}
		for k := range min(len(steps), len(ref)) {
			if steps[k] != ref[k] {
				t.Fatalf("%s %s: step %d differs from nooff: %+v vs %+v", pipeline, r.name, k, steps[k], ref[k])
			}
		}
	}
	return ref
}

// TestTrainingResume kills the example trainer after a few steps and
// restarts it from its state file: in strict order the batches after the
// kill, and the losses, are byte-identical to an uninterrupted run's.
func TestTrainingResume(t *testing.T) {
	needTorch(t)
	bins := buildAgents(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	if _, err := synth.WriteImageFolder(data, synth.ImageNetLike, 9, 40, 4); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := startStorage(t, ctx, bins, data)
	sock := filepath.Join(dir, "trainer.sock")
	agent := start(t, command(ctx, bins.compute, append([]string{"--storage", addr, "--trainer-socket", sock, "--strict-order",
		"--batch", "8", "--seed", "5", "--log-level", "warn"}, bins.computeSec...)...))
	agent.waitListening(t, func(ctx context.Context) (net.Conn, error) { return (&net.Dialer{}).DialContext(ctx, "unix", sock) })
	train := func(args ...string) ([]string, error) {
		cmd := exec.CommandContext(ctx, debianPython, append([]string{filepath.Join(repoRoot(t), "python/examples/train_cnn.py"),
			"--socket", sock, "--epochs", "2", "--num-classes", "4"}, args...)...)
		out, err := cmd.Output()
		var losses []string
		for _, line := range strings.Split(string(out), "\n") {
			var s step
			if json.Unmarshal([]byte(line), &s) == nil && s.LossHex != "" {
				losses = append(losses, s.LossHex)
			}
		}
		return losses, err
	}
	readDump := func(path string) []string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
	full, err := train("--dump-batches", filepath.Join(dir, "full.jsonl"))
	if err != nil {
		t.Fatalf("uninterrupted run: %v\n%s", err, agent.logs.String())
	}
	const k = 3
	state := filepath.Join(dir, "state.pt")
	cut, err := train("--dump-batches", filepath.Join(dir, "cut.jsonl"), "--state-out", state, "--kill-after-step", fmt.Sprint(k))
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 3 {
		t.Fatalf("killed run: %v", err)
	}
	var rest []string
	for range 50 { // the agent first abandons the killed trainer's epoch
		if rest, err = train("--dump-batches", filepath.Join(dir, "resumed.jsonl"), "--resume", state); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("resumed run: %v\n%s", err, agent.logs.String())
	}
	if got := append(cut, rest...); !slices.Equal(got, full) {
		t.Errorf("losses killed+resumed %v, uninterrupted %v", got, full)
	}
	fullDump, resumed := readDump(filepath.Join(dir, "full.jsonl")), readDump(filepath.Join(dir, "resumed.jsonl"))
	if !slices.Equal(resumed, fullDump[k:]) {
		t.Errorf("batches after resume differ from the uninterrupted run's:\n%v\n%v", resumed, fullDump[k:])
	}
	t.Logf("%d steps; killed after %d, resumed %d steps, identical batches and losses", len(full), k, len(rest))
}
