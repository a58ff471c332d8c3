package computeagent

import (
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/sophon-dl/sophon/compute-agent/engine/enginetest"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/policy"
)

// droppingLink is a link of rate bytes/s for the first epoch (No-Off,
// profiling), an eighth of it for the planned epochs, and a 32nd of it
// for 3 s from drop into each planned epoch on: its epoch's time starts
// with the epoch's first response. A planned epoch's bytes take about
// 4.7 s at an eighth, so that a third of its positions are still to
// request when the drop has held long enough to count (1.6 s after it);
// the drop is deep, so that a loaded machine's bursts of delivery do not
// hide it during the hold.
type droppingLink struct {
	rate  float64
	drop  time.Duration
	mu    sync.Mutex
	first map[uint64]time.Time
}

func (l *droppingLink) bps(epoch uint64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if epoch == 0 {
		return l.rate
	}
	t, ok := l.first[epoch]
	if !ok {
		t = time.Now()
		l.first[epoch] = t
	}
	if d := time.Since(t); d >= l.drop && d < l.drop+3*time.Second {
		return l.rate / 32
	}
	return l.rate / 8
}

// TestPolicyResplitsMidEpoch: a planned epoch whose link drops partway
// re-splits the positions left for the rate it measured (Epoch.Swap)
// and says so in its report, and
// every epoch still delivers each sample exactly once with No-Off's
// tensors; with NoResplit the epoch runs one plan.
func TestPolicyResplitsMidEpoch(t *testing.T) {
	raw := 0
	for _, b := range policyDataset(t) {
		raw += len(b)
	}
	rate := float64(raw) / 3 // a No-Off epoch takes 3 s

	n := &enginetest.MemNet{}
	n.Serve(t, "s1:1", shapedFake(t, "s1", constBPS(100*rate)))
	ref, refRec := testConfig(t, n, "s1:1")
	ref.Epochs = 2
	if _, err := runAgent(t, ref); err != nil {
		t.Fatal(err)
	}
	for _, off := range []bool{false, true} {
		link := &droppingLink{rate: rate, drop: 2 * time.Second, first: map[uint64]time.Time{}}
		cfg, rec := policyConfig(t, policy.NameOptimal, link.bps, 2)
		cfg.ForceProfile = true
		cfg.NoResplit = off
		cfg.ResplitHold = 300 * time.Millisecond
		cfg.Window = 2 // positions left to re-split while the link is slow
		cfg.Logger = zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel)
		reports := runEpochs(t, cfg, 2)
		for _, r := range reports {
			if got, want := shas(t, rec, r.Epoch), shas(t, refRec, r.Epoch); !maps.Equal(got, want) {
				t.Errorf("resplit off %t: epoch %d: tensors differ from No-Off's", off, r.Epoch)
			}
		}
		r1 := reports[1]
		checkPlanned(t, r1, policy.NameOptimal)
		t.Logf("resplit off %t: epoch 1: %.2f s, re-splits %+v", off, r1.Seconds, r1.Resplits)
		if off {
			if len(r1.Resplits) != 0 {
				t.Errorf("resplit off: re-splits %+v", r1.Resplits)
			}
			continue
		}
		var down *report.Resplit
		for i, rs := range r1.Resplits {
			if rs.Kind == report.ResplitLink && rs.NewBytesPerSec < rs.PlanBytesPerSec && down == nil {
				down = &r1.Resplits[i]
			}
		}
		if down == nil {
			t.Fatalf("epoch 1: re-splits %+v, want one down for the slower link", r1.Resplits)
		}
		if down.AtSeconds < link.drop.Seconds() || down.Requested <= 0 || down.Requested >= r1.Shard || !(down.PredictedRemainingSeconds > 0) {
			t.Errorf("re-split %+v: want one after the drop at %v, mid-epoch, with a prediction", *down, link.drop)
		}
	}
}
