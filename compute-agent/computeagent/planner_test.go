package computeagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/sophon-dl/sophon/compute-agent/planner"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/cache"
	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/policy"
)

const policySamples = 48

var (
	policyDataOnce sync.Once
	policyData     [][]byte
	policyDataErr  error
)

// policyDataset alternates small JPEGs (smaller than the 24x24 crop, so
// offloading them saves nothing) with large ones (ten times the crop), so
// SOPHON's plan mixes splits.
func policyDataset(t testing.TB) [][]byte {
	t.Helper()
	policyDataOnce.Do(func() {
		for i := range policySamples {
			w, h := 32, 32
			if i%2 == 1 {
				w, h = 144+8*(i%5), 112
			}
			b, err := synth.JPEG(uint64(i), w, h, synth.Options{})
			if err != nil {
				policyDataErr = err
				return
			}
			policyData = append(policyData, b)
		}
	})
	if policyDataErr != nil {
		t.Fatal(policyDataErr)
	}
	return policyData
}

// shapedFake is a storage agent with four cores behind a link of bps
// bytes/s (per epoch).
func shapedFake(t testing.TB, name string, bps func(epoch uint64) float64) *enginetest.Storage {
	s := enginetest.NewStorage(t, name)
	s.Data = policyDataset(t)
	s.LinkBPS = bps
	s.CPUs = 4
	return s
}

func constBPS(bps float64) func(uint64) float64 { return func(uint64) float64 { return bps } }

// policyConfig runs policy over one shaped storage agent.
func policyConfig(t testing.TB, name string, bps func(uint64) float64, epochs int) (testSetup, *recorder) {
	n := &enginetest.MemNet{}
	n.Serve(t, "s1:1", shapedFake(t, "s1", bps))
	cfg, rec := testConfig(t, n, "s1:1")
	cfg.Policy = name
	cfg.Epochs = epochs
	cfg.ProfileBudget = 150 * time.Millisecond
	cfg.Logger = testLogger(t)
	return cfg, rec
}

func policyIDs() []uint64 {
	s := make([]uint64, policySamples)
	for i := range s {
		s[i] = uint64(i)
	}
	return s
}

// shas maps each delivered sample of epoch e to its tensor's hash.
func shas(t *testing.T, rec *recorder, e uint64) map[uint64][32]byte {
	t.Helper()
	return shasOf(t, rec, e, policyIDs())
}

// shasOf maps each sample of epoch e, checked delivered exactly once of
// ids, to its tensor's hash.
func shasOf(t *testing.T, rec *recorder, e uint64, ids []uint64) map[uint64][32]byte {
	t.Helper()
	got := rec.epoch(e)
	checkOnce(t, got, ids)
	m := map[uint64][32]byte{}
	for _, d := range got {
		m[d.sample] = d.sha
	}
	return m
}

// checkPlanned checks a planned epoch's policy fields.
func checkPlanned(t *testing.T, r report.EpochReport, name string) {
	t.Helper()
	checkReport(t, r)
	if r.Policy != name || r.Plan != name {
		t.Errorf("epoch %d: policy %q plan %q, want %q", r.Epoch, r.Policy, r.Plan, name)
	}
	if !(r.PredictedSeconds > 0) || !(r.BoundSeconds > 0) || r.BoundSeconds > r.PredictedSeconds*(1+1e-9) {
		t.Errorf("epoch %d: predicted %v, bound %v: want 0 < bound <= predicted", r.Epoch, r.PredictedSeconds, r.BoundSeconds)
	}
}

