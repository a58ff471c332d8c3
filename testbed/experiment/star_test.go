package experiment

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/internal/testutil"
	"github.com/sophon-dl/sophon/testbed/netns"
	"github.com/sophon-dl/sophon/testbed/results"
	"github.com/sophon-dl/sophon/testbed/shape"
)

// checkStarRun checks a policy run of an N x M experiment: every epoch
// exactly once over the ranks, the reference's tensors, each rank's time
// with the slowest as the epoch's, and a link and CPU figure per storage
// node.
// starEdgeBytes is what both star links (40 and 20 Mbit/s) carry in 25
// ms: an epoch's window (its report's start and end, the counters' 5 ms
// samples interpolated) is known to a few ms at each end, and with two
// compute agents sharing one CPU quota on a loaded machine a CFS throttle
// can hold a timestamp back by more, while the kernel counts on (seen:
// 100-130 KB of 2.6-5.3 MB epochs under make test's load).
const starEdgeBytes = 60e6 / 8 * 0.025

// tcpSegment is the most payload one TCP segment carries on the testbed's
// 1500-byte links (the MSS less the timestamp option).
const tcpSegment = 1448

func checkStarRun(t *testing.T, r results.Run, epochs, storage, compute int, kernel bool) {
	t.Helper()
	if r.Error != "" || len(r.Epochs) != epochs || !r.ExactlyOnce || !r.ContentMatches {
		t.Errorf("%s: error %q, %d epochs, exactly once %v, content %v", r.Policy, r.Error, len(r.Epochs), r.ExactlyOnce, r.ContentMatches)
		return
	}
	for _, e := range r.Epochs {
		t.Logf("%s epoch %d: %.2f s, ranks %v, links %v B, storage agents %v CPU s, kernel %d B, proxy %d B, agent %d B",
			r.Policy, e.Epoch, e.Seconds, e.RankSeconds, e.LinkBytes, e.StorageAgentCPUSeconds, e.KernelBytes, e.ProxyBytes, e.AgentBytes)
		if compute > 1 && (len(e.RankSeconds) != compute || e.Seconds != slices.Max(e.RankSeconds)) || compute == 1 && e.RankSeconds != nil {
			t.Errorf("%s epoch %d: %.3f s, ranks %v: want %d, the slowest the epoch's", r.Policy, e.Epoch, e.Seconds, e.RankSeconds, compute)
		}
		if len(e.LinkBytes) != storage || len(e.StorageAgentCPUSeconds) != storage {
			t.Errorf("%s epoch %d: links %v, storage agent CPU %v: want %d of each", r.Policy, e.Epoch, e.LinkBytes, e.StorageAgentCPUSeconds, storage)
		}
		var links int64
		for _, b := range e.LinkBytes {
			links += b
		}
		// The links' bytes are over the ranks' epochs together, so at
		// least the payload the agents received, less the traffic the
		// 5 ms samples blur at each end: 3%, or the window's edges as
		// below (on a loaded machine the samples come late).
		if float64(links) < float64(e.AgentBytes)-max(0.03*float64(e.AgentBytes), starEdgeBytes, float64(e.KernelBlurBytes)) {
			t.Errorf("%s epoch %d: the storage links sent %d B, less than the agents' %d B", r.Policy, e.Epoch, links, e.AgentBytes)
		}
		if kernel {
			// Within 2%, or within what the window's edges leave open: the
			// traffic of starEdge at both links' rate, or the bytes between
			// the counter samples around the edges, whichever is more; and
			// the segments the storage agents sent again, which the
			// compute node's interface counts when the first copy arrived
			// too (a loaded machine's late ACKs fire spurious timeouts).
			diff := math.Abs(float64(e.AgentBytes - e.KernelPayloadBytes))
			slack := max(0.02*float64(e.KernelPayloadBytes), starEdgeBytes, float64(e.KernelBlurBytes)) + float64(e.Retransmits)*tcpSegment
			switch {
			case e.KernelBytes > 0 && e.StreamFailures > 0:
				// A failed stream's responses in flight crossed the link
				// and reached no sample (they were asked again).
				t.Logf("%s epoch %d: %d streams failed (a loaded machine's stall): the bytes are not compared", r.Policy, e.Epoch, e.StreamFailures)
			case e.KernelBytes <= 0 || diff > slack:
				t.Errorf("%s epoch %d: agent %d B vs kernel payload %d B (%.0f B apart, %.0f allowed; %d segments sent again)", r.Policy, e.Epoch, e.AgentBytes, e.KernelPayloadBytes, diff, slack, e.Retransmits)
			}
		} else if float64(e.ProxyBytes) < 0.97*float64(e.AgentBytes) || e.KernelBytes != 0 {
			t.Errorf("%s epoch %d: proxy %d B, kernel %d B, agent %d B", r.Policy, e.Epoch, e.ProxyBytes, e.KernelBytes, e.AgentBytes)
		}
	}
	if e := r.Steady(); e != nil && r.Policy == "nooff" {
		// No-Off fetches raw from every storage agent.
		for i, b := range e.LinkBytes {
			if b < e.AgentBytes/int64(4*storage) {
				t.Errorf("nooff: storage link %d sent %d B of %d: want a share", i+1, b, e.AgentBytes)
			}
		}
	}
}

