package peer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/computeagent"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/testbed/fileserve"
)

func TestDefaultBatchIsTheComputeAgents(t *testing.T) {
	if DefaultBatch != computeagent.DefaultBatch {
		t.Errorf("DefaultBatch = %d, want computeagent.DefaultBatch %d", DefaultBatch, computeagent.DefaultBatch)
	}
}

func TestScript(t *testing.T) {
	path, err := Script()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(ScriptName)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) || filepath.Base(path) != ScriptName {
		t.Errorf("Script() = %s: %d bytes, want a copy of %s (%d bytes)", path, len(got), ScriptName, len(want))
	}
	if again, err := Script(); err != nil || again != path {
		t.Errorf("second Script() = %s, %v; want %s", again, err, path)
	}
}

func TestArgs(t *testing.T) {
	script, err := Script()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		o    Options
		want string // argv after the script, or the error's text
	}{
		{"defaults", Options{URL: "http://10.0.0.1:8080"},
			fmt.Sprintf("--url http://10.0.0.1:8080 --preset imagenet-train --epochs 1 --batch 128 --workers %d --gpu-rate 0 --seed 0", defaultWorkers())},
		{"all", Options{Python: "py", URL: "http://h:1", Preset: "imagenet-val", Report: "r.jsonl", Epochs: 3, Batch: 4,
			Workers: -1, GPURate: 1150.5, Seed: 18446744073709551615, Progress: true},
			"--url http://h:1 --preset imagenet-val --epochs 3 --batch 4 --workers 0 --gpu-rate 1150.5 --seed 18446744073709551615 --report r.jsonl --progress"},
		{"train", Options{URL: "http://h:1", Workers: 2, TrainModel: "/r/python/examples/train_cnn.py", NumClasses: 4},
			"--url http://h:1 --preset imagenet-train --epochs 1 --batch 128 --workers 2 --gpu-rate 0 --seed 0 --train-model /r/python/examples/train_cnn.py --num-classes 4 --first-losses 10"},
		{"classes", Options{URL: "http://h:1", NumClasses: -1}, "num classes -1"},
		{"no url", Options{}, "URL is required"},
		{"https", Options{URL: "https://h:1"}, "want http://HOST:PORT"},
		{"no host", Options{URL: "http://:8080"}, "want http://HOST:PORT"},
		{"preset", Options{URL: "http://h:1", Preset: "alexnet"}, `preset "alexnet"`},
		{"epochs", Options{URL: "http://h:1", Epochs: -1}, "epochs -1"},
		{"batch", Options{URL: "http://h:1", Batch: -2}, "batch -2"},
		{"rate", Options{URL: "http://h:1", GPURate: -1}, "GPU rate -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, err := Args(tc.o)
			if err != nil {
				if !errors.Is(err, ErrOptions) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Args: %v, want %s", err, tc.want)
				}
				return
			}
			py := tc.o.Python
			if py == "" {
				py = DefaultPython
			}
			if len(argv) < 2 || argv[0] != py || argv[1] != script {
				t.Fatalf("argv %q, want %s %s first", argv, py, script)
			}
			if got := strings.Join(argv[2:], " "); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func defaultWorkers() int {
	o, _ := Options{URL: "http://h:1"}.withDefaults()
	return o.Workers
}

func TestReadReport(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peer.jsonl")
	body := `{"epoch": 1, "seconds": 1.5, "samples": 12, "batches": 3, "bytes": 4096, "unique_samples": 12, "duplicates": 0, "failed": 0, "gpu_idle_seconds": 0.25, "pipeline": "torchvision-imagenet-train", "batch": 4, "workers": 2, "gpu_rate": 0.0}
{"epoch": 2, "seconds": 1.25, "samples": 11, "batches": 3, "bytes": 4096, "unique_samples": 11, "duplicates": 0, "failed": 1, "gpu_idle_seconds": 0.5, "pipeline": "torchvision-imagenet-train", "batch": 4, "workers": 2, "gpu_rate": 0.0}
{"epoch": 3, "seco`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Epoch{
		{Epoch: 1, Seconds: 1.5, Samples: 12, Batches: 3, Bytes: 4096, UniqueSamples: 12, GPUIdleSeconds: 0.25,
			Pipeline: "torchvision-imagenet-train", Batch: 4, Workers: 2},
		{Epoch: 2, Seconds: 1.25, Samples: 11, Batches: 3, Bytes: 4096, UniqueSamples: 11, Failed: 1, GPUIdleSeconds: 0.5,
			Pipeline: "torchvision-imagenet-train", Batch: 4, Workers: 2},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}

	if err := os.WriteFile(path, []byte("{\"epoch\": 1}\nnot json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadReport(path); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("corrupt report: %v, want an error naming line 2", err)
	}
	if _, err := ReadReport(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing report: %v, want ErrNotExist", err)
	}
}

// TestSkipsWithoutTorch runs the script with a torch that fails to import:
// it must exit SkipExit with the install hint.
func TestSkipsWithoutTorch(t *testing.T) {
	if _, err := os.Stat(DefaultPython); err != nil {
		testutil.Require(t, "no %s: %v", DefaultPython, err)
	}
	fake := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fake, "torch"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fake, "torch", "__init__.py"), []byte("raise ImportError('no torch in this test')\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd, err := Command(context.Background(), Options{URL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "PYTHONPATH="+fake)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err = cmd.Run()
	if !IsSkipped(err) || !strings.Contains(stderr.String(), "peer skipped: torchvision missing (apt-get install python3-torchvision)") {
		t.Errorf("run: %v (skipped %v), stderr %q; want exit %d and the install hint", err, IsSkipped(err), stderr.String(), SkipExit)
	}
	if err := Available("/nonexistent/python3"); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "apt-get install python3-torchvision python3-pil") {
		t.Errorf("Available(missing interpreter) = %v, want ErrUnavailable with the install hint", err)
	}
}

// available is Available(""), once per test binary: torch takes seconds
// to import.
var available = sync.OnceValue(func() error { return Available("") })

// needPeer skips a test that runs the script where torchvision is missing.
func needPeer(t *testing.T) {
	t.Helper()
	if err := available(); err != nil {
		testutil.Require(t, "peer unavailable: %v", err)
	}
}

// writeDataset writes n small JPEGs of varied sizes in three class folders
// and returns their total size.
func writeDataset(t *testing.T, dir string, n int) int64 {
	t.Helper()
	var total int64
	for i := range n {
		b, err := synth.JPEG(uint64(100+i), 48+16*(i%5), 40+12*(i%4), synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("class_%03d", i%3), fmt.Sprintf("n%08d.jpg", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		total += int64(len(b))
	}
	return total
}

// TestPeerOverHTTP runs the real DataLoader peer against a fileserve
// server on loopback: every epoch delivers every file once, and the
// server's byte count matches the peer's.
func TestPeerOverHTTP(t *testing.T) {
	needPeer(t)
	const n, epochs = 12, 2
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	total := writeDataset(t, data, n)

	srv, err := fileserve.New(data)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, lis) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	report := filepath.Join(dir, "peer.jsonl")
	cmd, err := Command(ctx, Options{
		URL: "http://" + lis.Addr().String(), Preset: "imagenet-train", Report: report,
		Epochs: epochs, Batch: 4, Workers: 2, GPURate: 1000, Seed: 7,
	})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err = cmd.Run()
	t.Logf("peer ran in %v:\n%s", time.Since(start).Round(time.Millisecond), out.String())
	if err != nil {
		t.Fatalf("peer: %v", err)
	}

	got, err := ReadReport(report)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != epochs {
		t.Fatalf("report has %d epochs, want %d: %+v", len(got), epochs, got)
	}
	for i, e := range got {
		if e.Epoch != i+1 || e.Samples != n || e.UniqueSamples != n || e.Duplicates != 0 || e.Failed != 0 ||
			e.Batches != n/4 || e.Bytes != total || !(e.Seconds > 0) || e.GPUIdleSeconds < 0 || e.GPUIdleSeconds > e.Seconds ||
			e.EndUnixNS-e.StartUnixNS != int64(e.Seconds*1e9) && math.Abs(float64(e.EndUnixNS-e.StartUnixNS)/1e9-e.Seconds) > 1e-3 {
			t.Errorf("epoch %d: %+v; want epoch %d, %d samples all unique in %d batches, %d bytes, none failed",
				i+1, e, i+1, n, n/4, total)
		}
		// The simulated GPU sleeps n/GPURate per epoch.
		if min := float64(n) / 1000; e.Seconds < min {
			t.Errorf("epoch %d took %.3fs, less than the GPU's %.3fs", i+1, e.Seconds, min)
		}
	}
	if got, want := srv.BytesServed(), int64(epochs)*total; got != want {
		t.Errorf("server sent %d bytes, want %d (%d epochs of %d)", got, want, epochs, total)
	}
	if got, want := srv.Requests(), int64(epochs*n); got != want {
		t.Errorf("server answered %d file requests, want %d", got, want)
	}
}

// TestPeerFailsOnMissingServer checks that an unreachable server is an
// error with a message, not a hang or a skip.
func TestPeerFailsOnMissingServer(t *testing.T) {
	needPeer(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	cmd, err := Command(context.Background(), Options{URL: "http://" + addr, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "index.json") {
		t.Errorf("run: %v, output %q; want exit 1 naming the index", err, out)
	}
}

// TestPeerTrains runs the peer in training mode: it trains
// python/examples/train_cnn.py's CNN on the ImageFolder labels and
// reports each epoch's first losses.
func TestPeerTrains(t *testing.T) {
	needPeer(t)
	model, err := filepath.Abs("../../python/examples/train_cnn.py")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(model); err != nil {
		t.Skipf("SKIP: no trainer script: %v", err)
	}
	const n, epochs, batch = 12, 2, 4
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	writeDataset(t, data, n)
	srv, err := fileserve.New(data)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(sctx, lis) }()
	defer func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	report := filepath.Join(dir, "peer.jsonl")
	cmd, err := Command(ctx, Options{
		URL: "http://" + lis.Addr().String(), Report: report, Epochs: epochs, Batch: batch, Workers: 1, Seed: 7,
		TrainModel: model, NumClasses: 3, FirstLosses: 2,
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	t.Logf("peer:\n%s", out)
	if err != nil {
		t.Fatalf("peer: %v", err)
	}
	got, err := ReadReport(report)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != epochs {
		t.Fatalf("%d epochs, want %d", len(got), epochs)
	}
	for _, e := range got {
		if !e.Trained || e.Samples != n || e.Batches != n/batch || len(e.Losses) != 2 {
			t.Errorf("epoch %d: %+v; want trained, %d samples, %d batches, 2 losses", e.Epoch, e, n, n/batch)
		}
		for _, l := range e.Losses {
			// Three classes: a fresh classifier starts near ln 3.
			if !(l > 0 && l < 10) {
				t.Errorf("epoch %d: loss %v", e.Epoch, l)
			}
		}
	}
	if !strings.Contains(string(out), "SmallCNN (3 classes") {
		t.Errorf("the peer does not say it trains the SmallCNN")
	}
}
