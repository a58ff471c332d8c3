// Package peer runs the testbed's peer row: what a user gets without our
// system. dataloader_peer.py, embedded here, is a stock PyTorch DataLoader
// with torchvision's transforms that reads the raw JPEGs over HTTP from a
// [fileserve] server (through the same shaped link as the agents) and
// feeds a simulated GPU that consumes as the compute agent's sim:RATE
// does. It writes one JSON line per epoch, read back by [ReadReport].
// With [Options].TrainModel the loop trains python/examples/train_cnn.py's
// small CNN on each batch instead, set up as that script sets it up, so
// that the testbed compares what reaches a training loop through the
// DataLoader with what reaches it through python/sophon's Loader.
//
// The script needs Debian's python3-torchvision and python3-pil ([Available]
// checks); [Args] gives its argv so a caller can run it inside a network
// namespace.
//
// [fileserve]: github.com/sophon-dl/sophon/testbed/fileserve
package peer

import (
	"bytes"
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

//go:embed dataloader_peer.py
var script []byte

// ScriptName is the embedded script's file name.
const ScriptName = "dataloader_peer.py"

// DefaultPython is the interpreter that Debian's python3-torchvision and
// python3-pil install into. NB: not the python3 first on PATH, which may be
// a pyenv or venv interpreter without torch.
const DefaultPython = "/usr/bin/python3"

// DefaultBatch is the compute agent's default batch
// (the compute agent's default batch), so both rows step the same GPU alike.
const DefaultBatch = 128

// SkipExit is the script's exit status when torch or torchvision cannot be
// imported; see [IsSkipped].
const SkipExit = 3

// Presets are the pipelines the script knows, as in torchvision_bench.py.
var Presets = []string{"imagenet-train", "imagenet-train-fast", "imagenet-val"}

var (
	// ErrUnavailable is returned by [Available] when the interpreter cannot
	// import torch, torchvision and PIL.
	ErrUnavailable = errors.New("peer: torchvision unavailable")
	// ErrOptions reports an [Options] that [Args] refuses.
	ErrOptions = errors.New("peer: bad options")
)

// availableTimeout bounds the import check: torch takes seconds to import
// on a cold cache.
const availableTimeout = time.Minute

// Available checks that python (empty means [DefaultPython]) imports torch,
// torchvision and PIL. The error wraps [ErrUnavailable] and says how to
// install them.
func Available(python string) error {
	if python == "" {
		python = DefaultPython
	}
	ctx, cancel := context.WithTimeout(context.Background(), availableTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, python, "-c", "import torch, torchvision, PIL").CombinedOutput()
	if err != nil {
		msg := lastLine(out)
		if ctx.Err() != nil {
			msg = fmt.Sprintf("no answer in %v", availableTimeout)
		}
		return fmt.Errorf("%w: %s -c 'import torch, torchvision, PIL': %v: %s; install them with apt-get install python3-torchvision python3-pil",
			ErrUnavailable, python, err, msg)
	}
	return nil
}

// lastLine is the last non-blank line of out: a traceback's error.
func lastLine(out []byte) string {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

var scriptOnce = sync.OnceValues(writeScript)

// Script writes the embedded dataloader_peer.py to a file and returns its
// path, so an installed testbed binary runs the peer outside the
// repository. The file is named by the script's hash under the user's cache
// directory (a fresh temporary directory when there is none), so runs reuse
// it and an old binary never runs a newer script. Safe for concurrent use.
func Script() (string, error) { return scriptOnce() }

func writeScript() (string, error) {
	sum := sha256.Sum256(script)
	tag := hex.EncodeToString(sum[:6])
	dir := ""
	if cache, err := os.UserCacheDir(); err == nil {
		dir = filepath.Join(cache, "sophon", "peer-"+tag)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			dir = ""
		}
	}
	if dir == "" {
		d, err := os.MkdirTemp("", "sophon-peer-"+tag+"-")
		if err != nil {
			return "", fmt.Errorf("peer: script: %w", err)
		}
		dir = d
	}
	path := filepath.Join(dir, ScriptName)
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(b, script) {
		return path, nil
	}
	// Through a temporary file, so a concurrent run never sees half a
	// script.
	f, err := os.CreateTemp(dir, ScriptName+".*")
	if err != nil {
		return "", fmt.Errorf("peer: script: %w", err)
	}
	_, werr := f.Write(script)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(f.Name(), 0o755)
	}
	if werr == nil {
		werr = os.Rename(f.Name(), path)
	}
	if werr != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("peer: script: %w", werr)
	}
	return path, nil
}