func TestPolicySOPHON(t *testing.T) {
	cfg, rec := policyConfig(t, policy.NameSOPHON, constBPS(1e6), 2)
	var out bytes.Buffer
	cfg.Out = &out
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(reports) != 2 {
		t.Fatalf("%d reports, want 2", len(reports))
	}
	r0, r1 := reports[0], reports[1]
	checkReport(t, r0)
	s1 := r0.Stage1
	if s1 == nil {
		t.Fatal("epoch 0 has no stage 1 summary")
	}
	if s1.Bottleneck != "link" || !s1.Stage2 || s1.Profile != report.ProfileRecorded || !(s1.LinkBytesPerSec > 0) ||
		!(s1.ComputeSamplesPerSec > 0) || !(s1.StorageSamplesPerSec > 0) || !(s1.StorageSpeed > 0) {
		t.Errorf("stage 1: %+v, want a measured link bottleneck and stage 2 recorded", *s1)
	}
	// In memory: no TCP_INFO at either end, the round trip from a timed
	// Info call, the loss unknown.
	if l := s1.Link; l == nil || !(l.RTTSeconds > 0) || l.RTTFrom != "info_rpc" || l.LossKnown {
		t.Errorf("stage 1's link %+v: want a round trip from the Info call, no loss", l)
	}
	if l := r0.Link; l == nil || !(l.RTTSeconds > 0) || l.Readings == 0 || l.WindowCount < cfg.Window {
		t.Errorf("epoch 0's link %+v: want round trips read and a window of at least %d", l, cfg.Window)
	}
	if !strings.Contains(out.String(), "bottleneck link") {
		t.Errorf("printed decision %q does not name the link", out.String())
	}
	if !r0.Profiled || r0.Policy != policy.NameSOPHON || r0.Plan != "nooff" || len(r0.BySplit) != 1 || r0.BySplit[0].Split != 0 {
		t.Errorf("epoch 0: profiled %v policy %q plan %q by split %+v, want a No-Off profiling epoch",
			r0.Profiled, r0.Policy, r0.Plan, r0.BySplit)
	}
	if !(r0.PredictedSeconds > 0) || !(r0.BoundSeconds > 0) {
		t.Errorf("epoch 0: predicted %v bound %v", r0.PredictedSeconds, r0.BoundSeconds)
	}
	checkPlanned(t, r1, policy.NameSOPHON)
	if r1.Stage1 != nil || r1.Profiled {
		t.Errorf("epoch 1: stage 1 %v, profiled %v", r1.Stage1, r1.Profiled)
	}
	var raw, off int
	for _, s := range r1.BySplit {
		if s.Split == 0 {
			raw += s.Samples
		} else {
			off += s.Samples
		}
	}
	if raw == 0 || off == 0 {
		t.Errorf("epoch 1: by split %+v, want mixed splits", r1.BySplit)
	}
	checkOnce(t, rec.epoch(0), policyIDs())
	checkOnce(t, rec.epoch(1), policyIDs())
	if r1.BytesReceived >= r0.BytesReceived {
		t.Errorf("epoch 1 received %d bytes, no less than No-Off's %d", r1.BytesReceived, r0.BytesReceived)
	}
	t.Logf("stage 1: %+v", *s1)
	for _, r := range reports {
		t.Logf("epoch %d: %.3fs predicted %.3fs bound %.3fs bytes %d by split %+v",
			r.Epoch, r.Seconds, r.PredictedSeconds, r.BoundSeconds, r.BytesReceived, r.BySplit)
	}
}

func TestPolicyPlacementInvariance(t *testing.T) {
	ref := map[uint64]map[uint64][32]byte{}
	{
		n := &enginetest.MemNet{}
		n.Serve(t, "s1:1", shapedFake(t, "s1", constBPS(4e6)))
		cfg, rec := testConfig(t, n, "s1:1")
		cfg.Epochs = 2
		if _, err := runAgent(t, cfg); err != nil {
			t.Fatal(err)
		}
		for e := range uint64(2) {
			ref[e] = shas(t, rec, e)
		}
	}
	for _, name := range Policies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg, rec := policyConfig(t, name, constBPS(4e6), 2)
			cfg.ForceProfile = true
			if name == policy.NameLRU { // No-Off through an LRU cache
				cfg.CacheDir, cfg.CacheBytes, cfg.CachePolicy = t.TempDir(), 1<<20, cache.PolicyLRU
			}
			reports, err := runAgent(t, cfg)
			if err != nil {
				t.Fatal(err)
			}
			checkPlanned(t, reports[1], name)
			for e := range uint64(2) {
				if got := shas(t, rec, e); !maps.Equal(got, ref[e]) {
					t.Errorf("epoch %d: tensors differ from nooff's", e)
				}
			}
			t.Logf("%s: epoch 1 %.3fs predicted %.3fs bound %.3fs by split %+v", name,
				reports[1].Seconds, reports[1].PredictedSeconds, reports[1].BoundSeconds, reports[1].BySplit)
		})
	}
}

