package deploy

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const batchTemplate = "slurm/sophon-train.sbatch"

func TestBatchTemplateSyntax(t *testing.T) {
	if out, err := exec.Command("bash", "-n", batchTemplate).CombinedOutput(); err != nil {
		t.Fatalf("bash -n %s: %v\n%s", batchTemplate, err, out)
	}
}

// slurmEnv is the environment of a batch job on node gpu07, the second of
// two, with nothing of the caller's but PATH and HOME.
func slurmEnv(extra ...string) []string {
	return append([]string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"),
		"SLURM_JOB_ID=4242", "SLURM_JOB_NUM_NODES=2", "SLURM_NODEID=1", "SLURMD_NODENAME=gpu07",
		"SLURM_SUBMIT_DIR=/home/alice/sophon",
	}, extra...)
}

// dryRun runs the template with SOPHON_DRY_RUN=1 and returns its printed
// commands by tag, each split into words as bash would.
func dryRun(t *testing.T, env []string, args ...string) map[string][]string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{batchTemplate}, args...)...)
	cmd.Env = append(env, "SOPHON_DRY_RUN=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("dry run: %v\n%s%s", err, out, stderr.String())
	}
	cmds := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		tag, rest, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("dry run printed %q, not TAG: command", line)
		}
		cmds[tag] = splitWords(t, rest)
	}
	return cmds
}

func TestBatchTemplateDryRun(t *testing.T) {
	bin := filepath.Join(binaries(t), "compute-agent")
	cmds := dryRun(t, slurmEnv("SOPHON_JOIN=10.0.0.5:7946,10.0.0.6:7946", "SOPHON_CERTS=/etc/sophon",
		"SOPHON_AGENT_ARGS=--strict-order --codec zstd", "TMPDIR=/scratch"))
	for _, tag := range []string{"srun", "setup", "out", "agent", "wait", "trainer", "stop"} {
		if cmds[tag] == nil {
			t.Fatalf("dry run printed no %s command: %v", tag, cmds)
		}
	}
	agent := cmds["agent"]
	if agent[0] != "/usr/local/bin/compute-agent" {
		t.Errorf("agent binary %s", agent[0])
	}
	flags := agentArgs(t, bin, agent[1:])
	want := map[string]string{
		"trainer-socket":  "/scratch/sophon-4242-1/trainer.sock",
		"gossip":          "0.0.0.0:7946",
		"join":            "10.0.0.5:7946,10.0.0.6:7946",
		"cluster":         "sophon",
		"tls-cert":        "/etc/sophon/compute-gpu07.pem",
		"tls-key":         "/etc/sophon/compute-gpu07-key.pem",
		"tls-ca":          "/etc/sophon/ca.pem",
		"gossip-key-file": "/etc/sophon/gossip.key",
		"policy":          "sophon",
		"metrics":         ":9102",
		"report":          "/home/alice/sophon/sophon-4242/epochs-gpu07.jsonl",
		"strict-order":    "",
		"codec":           "zstd",
	}
	for k, v := range want {
		if got, ok := flags[k]; !ok || got != v {
			t.Errorf("agent --%s=%q, want %q", k, got, v)
		}
	}
	// The trainer waits for the socket the agent serves; the folder is the
	// job's own.
	if w := cmds["wait"]; strings.Join(w, " ") != "test -S "+flags["trainer-socket"] {
		t.Errorf("waits with %v, want test -S %s", w, flags["trainer-socket"])
	}
	if m := cmds["setup"]; strings.Join(m, " ") != "mkdir -p -m 0700 "+path.Dir(flags["trainer-socket"]) {
		t.Errorf("socket folder made with %v, want mode 0700", m)
	}
	env, trainer := trainerEnv(t, cmds["trainer"])
	if env["SOPHON_SOCKET"] != flags["trainer-socket"] {
		t.Errorf("trainer SOPHON_SOCKET=%s, the agent serves %s", env["SOPHON_SOCKET"], flags["trainer-socket"])
	}
	if env["RANK"] != "1" || env["WORLD_SIZE"] != "2" || env["LOCAL_RANK"] != "0" || env["LOCAL_WORLD_SIZE"] != "1" ||
		env["PYTHONPATH"] != "/home/alice/sophon/python" {
		t.Errorf("trainer env %v: want rank 1 of 2, one local rank, the checkout's python/", env)
	}
	if len(trainer) < 2 || trainer[0] != "python3" || trainer[1] != "/home/alice/sophon/python/examples/train_cnn.py" {
		t.Errorf("default trainer %v, want the example", trainer)
	}
	if s := cmds["srun"]; len(s) < 4 || s[0] != "srun" || s[1] != "--nodes=2" || s[2] != "--ntasks-per-node=1" {
		t.Errorf("srun line %v: want one task on each of the 2 nodes", s)
	}

	// Static storage agents instead of gossip, a plan instead of a policy,
	// a trainer of one's own.
	cmds = dryRun(t, slurmEnv("SOPHON_STORAGE=10.0.0.5:7070", "SOPHON_POLICY=", "SOPHON_PLAN=resizeoff",
		"SOPHON_METRICS=", "SOPHON_CERT_NAME=c1", "SOPHON_BIN=/opt/sophon/bin"),
		"torchrun", "--nproc-per-node=4", "train.py", "--epochs", "90")
	agent = cmds["agent"]
	if agent[0] != "/opt/sophon/bin/compute-agent" {
		t.Errorf("agent binary %s", agent[0])
	}
	flags = agentArgs(t, bin, agent[1:])
	for _, absent := range []string{"gossip", "join", "gossip-key-file", "policy", "metrics"} {
		if _, ok := flags[absent]; ok {
			t.Errorf("agent has --%s with static storage agents, no policy and no metrics", absent)
		}
	}
	if flags["storage"] != "10.0.0.5:7070" || flags["plan"] != "resizeoff" || flags["tls-cert"] != "/etc/sophon/compute-c1.pem" {
		t.Errorf("agent --storage=%s --plan=%s --tls-cert=%s", flags["storage"], flags["plan"], flags["tls-cert"])
	}
	env, trainer = trainerEnv(t, cmds["trainer"])
	if _, ok := env["PYTHONPATH"]; ok {
		t.Errorf("PYTHONPATH set for a trainer of one's own: %v", env)
	}
	if got := strings.Join(trainer, " "); got != "torchrun --nproc-per-node=4 train.py --epochs 90" {
		t.Errorf("trainer %q, want the script's arguments", got)
	}
}

