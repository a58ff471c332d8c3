package computeagent

import (
	"context"
	"errors"
	"fmt"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/test/bufconn"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/internal/errkind"
	"github.com/sophon-dl/sophon/internal/oplimits"
	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/storage-agent/storageagent"
)

// writeHostileFolder writes the hostile corpus (ops/hostile) as
// hostile/NNN.jpg, NNN its index in the corpus, and good good/NNN.jpg
// samples from the test dataset.
func writeHostileFolder(t *testing.T, good int) (string, []hostile.Case) {
	t.Helper()
	dir := t.TempDir()
	corpus := hostile.Corpus()
	write := func(name string, b []byte) {
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range corpus {
		write(filepath.Join(dir, "hostile", fmt.Sprintf("%03d.jpg", i)), c.Data)
	}
	for i, b := range enginetest.Dataset(t)[:good] {
		write(filepath.Join(dir, "good", fmt.Sprintf("%03d.jpg", i)), b)
	}
	return dir, corpus
}

// TestHostileNoOff serves the hostile corpus raw from a real storage agent
// and finishes it here under the nooff plan with OnErrorSkip: the compute
// agent applies the storage agent's limits, so every file the corpus says a
// decode refuses fails with that typed error (its report entry naming the
// file), and every other file is delivered.
func TestHostileNoOff(t *testing.T) {
	const good = 16
	dir, corpus := writeHostileFolder(t, good)
	n := bufNet{"st1:7070": bufconn.Listen(1 << 20)}
	startStorage(t, storageagent.Config{Data: dir, Name: "st1", CPUs: 1, AllowClientSpecs: true, Insecure: true}, storageagent.Knobs{}, n["st1:7070"])

	cfg, rec := testConfig(t, nil, "st1:7070")
	cfg.Dial = n.Dial
	cfg.Plan = planner.NoOff()
	cfg.OnError = OnErrorSkip
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if got := a.cfg.Settings; got != oplimits.Default() {
		t.Errorf("limits %+v, want the storage agent's defaults %+v", got, oplimits.Default())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reports, err := a.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cat := a.Catalog()
	r := reports[0]
	failed := map[string]string{} // path -> kind
	for _, f := range r.Failed {
		if f.Where != "local" || !strings.HasPrefix(f.Message, "sample ") {
			t.Errorf("failure %+v: want a local, typed failure", f)
		}
		failed[f.Path] = f.Kind
	}
	delivered := map[uint64]bool{}
	for _, d := range rec.epoch(0) {
		delivered[d.sample] = true
	}
	refused, goods := 0, 0
	for i := range cat.Total {
		path := cat.Path(i)
		var k int
		switch {
		case strings.HasPrefix(path, "good/"):
			goods++
			if !delivered[i] {
				t.Errorf("%s: good sample %d not delivered (%s)", path, i, failed[path])
			}
			continue
		case !strings.HasPrefix(path, "hostile/"):
			t.Fatalf("sample %d: path %q", i, path)
		}
		fmt.Sscanf(strings.TrimPrefix(path, "hostile/"), "%03d.jpg", &k)
		c := corpus[k]
		if c.Want == nil {
			if !delivered[i] {
				t.Errorf("%s (%s): not delivered (%s), want it decoded", path, c.Name, failed[path])
			}
			continue
		}
		refused++
		if want := errkind.Name(errkind.Of(c.Want)); failed[path] != want {
			t.Errorf("%s (%s): failed with %q, want %s", path, c.Name, failed[path], want)
		}
	}
	if goods != good || refused < 40 || r.SamplesFailed != refused || r.Samples != int(cat.Total)-refused {
		t.Errorf("%d good, %d refused of %d; report: %d delivered, %d failed", goods, refused, cat.Total, r.Samples, r.SamplesFailed)
	}
}

// TestLimitsConfig: zero limits take the storage agent's defaults, and a
// negative one is refused.
func TestLimitsConfig(t *testing.T) {
	cfg, _ := testConfig(t, nil, "st1:7070")
	cfg.Settings = oplimits.Settings{MaxScans: 3}
	a, err := cfg.new()
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	want := oplimits.Default()
	want.MaxScans = 3
	if a.cfg.Settings != want {
		t.Errorf("limits %+v, want %+v", a.cfg.Settings, want)
	}
	cfg.Settings.OpTimeout = -time.Second
	if _, err := cfg.new(); !errors.Is(err, ErrConfig) {
		t.Errorf("negative op timeout: got %v, want ErrConfig", err)
	}
}