// TestExperimentStar runs a 2 x 1 and a 2 x 2 experiment in namespaces
// (root): two storage agents each in its own cgroup behind its own shaped
// link, one or two compute agents as ranks of one world (No-Off, and
// optimal with two); every run exactly once over the ranks with one
// tensor per sample, the per-rank, per-link and per-agent figures in
// results.json and the report, the files of each rank, and nothing left
// behind.
func TestExperimentStar(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries for about half a minute")
	}
	if err := netns.Available(); err != nil {
		testutil.Require(t, "namespaces unavailable (%v); CI runs this as root", err)
	}
	bins := buildBinaries(t)
	data := smallDataset(t, 40)
	for _, tc := range []struct {
		compute  int
		policies []string
		files    []string
	}{
		{1, []string{"nooff"}, []string{"nooff.jsonl", "nooff.samples", "../profile.zst"}},
		{2, []string{"nooff", "optimal"}, []string{"nooff-rank0.jsonl", "nooff-rank1.samples", "optimal-rank1.log",
			"../profile-rank0.zst", "../profile-rank1.zst"}},
	} {
		t.Run(fmt.Sprintf("2x%d", tc.compute), func(t *testing.T) {
			out := t.TempDir()
			cfg := Config{
				Data: data, Out: out, StorageNodes: 2, ComputeNodes: tc.compute,
				StorageRates: []shape.Rate{shape.MustParseRate("40mbit"), shape.MustParseRate("20mbit")}, StorageCPUs: []float64{0.5},
				Policies: tc.policies, Epochs: 2, Seed: 3, Peer: true, Bin: bins, Mode: ModeNetns, Log: zerolog.Nop(),
				// NB: a window above a shard's samples lets the storage
				// agent that answers first take them all.
				ComputeFlags: []string{"--window", "4"},
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			start := time.Now()
			if _, err := Run(ctx, cfg); err != nil {
				t.Fatal(err)
			}
			t.Logf("ran in %v", time.Since(start).Round(time.Millisecond))
			checkNothingLeft(t, bins)
			res, err := results.Load(filepath.Join(out, "results.json"))
			if err != nil {
				t.Fatal(err)
			}
			c := res.Cells[0]
			if res.StorageNodes != 2 || res.ComputeNodes != tc.compute || c.Rate != "40mbit+20mbit" || c.RateBitsPerSec != 60e6 ||
				!slices.Equal(c.StorageRates, []string{"40mbit", "20mbit"}) || !strings.Contains(res.ModeNote, "bridge") {
				t.Errorf("results: %d x %d nodes, cell %q (%v bits/s, links %v), mode note %q", res.StorageNodes, res.ComputeNodes, c.Rate, c.RateBitsPerSec, c.StorageRates, res.ModeNote)
			}
			n := len(tc.policies)
			if len(c.Runs) != n+1 || c.Runs[n].Policy != results.PeerPolicy || !strings.Contains(c.Runs[n].Skipped, "1 x 1") {
				t.Fatalf("runs %+v: want %v and the peer skipped", c.Runs, tc.policies)
			}
			for _, r := range c.Runs[:n] {
				checkStarRun(t, r, 2, 2, tc.compute, true)
			}
			b, err := os.ReadFile(filepath.Join(out, "report.md"))
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{fmt.Sprintf("**Nodes:** 2 storage x %d compute nodes", tc.compute), "MB sent per storage link", "40mbit / 20mbit"} {
				if !strings.Contains(string(b), want) {
					t.Errorf("report lacks %q", want)
				}
			}
			for _, f := range append(tc.files, "storage-agent-1.log", "storage-agent-2.log") {
				if _, err := os.Stat(filepath.Join(out, "40mbit+20mbit-cpu0.5", f)); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// TestExperimentLoopback runs without namespaces, as `testbed run` does
// without root: a 1 x 1 experiment on loopback behind the shaping proxy,
// then a 2 x 2 one, each storage agent behind its own shaping proxy, whose
// runs must deliver the 1 x 1 run's tensors (Reference).
func TestExperimentLoopback(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the binaries")
	}
	bins := buildBinaries(t)
	data := smallDataset(t, 24)
	one := t.TempDir()
	base := Config{Data: data, Rates: []shape.Rate{shape.MustParseRate("100mbit")}, StorageCPUs: []float64{1},
		Epochs: 2, Seed: 5, Bin: bins, Mode: ModeLoopback, Log: zerolog.Nop()}
	cfg := base
	cfg.Out, cfg.Policies = one, []string{"nooff", "resizeoff"}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Mode != results.ModeLoopback || !strings.Contains(res.ModeNote, "loopback") {
		t.Errorf("mode %q (%s)", res.Mode, res.ModeNote)
	}
	for _, r := range res.Cells[0].Runs {
		if r.Error != "" || !r.ExactlyOnce || !r.ContentMatches {
			t.Errorf("%s: error %q, exactly once %v, content %v", r.Policy, r.Error, r.ExactlyOnce, r.ContentMatches)
		}
		for _, e := range r.Epochs {
			// The proxy relays the agent's payload plus gRPC's framing.
			if ratio := float64(e.AgentBytes) / float64(e.ProxyBytes); e.KernelBytes != 0 || math.Abs(ratio-1) > 0.02 {
				t.Errorf("%s epoch %d: agent %d B, proxy %d B, kernel %d B", r.Policy, e.Epoch, e.AgentBytes, e.ProxyBytes, e.KernelBytes)
			}
		}
	}
	checkNothingLeft(t, bins)

	base.Insecure = true
	cfg = base
	cfg.Out, cfg.Policies, cfg.StorageNodes, cfg.ComputeNodes = t.TempDir(), []string{"nooff", "resizeoff"}, 2, 2
	cfg.ComputeFlags = []string{"--window", "4"} // see TestExperimentStar
	cfg.Reference = filepath.Join(one, "100mbit-cpu1", "nooff.samples")
	if res, err = Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if res.Mode != results.ModeLoopback || res.Reference != cfg.Reference || !strings.Contains(res.ModeNote, "its own in-process token bucket") {
		t.Errorf("mode %q (%s), reference %q", res.Mode, res.ModeNote, res.Reference)
	}
	for _, r := range res.Cells[0].Runs {
		checkStarRun(t, r, 2, 2, 2, false)
	}
	checkNothingLeft(t, bins)

	// A reference of other tensors (another seed's run) does not match.
	cfg.Out, cfg.Policies, cfg.Seed = t.TempDir(), []string{"nooff"}, 6
	if res, err = Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if r := res.Cells[0].Runs[0]; !r.ExactlyOnce || r.ContentMatches {
		t.Errorf("seed 6 against seed 5's reference: exactly once %v, content matches %v; want true, false", r.ExactlyOnce, r.ContentMatches)
	}
}