// Options are the script's flags.
type Options struct {
	// Python is the interpreter. Empty means [DefaultPython].
	Python string
	// URL is the file server, http://HOST:PORT (a fileserve server).
	// Required.
	URL string
	// Preset is one of [Presets]. Empty means imagenet-train.
	Preset string
	// Report is the file the script appends one JSON line per epoch to
	// (read it with [ReadReport]). Empty means no report.
	Report string
	// Epochs is the number of epochs. Zero means 1.
	Epochs int
	// Batch is the number of samples per batch. Zero means [DefaultBatch].
	Batch int
	// Workers is the DataLoader's num_workers. Zero means
	// runtime.NumCPU(); negative means none: loading runs in the training
	// process.
	Workers int
	// GPURate is the samples per second the simulated GPU consumes: it
	// sleeps len(batch)/GPURate per batch. Zero means unlimited.
	GPURate float64
	// Seed seeds the per-epoch shuffle and the transforms' draws.
	Seed uint64
	// Progress makes the script print a progress line to stderr every 2 s.
	Progress bool
	// TrainModel, when set, is python/examples/train_cnn.py: the loop
	// trains its SmallCNN (NumClasses outputs, its default learning rate,
	// seeded as it seeds it) on each batch instead of sleeping for the
	// simulated GPU; GPURate is then ignored, and each epoch's report has
	// Trained set and the losses of its first FirstLosses steps. The
	// interpreter needs the repository's python/ importable (the script
	// puts it on sys.path itself).
	TrainModel string
	// NumClasses is the CNN's outputs. Zero means 1000.
	NumClasses int
	// FirstLosses is how many of each epoch's first losses the report
	// keeps. Zero means 10.
	FirstLosses int
}

// withDefaults fills the zero fields and validates.
func (o Options) withDefaults() (Options, error) {
	if o.Python == "" {
		o.Python = DefaultPython
	}
	if o.Preset == "" {
		o.Preset = Presets[0]
	}
	if o.Epochs == 0 {
		o.Epochs = 1
	}
	if o.Batch == 0 {
		o.Batch = DefaultBatch
	}
	switch {
	case o.Workers == 0:
		o.Workers = runtime.NumCPU()
	case o.Workers < 0:
		o.Workers = 0
	}
	u, err := url.Parse(o.URL)
	switch {
	case o.URL == "":
		return o, fmt.Errorf("%w: URL is required", ErrOptions)
	case err != nil || u.Scheme != "http" || u.Hostname() == "":
		return o, fmt.Errorf("%w: URL %q: want http://HOST:PORT", ErrOptions, o.URL)
	case !slices.Contains(Presets, o.Preset):
		return o, fmt.Errorf("%w: preset %q: want one of %v", ErrOptions, o.Preset, Presets)
	case o.Epochs < 0:
		return o, fmt.Errorf("%w: epochs %d is negative", ErrOptions, o.Epochs)
	case o.Batch < 0:
		return o, fmt.Errorf("%w: batch %d is negative", ErrOptions, o.Batch)
	case !(o.GPURate >= 0) || o.GPURate > 1e12:
		return o, fmt.Errorf("%w: GPU rate %v: want 0 (unlimited) or a positive rate", ErrOptions, o.GPURate)
	case o.NumClasses < 0:
		return o, fmt.Errorf("%w: num classes %d is negative", ErrOptions, o.NumClasses)
	case o.FirstLosses < 0:
		return o, fmt.Errorf("%w: first losses %d is negative", ErrOptions, o.FirstLosses)
	}
	if o.NumClasses == 0 {
		o.NumClasses = 1000
	}
	if o.FirstLosses == 0 {
		o.FirstLosses = 10
	}
	return o, nil
}

