package deploy

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops/synth"
)

// The Slurm cluster test's dataset and job: 16 images in 4 classes, two
// nodes, batches of 4, one epoch. Each node's rank owns 8 samples.
const (
	slurmSamples = 16
	slurmClasses = 4
	slurmBatch   = 4
	slurmNodes   = 2
	// slurmMarker is set in the environment of everything the test starts
	// (daemons, agents, the job and its steps), so that what is left
	// behind can be found.
	slurmMarker = "SOPHON_SLURM_TEST"
)

// slurmCommands are the programs of Debian's slurm-wlm and munge packages
// the test runs.
var slurmCommands = []string{"slurmctld", "slurmd", "slurmstepd", "sbatch", "srun", "sinfo", "scontrol", "munged", "mungekey"}

// slurmCluster is a Slurm cluster on this machine: munged, slurmctld and
// one slurmd per node (Debian builds Slurm with multiple-slurmd support, so
// each node is its own slurmd with its own port and spool folder), all in
// the foreground as the test's children.
type slurmCluster struct {
	dir   string
	conf  string
	env   []string
	procs []*slurmProc
}

type slurmProc struct {
	name string
	cmd  *exec.Cmd
	logs *testutil.SyncBuffer
	done chan struct{}
}

// findTorch exits 1 when Debian's Python lacks torch or numpy, without
// importing them (which takes seconds).
const findTorch = "import importlib.util, sys; sys.exit(any(importlib.util.find_spec(m) is None for m in ('torch', 'numpy')))"

// needSlurm skips (fails under CI=true) without root, Slurm, munge or
// Debian's PyTorch.
func needSlurm(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Require(t, "the Slurm cluster test runs slurmd and munged as root")
	}
	for _, c := range slurmCommands {
		if _, err := lookSbin(c); err != nil {
			testutil.Require(t, "%s is missing (apt-get install slurm-wlm munge): %v", c, err)
		}
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", findTorch).CombinedOutput(); err != nil {
		testutil.Require(t, "/usr/bin/python3 has no torch or numpy (apt-get install python3-torch python3-numpy): %v %s", err, bytes.TrimSpace(out))
	}
}

