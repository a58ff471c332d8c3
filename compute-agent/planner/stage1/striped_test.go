package stage1

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/policy"
	"github.com/sophon-dl/sophon/proto/dataplanepb"
)

// stripedSource is a storage agent reached over several connections, each
// recording what it asks.
type stripedSource struct {
	memSource
	clients []dataplanepb.StorageClient
}

func (s stripedSource) Clients() []dataplanepb.StorageClient { return s.clients }

func newStriped(t *testing.T, n int) (stripedSource, []*asked) {
	t.Helper()
	var net enginetest.MemNet
	net.Serve(t, "storage:1", enginetest.NewStorage(t, "storage:1"))
	var src stripedSource
	var recs []*asked
	for range n {
		c, a := recordingClient(t, &net)
		src.clients = append(src.clients, c)
		recs = append(recs, a)
	}
	src.memSource = memSource{c: src.clients[0], cpus: 1}
	return src, recs
}

// TestLinkProbeStriped: the link probe runs over every connection of a
// striped agent (the ones its first epoch stripes over), each asking its
// part of the shard, the positions j, j+n, ... of the probe's order, with
// its part of the window; the bytes are all of them, the samples kept
// probeKeep in all. The storage probe keeps to the first connection.
func TestLinkProbeStriped(t *testing.T) {
	src, recs := newStriped(t, 3)
	shard := make([]uint64, 40)
	for i := range shard {
		shard[i] = uint64(i)
	}
	cfg := &Config{Now: time.Now, Pipeline: enginetest.Pipeline(t), PipelineID: enginetest.Pipeline(t).ID(), Seed: 1, Window: 6, Budget: time.Minute}
	_, _, ids, raws, link, err := cfg.measureLink(context.Background(), []Source{src}, shard)
	if err != nil {
		t.Fatal(err)
	}
	order := fromMiddle(shard)
	for j, a := range recs {
		if got, want := a.list(), every(order, j, len(recs)); !slices.Equal(got, want) {
			t.Errorf("connection %d asked %v, want %v", j, got, want)
		}
	}
	if len(ids) != probeKeep || len(raws) != probeKeep {
		t.Errorf("kept %d samples (%d raw files), want %d", len(ids), len(raws), probeKeep)
	}
	var sum int64
	for _, id := range shard {
		b, err := src.c.Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Send(&dataplanepb.FetchRequest{Sample: id, Seed: 1, PipelineId: cfg.PipelineID, PipelineSpec: cfg.PipelineSpec}); err != nil {
			t.Fatal(err)
		}
		r, err := b.Recv()
		if err != nil {
			t.Fatal(err)
		}
		sum += int64(len(r.GetData()))
		b.CloseSend()
	}
	if len(link) != 1 || link[0].bytes != sum {
		t.Errorf("link probe counted %d bytes, want every connection's %d", link[0].bytes, sum)
	}

	for _, a := range recs {
		a.mu.Lock()
		a.samples = nil
		a.mu.Unlock()
	}
	if _, err := ProbeStorage(context.Background(), cfg, []Source{src}, ids); err != nil {
		t.Fatal(err)
	}
	if len(recs[0].list()) == 0 || len(recs[1].list())+len(recs[2].list()) != 0 {
		t.Errorf("storage probe asked %d, %d, %d samples on the connections; want the first only",
			len(recs[0].list()), len(recs[1].list()), len(recs[2].list()))
	}
}

// TestPart: near-equal parts that add up to the whole.
func TestPart(t *testing.T) {
	for _, tc := range []struct{ total, n int }{{6, 3}, {7, 3}, {2, 8}, {32, 8}, {0, 4}} {
		sum := 0
		for i := range tc.n {
			p := part(tc.total, i, tc.n)
			if p < tc.total/tc.n || p > tc.total/tc.n+1 {
				t.Errorf("part(%d, %d, %d) = %d", tc.total, i, tc.n, p)
			}
			sum += p
		}
		if sum != tc.total {
			t.Errorf("parts of %d over %d add to %d", tc.total, tc.n, sum)
		}
	}
}

// seeding is a Source that records what stage 1 seeds its link with.
type seeding struct {
	memSource
	rate float64
	rtt  time.Duration
}

func (s *seeding) SeedLink(rate float64, rtt time.Duration) { s.rate, s.rtt = rate, rtt }

// TestSeedLinks: each source that keeps a link memory gets its agent's
// probe rate and least round trip; one without either known, or that
// keeps none, gets nothing.
func TestSeedLinks(t *testing.T) {
	a, b, c := &seeding{}, &seeding{}, &seeding{}
	fs := []Source{a, b, memSource{}, c}
	nodes := []policy.StorageNode{{EgressBytesPerSec: 12e6}, {EgressBytesPerSec: 0}, {EgressBytesPerSec: 5e6}, {EgressBytesPerSec: 3e6}}
	links := []linkwatch.Span{{MinRTT: 80 * time.Millisecond}, {MinRTT: time.Millisecond}, {MinRTT: time.Millisecond}, {}}
	seedLinks(fs, nodes, links)
	if a.rate != 12e6 || a.rtt != 80*time.Millisecond {
		t.Errorf("seeded %v B/s, %v; want 12e6 B/s, 80ms", a.rate, a.rtt)
	}
	if b.rate != 0 || b.rtt != 0 || c.rate != 0 || c.rtt != 0 {
		t.Errorf("seeded without a rate (%v, %v) or a round trip (%v, %v)", b.rate, b.rtt, c.rate, c.rtt)
	}
	seedLinks(fs, nodes[:1], links) // fewer nodes than sources: no panic
}

// budgetSource is a Source with a job's share of an agent's budget.
type budgetSource struct {
	memSource
	budget float64
}

func (b budgetSource) Budget() float64 { return b.budget }

// TestBudgetOf: the storage probe prices budget time at the agent's whole
// budget's worker share, not the job's share of it.
func TestBudgetOf(t *testing.T) {
	if got := budgetOf(budgetSource{memSource{cpus: 0.5}, 1}); got != 1 {
		t.Errorf("a job's 0.5 of a 1-core agent: budget %g, want 1", got)
	}
	if got := budgetOf(budgetSource{memSource{cpus: 0.5}, 0}); got != 0.5 {
		t.Errorf("budget unknown: %g, want the source's 0.5", got)
	}
	if got := budgetOf(memSource{cpus: 2}); got != 2 {
		t.Errorf("no budget: %g, want the source's 2", got)
	}
}