// Args returns the peer's argv: the interpreter, the script (see [Script])
// and its flags, for a caller that runs it its own way (inside a network
// namespace, say).
func Args(o Options) ([]string, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	path, err := Script()
	if err != nil {
		return nil, err
	}
	argv := []string{o.Python, path,
		"--url", o.URL,
		"--preset", o.Preset,
		"--epochs", strconv.Itoa(o.Epochs),
		"--batch", strconv.Itoa(o.Batch),
		"--workers", strconv.Itoa(o.Workers),
		"--gpu-rate", strconv.FormatFloat(o.GPURate, 'g', -1, 64),
		"--seed", strconv.FormatUint(o.Seed, 10),
	}
	if o.Report != "" {
		argv = append(argv, "--report", o.Report)
	}
	if o.Progress {
		argv = append(argv, "--progress")
	}
	if o.TrainModel != "" {
		argv = append(argv, "--train-model", o.TrainModel, "--num-classes", strconv.Itoa(o.NumClasses),
			"--first-losses", strconv.Itoa(o.FirstLosses))
	}
	return argv, nil
}

// cancelGrace is how long a cancelled peer has after SIGTERM to stop its
// DataLoader workers before it is killed.
const cancelGrace = 10 * time.Second

// Command returns the peer as a command bound to ctx: when ctx ends the
// script gets SIGTERM, so the DataLoader stops its workers, and SIGKILL
// after a grace period. Stdout and Stderr are left to the caller.
func Command(ctx context.Context, o Options) (*exec.Cmd, error) {
	argv, err := Args(o)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = cancelGrace
	return cmd, nil
}

// IsSkipped reports whether err, from running the peer, is its exit status
// for a missing torch or torchvision.
func IsSkipped(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee) && ee.ExitCode() == SkipExit
}

// Epoch is one line of the script's report. Schema in dataloader_peer.py's
// docstring.
type Epoch struct {
	Epoch int `json:"epoch"`
	// Seconds runs from the epoch's first request to its last batch
	// consumed.
	Seconds float64 `json:"seconds"`
	// StartUnixNS and EndUnixNS bound the epoch in Unix ns.
	StartUnixNS int64 `json:"start_unix_ns"`
	EndUnixNS   int64 `json:"end_unix_ns"`
	// Samples and Batches were delivered to the simulated GPU.
	Samples int `json:"samples"`
	Batches int `json:"batches"`
	// Bytes counts the file bytes received, failed samples included.
	Bytes int64 `json:"bytes"`
	// UniqueSamples counts distinct ids among the delivered samples;
	// Duplicates the deliveries of an id already delivered this epoch.
	UniqueSamples int `json:"unique_samples"`
	Duplicates    int `json:"duplicates"`
	// Failed counts samples whose JPEG did not decode.
	Failed int `json:"failed"`
	// GPUIdleSeconds is the time the training loop waited for a batch.
	GPUIdleSeconds float64 `json:"gpu_idle_seconds"`
	// Trained is true when each batch was a step of the training loop
	// ([Options].TrainModel); Losses are then the epoch's first losses.
	Trained bool      `json:"trained,omitempty"`
	Losses  []float64 `json:"losses,omitempty"`

	// The run's settings.
	Pipeline string  `json:"pipeline"`
	Batch    int     `json:"batch"`
	Workers  int     `json:"workers"`
	GPURate  float64 `json:"gpu_rate"`
}

// ReadReport reads the complete lines of a peer report; a last line still
// being written is left out.
func ReadReport(path string) ([]Epoch, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("peer: report: %w", err)
	}
	var out []Epoch
	for n := 1; len(b) > 0; n++ {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			break
		}
		var e Epoch
		if err := json.Unmarshal(b[:i], &e); err != nil {
			return out, fmt.Errorf("peer: report %s line %d: %w", path, n, err)
		}
		out = append(out, e)
		b = b[i+1:]
	}
	return out, nil
}