func TestPolicyProfileReused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "profile.zst")
	cfg, rec1 := policyConfig(t, policy.NameOptimal, constBPS(1e6), 1)
	cfg.ProfilePath = path
	first, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if first[0].Stage1.Profile != report.ProfileRecorded || !first[0].Profiled {
		t.Fatalf("first run: stage 1 %+v, profiled %v, want recorded", *first[0].Stage1, first[0].Profiled)
	}
	cfg, rec2 := policyConfig(t, policy.NameOptimal, constBPS(1e6), 1)
	cfg.ProfilePath = path
	second, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := second[0]
	if r.Stage1.Profile != report.ProfileLoaded || r.Profiled {
		t.Errorf("second run: stage 1 %+v, profiled %v, want the profile loaded", *r.Stage1, r.Profiled)
	}
	checkPlanned(t, r, policy.NameOptimal)
	if len(r.BySplit) == 1 && r.BySplit[0].Split == 0 {
		t.Errorf("second run's first epoch ran No-Off: %+v", r.BySplit)
	}
	if !maps.Equal(shas(t, rec1, 0), shas(t, rec2, 0)) {
		t.Error("planned epoch's tensors differ from the profiling epoch's")
	}
}

func TestPolicyReplan(t *testing.T) {
	// The link is four times slower from epoch 2 on.
	bps := func(epoch uint64) float64 {
		if epoch >= 2 {
			return 0.25e6
		}
		return 1e6
	}
	cfg, _ := policyConfig(t, policy.NameSOPHON, bps, 4)
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reports[1:] {
		checkPlanned(t, r, policy.NameSOPHON)
		t.Logf("epoch %d: %.3fs predicted %.3fs replanned %v", r.Epoch, r.Seconds, r.PredictedSeconds, r.Replanned)
	}
	if !reports[2].Replanned {
		t.Errorf("epoch 2 (link 4x slower) did not re-plan")
	}
	// Epoch 3's plan assumes epoch 2's link rate, so it predicts about
	// epoch 2's time for the same bytes.
	if p3, s2 := reports[3].PredictedSeconds, reports[2].Seconds; p3 < 0.75*s2 || p3 > 1.25*s2 {
		t.Errorf("epoch 3 predicted %.3fs, epoch 2 took %.3fs: want the slower link in the plan", p3, s2)
	}
}

func TestPolicyConfig(t *testing.T) {
	p := enginetest.Pipeline(t)
	for _, tc := range []struct {
		name string
		set  func(*Config)
	}{
		{"unknown policy", func(c *Config) { c.Policy = "greedy" }},
		{"policy and plan file", func(c *Config) {
			c.Policy = policy.NameSOPHON
			c.Plan = planner.PlanOf("f", p.ID(), 0, nil)
		}},
		{"policy and fetch-only", func(c *Config) { c.Policy, c.FetchOnly = policy.NameSOPHON, true }},
		{"negative threshold", func(c *Config) { c.Policy, c.ReplanThreshold = policy.NameSOPHON, -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := testConfig(t, nil, "s1:1")
			tc.set(&cfg.Config)
			if _, err := cfg.new(); !errors.Is(err, ErrConfig) {
				t.Errorf("got %v, want ErrConfig", err)
			}
		})
	}
	cfg, _ := testConfig(t, nil, "s1:1")
	cfg.Policy, cfg.Plan = policy.NameFastFlow, planner.AllOff(p)
	if _, err := cfg.new(); err != nil {
		t.Errorf("policy with a static plan: %v", err)
	}
}

func TestSimRate(t *testing.T) {
	for _, tc := range []struct {
		sim  Sim
		want float64
	}{
		{Sim{PerSample: time.Millisecond}, 1000},
		{Sim{Step: 100 * time.Millisecond}, 1280},
		{Sim{}, 0},
	} {
		if got := tc.sim.Rate(128); got != tc.want {
			t.Errorf("%+v: got %v, want %v", tc.sim, got, tc.want)
		}
	}
}