// lookSbin finds a command on PATH or in /usr/sbin and /sbin.
func lookSbin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin"} {
		if p := filepath.Join(d, name); isExec(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not on PATH, /usr/sbin or /sbin", name)
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// freePort is a free TCP port on loopback.
func freePort(t *testing.T) int {
	_, p, err := net.SplitHostPort(testutil.FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(p)
	return n
}

// slurmConf is the cluster's configuration: every state, spool, pid and
// log file under dir, munge on its own socket, nodes n1..nN on loopback
// each with 8 CPUs and one GPU (/dev/null in gres.conf) so that the batch template's #SBATCH lines fit as they
// are.
func slurmConf(dir string, ctldPort, slurmdPort int, nodePorts []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `ClusterName=sophontest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=%d
SlurmdPort=%d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=%[3]s/munge/munge.socket
StateSaveLocation=%[3]s/state
SlurmdSpoolDir=%[3]s/spool/%%n
SlurmctldPidFile=%[3]s/slurmctld.pid
SlurmdPidFile=%[3]s/slurmd-%%n.pid
SlurmctldLogFile=%[3]s/log/slurmctld.log
SlurmdLogFile=%[3]s/log/slurmd-%%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
JobCompType=jobcomp/filetxt
JobCompLoc=%[3]s/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
GresTypes=gpu
ReturnToService=2
SlurmctldTimeout=10
SlurmdTimeout=10
InactiveLimit=0
KillWait=2
MinJobAge=300
`, ctldPort, slurmdPort, dir)
	var names []string
	for i, p := range nodePorts {
		name := fmt.Sprintf("n%d", i+1)
		names = append(names, name)
		fmt.Fprintf(&b, "NodeName=%s NodeHostname=localhost NodeAddr=127.0.0.1 Port=%d CPUs=8 RealMemory=1000 Gres=gpu:1 State=UNKNOWN\n", name, p)
	}
	fmt.Fprintf(&b, "PartitionName=sophon Nodes=%s Default=YES MaxTime=INFINITE State=UP\n", strings.Join(names, ","))
	return b.String()
}

// startSlurm writes the configuration, starts munged, slurmctld and the
// nodes' slurmd and waits until sinfo shows every node idle.
func startSlurm(t *testing.T, dir string, nodes int) *slurmCluster {
	t.Helper()
	c := &slurmCluster{dir: dir, conf: filepath.Join(dir, "slurm.conf")}
	t.Cleanup(func() {
		// After a failure a job may still run: cancel it, stop the
		// daemons, and kill what is left of the test.
		if len(c.procs) > 0 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			cmd := exec.CommandContext(ctx, "scancel", "--partition=sophon")
			cmd.Env, cmd.Dir = c.env, c.dir
			_ = cmd.Run()
			cancel()
			// slurmd reaps the job's slurmstepd once it ends; stopped
			// before, the step would be orphaned.
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
				out, err := c.command("squeue", "--noheader").Output()
				if err != nil || len(bytes.TrimSpace(out)) == 0 {
					break
				}
			}
		}
		c.stop()
		for _, l := range leftovers(dir) {
			if pid, err := strconv.Atoi(strings.Fields(l)[0]); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	for _, d := range []string{"munge", "state", "spool", "log"} {
		mustMkdir(t, filepath.Join(dir, d), 0o755)
	}
	if err := os.Chmod(filepath.Join(dir, "munge"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustMkdir(t, filepath.Join(dir, "munge", "key"), 0o700)
	key := filepath.Join(dir, "munge", "key", "munge.key")
	if out, err := exec.Command(mustSbin(t, "mungekey"), "--create", "--keyfile", key).CombinedOutput(); err != nil {
		t.Fatalf("mungekey: %v\n%s", err, out)
	}
	ports := make([]int, nodes)
	for i := range ports {
		ports[i] = freePort(t)
	}
	writeFileT(t, c.conf, slurmConf(dir, freePort(t), freePort(t), ports))
	// The nodes' GPU is /dev/null: Slurm counts and hands it out; nothing
	// opens it (the example trainer runs on the CPU).
	writeFileT(t, filepath.Join(dir, "gres.conf"), "AutoDetect=off\nName=gpu File=/dev/null\n")
	c.env = []string{
		"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=" + dir, "LANG=C.UTF-8",
		"SLURM_CONF=" + c.conf, slurmMarker + "=" + dir,
	}
	sock := filepath.Join(dir, "munge", "munge.socket")
	// -f: munged warns, and refuses without it, about a socket folder in a
	// temporary tree and about running as root.
	c.start(t, "munged", mustSbin(t, "munged"), "--foreground", "--force", "--key-file="+key, "--socket="+sock,
		"--pid-file="+filepath.Join(dir, "munge", "munged.pid"), "--seed-file="+filepath.Join(dir, "munge", "seed"),
		"--log-file="+filepath.Join(dir, "log", "munged.log"))
	c.waitFor(t, "munged's socket", 10*time.Second, func() bool {
		fi, err := os.Stat(sock)
		return err == nil && fi.Mode()&os.ModeSocket != 0
	})
	c.start(t, "slurmctld", mustSbin(t, "slurmctld"), "-D", "-i", "-f", c.conf)
	for i := range nodes {
		name := fmt.Sprintf("n%d", i+1)
		mustMkdir(t, filepath.Join(dir, "spool", name), 0o755)
		c.start(t, "slurmd-"+name, mustSbin(t, "slurmd"), "-D", "-N", name, "-f", c.conf)
	}
	c.waitFor(t, "every node idle", 30*time.Second, func() bool {
		out, err := c.command("sinfo", "--noheader", "--Node", "--format=%N %t").Output()
		if err != nil {
			return false
		}
		idle := 0
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if f := strings.Fields(l); len(f) == 2 && f[1] == "idle" {
				idle++
			}
		}
		return idle == nodes
	})
	return c
}

// start runs a daemon in the foreground as the test's child.
func (c *slurmCluster) start(t *testing.T, name, bin string, args ...string) {
	t.Helper()
	p := &slurmProc{name: name, cmd: exec.Command(bin, args...), logs: &testutil.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.Env = c.env
	p.cmd.Dir = c.dir
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	go func() { p.cmd.Wait(); close(p.done) }()
	c.procs = append(c.procs, p)
}

// command is a Slurm client command against the cluster.
func (c *slurmCluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = c.env
	cmd.Dir = c.dir
	return cmd
}

// waitFor polls ok until it holds, failing after d with every daemon's log.
func (c *slurmCluster) waitFor(t *testing.T, what string, d time.Duration, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ok() {
			return
		}
		for _, p := range c.procs {
			select {
			case <-p.done:
				t.Fatalf("waiting for %s: %s exited (%v)\n%s", what, p.name, p.cmd.ProcessState, c.logs())
			default:
			}
		}
	}
	t.Fatalf("no %s after %v\n%s", what, d, c.logs())
}

// logs are the daemons' outputs and log files, for failure messages.
func (c *slurmCluster) logs() string {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s:\n%s", p.name, tail(p.logs.String(), 3000))
	}
	files, _ := filepath.Glob(filepath.Join(c.dir, "log", "*"))
	for _, f := range files {
		if data, err := os.ReadFile(f); err == nil {
			fmt.Fprintf(&b, "--- %s:\n%s", filepath.Base(f), tail(string(data), 3000))
		}
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// stop ends the daemons in reverse order of their start: SIGTERM, then
// SIGKILL after 10 s.
func (c *slurmCluster) stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	}
	c.procs = nil
}

// jobState is the job's state and exit code as scontrol shows them.
func (c *slurmCluster) jobState(id string) (state, exit string, err error) {
	out, err := c.command("scontrol", "--oneliner", "show", "job", id).Output()
	if err != nil {
		return "", "", err
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "JobState="); ok {
			state = v
		}
		if v, ok := strings.CutPrefix(f, "ExitCode="); ok {
			exit = v
		}
	}
	return state, exit, nil
}

// leftovers lists the processes whose environment carries the test's
// marker.
func leftovers(dir string) []string {
	var out []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	want := []byte(slurmMarker + "=" + dir + "\x00")
	for _, p := range procs {
		env, err := os.ReadFile(filepath.Join(p, "environ"))
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		out = append(out, filepath.Base(p)+" "+strings.ReplaceAll(string(bytes.TrimRight(cmdline, "\x00")), "\x00", " "))
	}
	return out
}

func mustSbin(t *testing.T, name string) string {
	t.Helper()
	p, err := lookSbin(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func mustMkdir(t *testing.T, p string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, mode); err != nil {
		t.Fatal(err)
	}
}

func writeFileT(t *testing.T, name, s string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSlurmCluster runs deploy/slurm/sophon-train.sbatch on a real Slurm
// cluster started here (Debian's slurm-wlm: munged, slurmctld and two
// slurmd, one per node, all on loopback): the job trains the example CNN
// for one epoch on two nodes, each node's compute agent fed by one real
// storage agent with mutual TLS. It checks the job's state, the trainers'
// losses, the agents' epoch reports, and that nothing is left behind.
func TestSlurmCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Slurm cluster and both agents' binaries")
	}
	needSlurm(t)
	bins := binaries(t)
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// NB: the daemons' paths and munge's socket must stay short (a Unix
	// socket path has at most 107 bytes).
	tmp := os.TempDir()
	if len(tmp) > 40 {
		tmp = "/tmp"
	}
	dir, err := os.MkdirTemp(tmp, "sophon-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	started := time.Now()
	cluster := startSlurm(t, dir, slurmNodes)
	t.Logf("cluster up in %v", time.Since(started).Round(time.Millisecond))
	started = time.Now()

	data, certs := filepath.Join(dir, "data"), filepath.Join(dir, "certs")
	if _, err := synth.WriteImageFolder(data, synth.ImageNetLike, 1, slurmSamples, slurmClasses); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range slurmNodes {
		names = append(names, fmt.Sprintf("n%d", i+1))
	}
	storageBin := filepath.Join(bins, "storage-agent")
	if out, err := exec.Command(storageBin, "certs", "--out", certs, "--storage", "s1", "--compute", strings.Join(names, ",")).CombinedOutput(); err != nil {
		t.Fatalf("certs: %v\n%s", err, out)
	}
	// The storage agent gossips (with the cluster's key) and the job's
	// agents join it: the template's default discovery.
	addr, gossip := testutil.FreeAddr(t), testutil.FreeAddr(t)
	cluster.start(t, "storage-agent", storageBin, "--data", data, "--index", "-", "--listen", addr, "--name", "s1", "--cpus", "1",
		"--gossip", gossip, "--gossip-key-file", filepath.Join(certs, "gossip.key"),
		"--log-format", "json", "--tls-cert", filepath.Join(certs, "storage-s1.pem"),
		"--tls-key", filepath.Join(certs, "storage-s1-key.pem"), "--tls-ca", filepath.Join(certs, "ca.pem"))
	cluster.waitFor(t, "the storage agent listening", 20*time.Second, func() bool {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})

	// The walk-through of docs/deploy.md: the settings in the
	// environment, sbatch from the submit folder, the template's defaults
	// (gossip join, --policy sophon, the metrics endpoint). NB: both
	// nodes' agents share this host, so their gossip and metrics ports
	// are free ones (:0) where the defaults are one port per node (7946,
	// :9102). The trainer is the default one, run by a wrapper that
	// keeps the node's agent up after it (the agent stops when its
	// trainer exits) until the test has scraped /metrics: gate.
	submit := filepath.Join(dir, "submit")
	mustMkdir(t, submit, 0o755)
	mustMkdir(t, filepath.Join(dir, "tmp"), 0o755)
	gate := filepath.Join(dir, "scraped")
	trainer := []string{"bash", "-c", `python3 "$SOPHON_HOME/python/examples/train_cnn.py" --epochs 1 || exit; until [ -e "$1" ]; do sleep 0.1; done`, "sophon-trainer", gate}
	sbatch := cluster.command("sbatch", append([]string{"--parsable", fmt.Sprintf("--nodes=%d", slurmNodes), filepath.Join(root, "deploy", batchTemplate)}, trainer...)...)
	sbatch.Dir = submit
	sbatch.Env = append(sbatch.Env, "SOPHON_JOIN="+gossip, "SOPHON_GOSSIP=127.0.0.1:0", "SOPHON_METRICS=127.0.0.1:0",
		"SOPHON_BIN="+bins, "SOPHON_CERTS="+certs, "SOPHON_HOME="+root, "PYTHONPATH="+filepath.Join(root, "python"),
		"SOPHON_BATCH="+strconv.Itoa(slurmBatch), "SOPHON_SOCKET_WAIT=60", "TMPDIR="+filepath.Join(dir, "tmp"))
	out, err := sbatch.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, out)
	}
	job := strings.TrimSpace(string(out))
	if _, err := strconv.Atoi(job); err != nil {
		t.Fatalf("sbatch --parsable printed %q, not a job id", job)
	}
	outDir := filepath.Join(submit, "sophon-"+job)
	agentLogs := func() string {
		var b strings.Builder
		for _, n := range names {
			l, _ := os.ReadFile(filepath.Join(outDir, "agent-"+n+".log"))
			fmt.Fprintf(&b, "--- agent-%s.log:\n%s", n, tail(string(l), 3000))
		}
		return b.String()
	}
	var state, exit string
	finished := func() bool {
		state, exit, err = cluster.jobState(job)
		switch state {
		case "", "PENDING", "CONFIGURING", "RUNNING", "COMPLETING":
			return false
		}
		return true
	}
	// Each node's epoch done (its report written) and its agent serving
	// /metrics: scrape both once, then let the job end.
	metrics := map[string]string{}
	scrapable := func() bool {
		for _, n := range names {
			if metrics[n] == "" && fileHasLine(filepath.Join(outDir, "epochs-"+n+".jsonl")) {
				if a := metricsAddr(filepath.Join(outDir, "agent-"+n+".log")); a != "" {
					metrics[n] = a
				}
			}
		}
		return len(metrics) == slurmNodes
	}
	cluster.waitFor(t, "both nodes' epoch reports and metrics addresses", 90*time.Second, func() bool { return scrapable() || finished() })
	if !scrapable() {
		output, _ := os.ReadFile(filepath.Join(submit, fmt.Sprintf("sophon-train-%s.out", job)))
		t.Fatalf("job %s ended (%s, exit code %s) before both epochs were reported and the agents scraped\n--- job output:\n%s\n%s%s",
			job, state, exit, output, agentLogs(), cluster.logs())
	}
	for _, n := range names {
		checkAgentMetrics(t, n, metrics[n], slurmSamples/slurmNodes)
	}
	writeFileT(t, gate, "")
	cluster.waitFor(t, "job "+job+" finished", 60*time.Second, finished)
	output, _ := os.ReadFile(filepath.Join(submit, fmt.Sprintf("sophon-train-%s.out", job)))
	if state != "COMPLETED" || exit != "0:0" {
		t.Fatalf("job %s: %s, exit code %s\n--- job output:\n%s\n%s%s", job, state, exit, output, agentLogs(), cluster.logs())
	}
	t.Logf("job %s completed %v after the cluster was up (the storage agent's start and the submission included)", job, time.Since(started).Round(time.Millisecond))
	checkTrainerOutput(t, output)
	for _, n := range names {
		reps, err := report.ReadReport(filepath.Join(outDir, "epochs-"+n+".jsonl"))
		if err != nil || len(reps) != 1 {
			t.Fatalf("node %s: %d report lines (%v), want 1\n%s", n, len(reps), err, agentLogs())
		}
		r := reps[0]
		// The storage agent is named s1 only when found through gossip
		// (a static --storage names it by its address).
		if r.Status != "ok" || r.Samples != slurmSamples/slurmNodes || r.SamplesFailed != 0 || r.BytesReceived <= 0 ||
			len(r.Storage) != 1 || r.Storage[0] != "s1" {
			t.Errorf("node %s: epoch report %+v: want %d samples from s1 (found by gossip), none failed", n, r, slurmSamples/slurmNodes)
		}
		if r.Policy != "sophon" || r.Stage1 == nil {
			t.Errorf("node %s: epoch report policy %q, stage 1 %+v: want the template's --policy sophon, measured by stage 1", n, r.Policy, r.Stage1)
		}
	}
	comp, _ := os.ReadFile(filepath.Join(dir, "jobcomp.txt"))
	if !strings.Contains(string(comp), "JobId="+job+" ") || !strings.Contains(string(comp), "JobState=COMPLETED") ||
		!strings.Contains(string(comp), fmt.Sprintf("NodeCnt=%d", slurmNodes)) {
		t.Errorf("job completion record:\n%s", comp)
	}
	// The job removed its sockets' folders; after the daemons stop,
	// nothing of the test runs.
	if left, _ := filepath.Glob(filepath.Join(dir, "tmp", "*")); len(left) > 0 {
		t.Errorf("the job left %v", left)
	}
	cluster.stop()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if left = leftovers(dir); len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("processes left behind: %q", left)
		for _, l := range left {
			if pid, err := strconv.Atoi(strings.Fields(l)[0]); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	t.Logf("daemons stopped, nothing left: %v after the cluster was up", time.Since(started).Round(time.Millisecond))
}

// checkTrainerOutput checks the job output's trainer lines: each node's
// rank trained on its half of the epoch, slurmBatch images a step, with
// finite losses, and printed its summary.
func checkTrainerOutput(t *testing.T, output []byte) {
	t.Helper()
	var steps, summaries, images int
	sc := bufio.NewScanner(bytes.NewReader(output))
	for sc.Scan() {
		var line struct {
			Summary bool     `json:"summary"`
			Loss    *float64 `json:"loss"`
			Images  int      `json:"images"`
			Steps   int      `json:"steps"`
		}
		if !bytes.HasPrefix(sc.Bytes(), []byte("{")) || json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		switch {
		case line.Summary:
			summaries++
			images += line.Images
		case line.Loss != nil:
			steps++
			if math.IsNaN(*line.Loss) || math.IsInf(*line.Loss, 0) || *line.Loss <= 0 || line.Images != slurmBatch {
				t.Errorf("trainer step %s: want a finite positive loss over %d images", sc.Text(), slurmBatch)
			}
		}
	}
	if want := slurmSamples / slurmBatch; steps != want || summaries != slurmNodes || images != slurmSamples {
		t.Errorf("trainers: %d steps, %d summaries, %d images; want %d, %d, %d\n%s", steps, summaries, images, want, slurmNodes, slurmSamples, output)
	}
}

// fileHasLine reports whether name holds a complete line.
func fileHasLine(name string) bool {
	b, err := os.ReadFile(name)
	return err == nil && bytes.IndexByte(b, '\n') > 0
}

// metricsAddr is the address in the compute agent's JSON log line
// "serving /metrics and /healthz", or "".
func metricsAddr(log string) string {
	b, _ := os.ReadFile(log)
	for _, l := range bytes.Split(b, []byte("\n")) {
		var line struct {
			Addr    string `json:"addr"`
			Message string `json:"message"`
		}
		if json.Unmarshal(l, &line) == nil && line.Message == "serving /metrics and /healthz" {
			return line.Addr
		}
	}
	return ""
}

// checkAgentMetrics scrapes node's compute agent at addr once, after its
// epoch: one epoch done, samples delivered.
func checkAgentMetrics(t *testing.T, node, addr string, samples int) {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("node %s: scrape %s: %v", node, addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("node %s: scrape %s: %s %v", node, addr, resp.Status, err)
	}
	want := map[string]float64{"sophon_compute_epochs_total": 1, "sophon_compute_samples_total": float64(samples)}
	got := map[string]float64{}
	for _, l := range strings.Split(string(body), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 {
			if _, ok := want[f[0]]; ok {
				got[f[0]], _ = strconv.ParseFloat(f[1], 64)
			}
		}
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("node %s: /metrics %s = %v (present %v), want %v", node, k, g, ok, v)
		}
	}
}
