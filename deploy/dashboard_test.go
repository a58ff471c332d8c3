package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops/synth"
)

const dashboardFile = "grafana/sophon.json"

// dashboardQueries are the PromQL expressions of a Grafana dashboard: every
// panel's targets (rows' panels included) and the templating variables'
// queries.
func dashboardQueries(t *testing.T, b []byte) []string {
	t.Helper()
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		Title      string  `json:"title"`
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no title, uid or panels", dashboardFile)
	}
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("panel %q: a target without an expression", p.Title)
				}
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		var s string
		if json.Unmarshal(v.Query, &q) == nil && q.Query != "" {
			out = append(out, q.Query)
		} else if json.Unmarshal(v.Query, &s) == nil {
			out = append(out, s)
		}
	}
	return out
}

var (
	promString  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatcher = regexp.MustCompile(`\{[^{}]*\}|\[[^\[\]]*\]`)
	// promGrouping is a label list: by (...), without (...), on (...),
	// ignoring (...), group_left (...), group_right (...).
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)`)
	promLabelVar = regexp.MustCompile(`\blabel_values\s*\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,[^()]*\)`)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or", "unless", "inf", "nan"}
)

// promMetrics are the metric names a PromQL expression (or Grafana's
// label_values(metric, label)) reads: identifiers that are not functions,
// keywords, label names, strings, durations or Grafana variables.
func promMetrics(expr string) []string {
	var out []string
	expr = promLabelVar.ReplaceAllStringFunc(expr, func(m string) string {
		out = append(out, promLabelVar.FindStringSubmatch(m)[1])
		return " "
	})
	expr = promString.ReplaceAllString(expr, " ")
	for {
		e := promMatcher.ReplaceAllString(expr, " ")
		if e == expr {
			break
		}
		expr = e
	}
	expr = promGrouping.ReplaceAllString(expr, " ")
	for _, loc := range promIdent.FindAllStringIndex(expr, -1) {
		name := expr[loc[0]:loc[1]]
		if loc[0] > 0 && (expr[loc[0]-1] == '$' || expr[loc[0]-1] >= '0' && expr[loc[0]-1] <= '9' || expr[loc[0]-1] == '.') {
			continue // a variable, or a number's exponent or unit
		}
		if rest := strings.TrimLeft(expr[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function or aggregation
		}
		if slices.Contains(promKeywords, strings.ToLower(name)) {
			continue
		}
		out = append(out, name)
	}
	return out
}

func TestPromMetrics(t *testing.T) {
	for _, tt := range []struct{ expr, want string }{
		{`sum by (split) (rate(sophon_compute_bytes_received_total{instance=~"$compute"}[$__rate_interval]))`, "sophon_compute_bytes_received_total"},
		{`sophon_storage_queue_depth`, "sophon_storage_queue_depth"},
		{`rate(a_total[5m]) / ignoring(x) group_left (y) b{le="0.5"} offset 1h > bool 2e3`, "a_total b"},
		{`histogram_quantile(0.9, sum without (instance) (rate(x_bucket{job="a,b}"}[1m])))`, "x_bucket"},
		{`label_values(sophon_compute_samples_total, instance)`, "sophon_compute_samples_total"},
		{`max by(instance)(up) or vector(0)`, "up"},
		{`sum(rate(c[1m] @ 1609746000))`, "c"},
	} {
		if got := strings.Join(promMetrics(tt.expr), " "); got != tt.want {
			t.Errorf("promMetrics(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}

// scrapeNames are the metric names a /metrics page has samples of.
func scrapeNames(t *testing.T, addr string) map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s/metrics: %v, %s", addr, err, resp.Status)
	}
	names := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := sc.Text()
		if l == "" || l[0] == '#' {
			continue
		}
		if i := strings.IndexAny(l, "{ "); i > 0 {
			names[l[:i]] = true
		}
	}
	return names
}

// TestDashboardMetrics: every metric the Grafana dashboard queries is
// exported by the real agents after an epoch. The storage agent serves a
// dataset with one file that is no JPEG; the compute agent runs a plan that
// offloads (so the storage agent decodes, and fails on that file) for a
// trainer that reads one epoch through the Python Loader (one rank), so
// that the per-split, per-rank and per-kind series exist.
func TestDashboardMetrics(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	queried := map[string][]string{}
	for _, q := range dashboardQueries(t, b) {
		names := promMetrics(q)
		if len(names) == 0 {
			t.Errorf("query %q reads no metric", q)
		}
		for _, n := range names {
			queried[n] = append(queried[n], q)
		}
	}
	if testing.Short() {
		t.Skip("runs both agents' binaries and the Python trainer client")
	}
	if out, err := exec.Command("/usr/bin/python3", "-c", findTorch).CombinedOutput(); err != nil {
		testutil.Require(t, "/usr/bin/python3 has no torch or numpy (apt-get install python3-torch python3-numpy): %v %s", err, bytes.TrimSpace(out))
	}
	bins := binaries(t)
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	// 11 images and the bad file: 12 samples, 3 batches of 4; the bad
	// file's row is filled from the next samples and a repeat of the
	// rank's first row (docs/training.md), so every batch stays full.
	if _, err := synth.WriteImageFolder(data, synth.ImageNetLike, 1, 11, 2); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(data, "class_000", "zz-not-a-jpeg.jpg")
	if err := os.WriteFile(bad, bytes.Repeat([]byte("not a jpeg "), 100), 0o644); err != nil {
		t.Fatal(err)
	}
	plan := filepath.Join(dir, "plan.json")
	writeFileT(t, plan, `{"default": 2}`)
	addr, smetrics, cmetrics := testutil.FreeAddr(t), testutil.FreeAddr(t), testutil.FreeAddr(t)
	sock := filepath.Join(dir, "trainer.sock")

	procs := []*exec.Cmd{}
	var logs []*testutil.SyncBuffer
	start := func(bin string, args ...string) {
		cmd := exec.Command(filepath.Join(bins, bin), args...)
		l := &testutil.SyncBuffer{}
		cmd.Stdout, cmd.Stderr = l, l
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs, logs = append(procs, cmd), append(logs, l)
	}
	t.Cleanup(func() {
		for i, p := range procs {
			_ = p.Process.Signal(syscall.SIGTERM)
			if err := p.Wait(); err != nil {
				t.Errorf("%s: %v\n%s", p.Path, err, logs[i].String())
			}
		}
	})
	agentLogs := func() string {
		var s strings.Builder
		for i, l := range logs {
			fmt.Fprintf(&s, "--- %s:\n%s", filepath.Base(procs[i].Path), tail(l.String(), 3000))
		}
		return s.String()
	}
	waitDial := func(network, a string) {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if c, err := net.Dial(network, a); err == nil {
				c.Close()
				return
			}
		}
		t.Fatalf("nothing listens on %s\n%s", a, agentLogs())
	}
	start("storage-agent", "--data", data, "--index", "-", "--insecure", "--listen", addr, "--metrics", smetrics, "--cpus", "1", "--log-level", "warn")
	waitDial("tcp", addr)
	start("compute-agent", "--storage", addr, "--insecure", "--trainer-socket", sock, "--metrics", cmetrics, "--plan", plan,
		"--on-error", "skip", "--batch", "4", "--log-level", "warn")
	waitDial("unix", sock)

	trainer := exec.Command("/usr/bin/python3", "-c", `import sys
sys.path.insert(0, sys.argv[2])
import sophon
loader = sophon.Loader(socket=sys.argv[1], timeout=60)
print([len(labels) for _, labels in loader])
loader.close()`, sock, filepath.Join(root, "python"))
	out, err := trainer.CombinedOutput()
	if err != nil {
		t.Fatalf("trainer: %v\n%s\n%s", err, out, agentLogs())
	}
	// The bad file's row is filled (the next samples move up, the
	// rank's first row repeats at the end), so every batch is full.
	if got := strings.TrimSpace(string(out)); got != "[4, 4, 4]" {
		t.Errorf("the trainer read batches of %s rows, want three full batches of 4 (the 11 good samples and one repeat)\n%s", got, agentLogs())
	}
	exported := scrapeNames(t, smetrics)
	for n := range scrapeNames(t, cmetrics) {
		exported[n] = true
	}
	for n, qs := range queried {
		if !exported[n] {
			t.Errorf("the dashboard queries %s, which neither agent exports after an epoch (in %q)", n, qs[0])
		}
	}
	if len(queried) < 20 {
		t.Errorf("the dashboard queries %d metrics, want the agents' main series (at least 20)", len(queried))
	}
}