// trainerEnv splits a dry run's "env NAME=VALUE... command" line.
func trainerEnv(t *testing.T, words []string) (map[string]string, []string) {
	t.Helper()
	if len(words) == 0 || words[0] != "env" {
		t.Fatalf("trainer line %v does not start with env", words)
	}
	env := map[string]string{}
	words = words[1:]
	for len(words) > 0 {
		k, v, ok := strings.Cut(words[0], "=")
		if !ok {
			break
		}
		env[k] = v
		words = words[1:]
	}
	return env, words
}

func TestBatchTemplateNeedsStorage(t *testing.T) {
	cmd := exec.Command("bash", batchTemplate)
	cmd.Env = append(slurmEnv(), "SOPHON_DRY_RUN=1")
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 2 || !strings.Contains(string(out), "SOPHON_JOIN") {
		t.Errorf("without SOPHON_JOIN or SOPHON_STORAGE: exit %d, %q; want 2 and a message", code, out)
	}
}

// TestBatchTemplateLifecycle runs the template for real, with an srun that
// runs the task here and this test binary as the compute agent: the agent
// starts, the trainer runs once the socket is there, and the agent gets
// SIGTERM when the trainer exits; the job's status is the trainer's.
func TestBatchTemplateLifecycle(t *testing.T) {
	for _, tc := range []struct {
		name      string
		agentMode string
		trainerRC string
		wantRC    int
		wantStop  bool
	}{
		{"trainer succeeds", "serve", "0", 0, true},
		{"trainer fails", "serve", "3", 3, true},
		{"agent fails", "die", "0", 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			record := filepath.Join(dir, "record")
			binDir := filepath.Join(dir, "bin")
			for _, d := range []string{record, binDir} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			write := func(name, script string) {
				if err := os.WriteFile(filepath.Join(binDir, name), []byte(script), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			write("compute-agent", "#!/bin/sh\nSOPHON_FAKE_AGENT=1 exec '"+self+"' \"$@\"\n")
			// srun: skip its options, record them, run the task here.
			write("srun", "#!/bin/bash\nopts=()\nwhile [[ $1 == --* ]]; do opts+=(\"$1\"); shift; done\n"+
				"echo \"${opts[*]}\" >\"$SOPHON_FAKE_RECORD/srun\"\nexec \"$@\"\n")
			trainer := `test -S "$SOPHON_SOCKET" || exit 9; ` +
				`echo "$SOPHON_SOCKET $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE" >"$SOPHON_FAKE_RECORD/trainer"; ` +
				`test ! -e "$SOPHON_FAKE_RECORD/agent-stopped" || exit 8; exit ` + tc.trainerRC

			cmd := exec.Command("bash", batchTemplate, "bash", "-c", trainer)
			cmd.Env = slurmEnv("PATH="+binDir+":"+os.Getenv("PATH"), "TMPDIR="+dir, "SOPHON_BIN="+binDir,
				"SOPHON_JOIN=127.0.0.1:7946", "SOPHON_OUT="+filepath.Join(dir, "out"), "SOPHON_SOCKET_WAIT=20",
				"SOPHON_FAKE_RECORD="+record, "SOPHON_FAKE_MODE="+tc.agentMode)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			start := time.Now()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				cmd.Process.Kill()
				t.Fatalf("the batch script did not finish:\n%s", out.String())
			}
			if got := cmd.ProcessState.ExitCode(); got != tc.wantRC {
				t.Errorf("exit status %d, want %d\n%s", got, tc.wantRC, out.String())
			}
			if time.Since(start) > 15*time.Second {
				t.Errorf("took %v", time.Since(start))
			}
			read := func(name string) string {
				b, _ := os.ReadFile(filepath.Join(record, name))
				return strings.TrimSpace(string(b))
			}
			if got := read("srun"); got != "--nodes=2 --ntasks-per-node=1 --kill-on-bad-exit=1" {
				t.Errorf("srun options %q", got)
			}
			args := strings.Split(read("agent-args"), "\n")
			sock := filepath.Join(dir, "sophon-4242-1", "trainer.sock")
			if len(args) == 0 || args[0] != "--trainer-socket="+sock {
				t.Errorf("agent args %q, want --trainer-socket=%s first", args, sock)
			}
			if tc.agentMode == "die" {
				if read("trainer") != "" {
					t.Error("the trainer ran though the agent died")
				}
				if !strings.Contains(out.String(), "fake failure") {
					t.Errorf("the agent's log is not shown:\n%s", out.String())
				}
			} else if got, want := read("trainer"), sock+" 1 2 0 1"; got != want {
				t.Errorf("trainer saw %q, want %q\n%s", got, want, out.String())
			}
			if got := read("agent-stopped") == "SIGTERM"; got != tc.wantStop {
				t.Errorf("agent stopped by SIGTERM: %v, want %v\n%s", got, tc.wantStop, out.String())
			}
			if _, err := os.Stat(filepath.Dir(sock)); !os.IsNotExist(err) {
				t.Errorf("the socket folder is left behind (%v)", err)
			}
		})
	}
}

