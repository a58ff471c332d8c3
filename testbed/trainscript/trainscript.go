// Package trainscript is the example trainer, python/examples/train_cnn.py,
// as the testbed's training rows run it: where the script is (Find), whether
// Python can run it (Ready), its command line and environment (Args,
// PythonPath, Socket) and what it prints (ReadOut: its step lines and its
// summary line).
package trainscript

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
)

// Script is the example trainer's path inside the repository.
const Script = "python/examples/train_cnn.py"

// Timeout is the trainer's --timeout: the seconds one batch may take to
// come before the client gives up. A batch of 128 openimages-like
// samples fetched raw over a 10 Mbit/s link takes about 30 s.
const Timeout = 300

// Find resolves the script's path: given, as given; else Script under
// the binaries' folder binDir's parent (make build puts them in bin/),
// the binaries' folder, then the working directory and its parents.
func Find(given, binDir string) (string, error) {
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
		p := filepath.Join(d, Script)
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("%s not found next to the binaries (%s/..) or above the working directory; give its path", Script, binDir)
}

// Ready checks that python can import what train_cnn.py and the client
// need, and returns the script's path (Find), or why the training rows
// cannot run.
func Ready(python, given, binDir string) (string, error) {
	script, err := Find(given, binDir)
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

// PythonPath is the PYTHONPATH entry that makes python/sophon importable
// for the script at path (python/examples/train_cnn.py: its folder's
// parent).
func PythonPath(script string) string {
	return filepath.Dir(filepath.Dir(script))
}

// Args is the script's command line (after the interpreter): training
// for epochs epochs a CNN of classes classes on the batches of the
// compute agent's trainer socket sock, each batch waited for up to
// Timeout.
func Args(script, sock string, epochs, classes int) []string {
	return []string{script, "--socket", sock, "--epochs", strconv.Itoa(epochs),
		"--num-classes", strconv.Itoa(classes), "--timeout", strconv.Itoa(Timeout)}
}

// Step is one step line of the script's stdout.
type Step struct {
	Epoch  uint64   `json:"epoch"`
	Step   int      `json:"step"`
	Batch  int      `json:"batch"`
	Loss   *float64 `json:"loss"`
	Images int      `json:"images"`
}

// Summary is the script's last line: what reached the loop, from just
// before it asked for its first batch to its loader's close.
type Summary struct {
	Summary      bool     `json:"summary"`
	Images       int      `json:"images"`
	Steps        int      `json:"steps"`
	Seconds      float64  `json:"seconds"`
	ImagesPerSec *float64 `json:"images_per_s"`
	WaitSeconds  float64  `json:"wait_s"`
}

// ReadOut reads the script's stdout at path: its step lines (those with a
// loss) and its summary line (nil when missing).
func ReadOut(path string) ([]Step, *Summary, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	var steps []Step
	var sum *Summary
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
			var s Step
			if err := json.Unmarshal(line, &s); err == nil && s.Loss != nil {
				steps = append(steps, s)
			}
			continue
		}
		var s Summary
		if err := json.Unmarshal(line, &s); err == nil && s.Summary {
			sum = &s
		}
	}
	return steps, sum, sc.Err()
}

// FirstLosses is the losses of steps' first n.
func FirstLosses(steps []Step, n int) []float64 {
	var out []float64
	for _, s := range steps[:min(len(steps), n)] {
		out = append(out, *s.Loss)
	}
	return out
}

// Socket is the trainer socket's path in dir, or in a fresh temporary
// folder where dir's path is too long for a Unix socket (108 bytes with
// its NUL); cleanup removes it.
func Socket(dir string) (path string, cleanup func(), err error) {
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