// TestPolicyClusterExplain: over two storage agents (one link three times
// the other's) the agent plans per agent, serves every sample once, and
// the per-agent load its report predicts is what `policy explain
// --cluster` prints for the cluster the report states and the profile the
// agent saved (--replicas all: the data is replicated).
func TestPolicyClusterExplain(t *testing.T) {
	n := &enginetest.MemNet{}
	n.Serve(t, "s1:1", shapedFake(t, "s1", constBPS(150e3)))
	n.Serve(t, "s2:1", shapedFake(t, "s2", constBPS(50e3)))
	cfg, rec := testConfig(t, n, "s1:1", "s2:1")
	cfg.Policy, cfg.Epochs, cfg.ForceProfile = policy.NameOptimal, 2, true
	cfg.ProfileBudget = 150 * time.Millisecond
	cfg.ProfilePath = filepath.Join(t.TempDir(), "profile.zst")
	cfg.Logger = testLogger(t)
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := reports[1]
	checkPlanned(t, r, policy.NameOptimal)
	checkOnce(t, rec.epoch(1), policyIDs())
	if r.Cluster == nil || len(r.Cluster.Storage) != 2 || len(r.ByStorage) != 2 {
		t.Fatalf("cluster %+v, by storage %+v: want a plan over both agents", r.Cluster, r.ByStorage)
	}
	if reports[0].Cluster != nil {
		t.Error("the profiling epoch (No-Off before any plan) states a cluster")
	}
	c, err := json.Marshal(r.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	cpath := filepath.Join(t.TempDir(), "cluster.json")
	if err := os.WriteFile(cpath, c, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(testutil.Binary(t, "policy"), "explain", "--cluster", cpath, "--profile", cfg.ProfilePath,
		"--replicas", "all", "--policy", policy.NameOptimal).CombinedOutput()
	if err != nil {
		t.Fatalf("policy explain: %v\n%s", err, out)
	}
	rows := explainedStorage(string(out))
	samples := 0
	for _, s := range r.ByStorage {
		p := s.Predicted
		if p == nil {
			t.Fatalf("%s: no prediction", s.Name)
		}
		samples += p.Samples
		// The row as explain prints it (writeLoads' format).
		want := fmt.Sprintf("%d %.1f %.1f %.3f %.3f", p.Samples, p.Bytes/1e6, p.CPUSeconds, p.CPUTime, p.EgressTime)
		if got := rows[s.Name]; got != want {
			t.Errorf("%s: the report predicts %q, policy explain prints %q\n%s", s.Name, want, got, out)
		}
		t.Logf("%s: served %d samples %d bytes, predicted %s", s.Name, s.Samples, s.Bytes, want)
	}
	if samples != len(policyIDs()) {
		t.Errorf("predicted samples sum to %d, want %d", samples, len(policyIDs()))
	}
}

// explainedStorage is the per-storage-node rows of policy explain
// --cluster's plan table, by node name: the fields after the name.
func explainedStorage(out string) map[string]string {
	rows := map[string]string{}
	_, table, _ := strings.Cut(out, " plan: epoch")
	table, _, _ = strings.Cut(table, "compute  samples")
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) == 6 && f[0] != "storage" {
			rows[f[0]] = strings.Join(f[1:], " ")
		}
	}
	return rows
}

// TestLRUPredictsHits: the lru policy plans under its LRU cache's budget,
// so its prediction counts the hits (here the whole dataset fits, and the
// later epochs are hits), and an epoch of hits, whose link was idle, does
// not recalibrate the link to the trickle of bytes it carried.
func TestLRUPredictsHits(t *testing.T) {
	cfg, _ := policyConfig(t, policy.NameLRU, constBPS(4e6), 3)
	cfg.ForceProfile = true
	cfg.CacheDir, cfg.CacheBytes, cfg.CachePolicy = t.TempDir(), 64<<20, cache.PolicyLRU
	reports, err := runAgent(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reports {
		t.Logf("epoch %d: %.3fs predicted %.3fs bytes %d hits %d, %s", r.Epoch, r.Seconds, r.PredictedSeconds, r.BytesReceived, r.Cache.Hits, r.ReplanReason)
	}
	last := reports[len(reports)-1]
	if last.Cache == nil || last.Cache.Hits < last.Samples-1 {
		t.Fatalf("last epoch: cache %+v, want every sample a hit", last.Cache)
	}
	if p0, p := reports[0].PredictedSeconds, last.PredictedSeconds; !(p > 0) || p >= p0/2 || p > 4*last.Seconds+0.05 {
		t.Errorf("last epoch predicted %.3fs (epoch 0, No-Off: %.3fs; measured %.3fs): want the hits counted", p, p0, last.Seconds)
	}
	for _, r := range reports[1:] {
		if strings.Contains(r.ReplanReason, "link") {
			t.Errorf("epoch %d re-planned for the link: %s", r.Epoch, r.ReplanReason)
		}
	}
}