// fakeAgent is the compute agent the Slurm test starts: it records its
// arguments, serves the --trainer-socket until SIGTERM (or exits 1 at once
// with SOPHON_FAKE_MODE=die) and records the signal.
func fakeAgent(args []string) int {
	record := os.Getenv("SOPHON_FAKE_RECORD")
	write := func(name, s string) {
		_ = os.WriteFile(filepath.Join(record, name), []byte(s), 0o644)
	}
	write("agent-args", strings.Join(args, "\n"))
	if os.Getenv("SOPHON_FAKE_MODE") == "die" {
		fmt.Fprintln(os.Stderr, "compute-agent: fake failure: no storage agent")
		return 1
	}
	var sock string
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--trainer-socket="); ok {
			sock = v
		}
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	time.Sleep(300 * time.Millisecond) // the script must wait for the socket
	lis, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, "compute-agent:", err)
		return 1
	}
	defer lis.Close()
	select {
	case <-term:
		write("agent-stopped", "SIGTERM")
		return 0
	case <-time.After(60 * time.Second):
		return 3
	}
}

// splitWords splits a line of bash words (printf %q) as bash does.
func splitWords(t *testing.T, line string) []string {
	t.Helper()
	out, err := exec.Command("bash", "-c", `eval "set -- $1"; printf '%s\0' "$@"`, "split", line).Output()
	if err != nil {
		t.Fatalf("bash cannot split %q: %v", line, err)
	}
	words := strings.Split(string(out), "\x00")
	return words[:len(words)-1]
}
