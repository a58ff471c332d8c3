package deploy

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const dockerfile = "docker/Dockerfile"

// stage is one build stage of the Dockerfile.
type stage struct {
	name, from string
	// instructions in order, continuation lines joined: "RUN apt-get ...".
	instructions []string
}

func (s stage) all(keyword string) []string {
	var out []string
	for _, in := range s.instructions {
		if k, rest, _ := strings.Cut(in, " "); strings.EqualFold(k, keyword) {
			out = append(out, strings.TrimSpace(rest))
		}
	}
	return out
}

func readStages(t *testing.T) map[string]stage {
	t.Helper()
	f, err := os.Open(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	stages := map[string]stage{}
	var cur *stage
	var line strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || (l == "" && line.Len() == 0) {
			continue
		}
		if c, ok := strings.CutSuffix(l, "\\"); ok {
			line.WriteString(c + " ")
			continue
		}
		line.WriteString(l)
		in := strings.Join(strings.Fields(line.String()), " ")
		line.Reset()
		if w := strings.Fields(in); len(w) == 4 && w[0] == "FROM" && strings.EqualFold(w[2], "AS") {
			if _, dup := stages[w[3]]; dup {
				t.Fatalf("stage %s twice", w[3])
			}
			stages[w[3]] = stage{name: w[3], from: w[1]}
			s := stages[w[3]]
			cur = &s
			continue
		}
		if cur == nil {
			continue // ARG before the first FROM
		}
		cur.instructions = append(cur.instructions, in)
		stages[cur.name] = *cur
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return stages
}

// cgoPackages maps each library the cgo build links (-lNAME) to the
// Debian packages of its headers (build) and of its runtime.
var cgoPackages = map[string][2]string{
	"jpeg":      {"libjpeg62-turbo-dev", "libjpeg62-turbo"},
	"turbojpeg": {"libturbojpeg0-dev", "libturbojpeg0"},
}

// linkedLibraries returns the -l libraries of every #cgo LDFLAGS line in
// the module's non-test Go files.
func linkedLibraries(t *testing.T) []string {
	t.Helper()
	lflag := regexp.MustCompile(`-l([A-Za-z0-9_+-]+)`)
	var libs []string
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != ".." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(l), "#cgo"); ok && strings.Contains(rest, "LDFLAGS:") {
				for _, m := range lflag.FindAllStringSubmatch(rest, -1) {
					if !slices.Contains(libs, m[1]) {
						libs = append(libs, m[1])
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(libs)
	return libs
}

func TestDockerfile(t *testing.T) {
	stages := readStages(t)
	for _, name := range []string{"build", "runtime", "storage-agent", "compute-agent", "trainer"} {
		if _, ok := stages[name]; !ok {
			t.Fatalf("no stage %s (docs/deploy.md builds it)", name)
		}
	}
	build, runtime := stages["build"], stages["runtime"]
	buildRuns := strings.Join(build.all("RUN"), "\n")
	runtimeRuns := strings.Join(runtime.all("RUN"), "\n")

	// Every library the cgo build links is installed: its headers where the
	// agents are built, its runtime (and not its headers) where they run.
	libs := linkedLibraries(t)
	if len(libs) == 0 {
		t.Fatal("found no #cgo LDFLAGS: the walk is broken")
	}
	for _, lib := range libs {
		pkgs, ok := cgoPackages[lib]
		if !ok {
			t.Errorf("the cgo build links -l%s: add its Debian packages to %s and to cgoPackages", lib, dockerfile)
			continue
		}
		if !hasWord(buildRuns, pkgs[0]) {
			t.Errorf("build stage does not install %s (for -l%s)", pkgs[0], lib)
		}
		if !hasWord(runtimeRuns, pkgs[1]) || hasWord(runtimeRuns, pkgs[0]) {
			t.Errorf("runtime stage must install %s and not %s (for -l%s)", pkgs[1], pkgs[0], lib)
		}
	}
	// Both agents in one cgo build: built alike, tensors alike.
	var goBuild string
	for _, r := range build.all("RUN") {
		if strings.Contains(r, "go build") {
			goBuild = r
		}
	}
	if !strings.Contains(goBuild, "CGO_ENABLED=1") || !hasWord(goBuild, "./storage-agent") || !hasWord(goBuild, "./compute-agent") {
		t.Errorf("the agents are not built together with cgo: %q", goBuild)
	}
	if !strings.HasPrefix(runtime.from, "debian:") || !strings.Contains(runtime.from, "-slim") {
		t.Errorf("runtime stage from %s, want a Debian slim image", runtime.from)
	}

	for _, agent := range []string{"storage-agent", "compute-agent"} {
		s := stages[agent]
		if s.from != "runtime" {
			t.Errorf("stage %s is from %s, want runtime", agent, s.from)
		}
		bin := "/usr/local/bin/" + agent
		if !slices.Contains(s.all("COPY"), "--from=build /out/"+agent+" "+bin) {
			t.Errorf("stage %s does not copy the built %s to %s: %v", agent, agent, bin, s.all("COPY"))
		}
		if ep := s.all("ENTRYPOINT"); len(ep) != 1 || ep[0] != `["`+bin+`"]` {
			t.Errorf("stage %s entrypoint %v, want [%q]: the manifests pass flags only", agent, ep, bin)
		}
	}
	// Not root, and the user the manifests run as.
	uid := DefaultValues().UID
	for _, name := range []string{"storage-agent", "compute-agent", "trainer"} {
		user := ""
		for s := stages[name]; ; s = stages[s.from] {
			if u := s.all("USER"); len(u) > 0 {
				user = u[len(u)-1]
				break
			}
			if _, ok := stages[s.from]; !ok {
				break
			}
		}
		if u, _, _ := strings.Cut(user, ":"); u != strconv.FormatInt(uid, 10) {
			t.Errorf("stage %s runs as %q, the manifests as uid %d", name, user, uid)
		}
	}
	// The trainer image holds the script the training Job runs.
	script := DefaultValues().Training.TrainerCommand[1]
	found := false
	for _, c := range stages["trainer"].all("COPY") {
		w := strings.Fields(c)
		if len(w) != 2 {
			continue
		}
		if rest, ok := strings.CutPrefix(script, strings.TrimSuffix(w[1], "/")+"/"); ok {
			if _, err := os.Stat(filepath.Join("..", w[0], rest)); err != nil {
				t.Errorf("the Job runs %s, copied from %s, which does not exist", script, filepath.Join(w[0], rest))
			}
			found = true
		}
	}
	if !found {
		t.Errorf("the trainer image does not hold %s", script)
	}
}

func TestDockerignoreKeepsTheSources(t *testing.T) {
	b, err := os.ReadFile(dockerfile + ".dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	var patterns []string
	for _, l := range strings.Split(string(b), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	ignored := func(p string) bool {
		for _, pat := range patterns {
			for _, q := range []string{p, filepath.Base(p)} {
				if ok, _ := filepath.Match(strings.TrimPrefix(pat, "**/"), q); ok {
					return true
				}
			}
			if strings.HasPrefix(p, strings.TrimSuffix(pat, "/")+"/") {
				return true
			}
		}
		return false
	}
	for _, p := range []string{"go.mod", "go.sum", "storage-agent/main.go", "compute-agent/main.go", "ops/jpeg/jpeg_cgo.go",
		"internal/tlsconf/files.go", "proto/dataplanepb/dataplane.pb.go", "python/sophon/loader.py", "python/examples/train_cnn.py"} {
		if ignored(p) {
			t.Errorf("%s is ignored: the build needs it", p)
		}
	}
	for _, p := range []string{".certs/ca-key.pem", ".git/config", "bin/storage-agent", "x/gossip.key"} {
		if !ignored(p) {
			t.Errorf("%s is sent to the builder", p)
		}
	}
}

func hasWord(s, w string) bool { return slices.Contains(strings.Fields(s), w) }
