package planner

import (
	"context"
	"fmt"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/report"
)

// Plans that follow the link within an epoch (Host.Resplit). Drift
// re-plans between epochs; a link whose rate moves while an epoch runs
// (a shared WAN link halving for a few seconds) would leave that epoch
// under a plan made for another link: too little offload while the link
// is slow, too much once it is fast again. So while a planned epoch runs
// the policy run reads its bytes every resplitTick and the rate they
// arrived at over the last resplitWindow. When that rate is more than
// Threshold under the window's before and the plan's link rate, or over
// both, and stays so for Hold, the planner makes a plan
// for the rate measured, with its one model (Planner.Replan), and the
// epoch takes it for the positions not yet requested (Epoch.Swap, the
// first epoch's mechanism). Less bandwidth means more offload, within the
// storage CPU; more means less. The rate is compared with the epoch's own
// earlier rate, not with the plan's prediction: an epoch slower than its
// plan throughout (a compute side short of CPU, a plan's wrong guess) is
// the between-epoch drift's to correct, not a link that moved.
//
// A rate that went down is taken for the link's only where the link
// carries less: the storage agents' ends of the connections read a
// delivery rate (TCP_INFO's, which the kernel takes from the data's
// acknowledgements and keeps at what the link carried while the sender
// had data queued; linkwatch's Stats.Delivery, LinkDeliverer), the least
// of the window's readings, more than Threshold under the plan's link
// rate too. A storage-bound epoch whose storage side slows (more offload
// would make that worse) still sends its bursts at the link's rate, and
// so does an epoch's tail or a compute side short of CPU; a balanced plan
// (link and storage side both near full) whose link halves reads a busy
// storage side and the link's rate halved. Where the storage agents do
// not tell it, the storage side under resplitBusy of its cores stands in.
//
// A storage-bound plan hides a link that came back: the epoch then
// receives what its storage side makes, whatever the link could carry.
// So after a re-split down, every probeAfter the plan the epoch began
// with is tried again (ResplitProbe); where the link carries more than
// Threshold over the low rate within probeSpan the run re-plans for what
// it measured, else the low plan comes back (ResplitRevert). At most Max
// re-splits and Max probes an epoch, each rate read only over a window
// that starts resplitSettle after the last change of plan (the window's
// in-flight requests are the last plan's) or resplitRamp after the
// epoch's first bytes (its first second ramps up).
//
// A rate measured going up is a floor on the link (it carried that): the
// next epoch's plan starts from it when the epoch's last re-split went
// up. One measured going down says less (the window may have caught the
// storage side or the compute side short), so after an epoch whose last
// re-split went down the between-epoch drift, which checks that the link
// bound the epoch, decides.

// Defaults of ResplitConfig.
const (
	DefaultResplitThreshold = 0.25
	// DefaultResplitHold is short against the few seconds a shared link's
	// dip lasts: a dip detected late is not worth a re-split.
	DefaultResplitHold = time.Second
	DefaultResplitMax  = 4
)

const (
	resplitTick   = 200 * time.Millisecond
	resplitWindow = time.Second
	resplitSettle = 500 * time.Millisecond
	resplitRamp   = time.Second
	// resplitBusy is the storage side's load (its offloads' budget time
	// over its cores and the window) from which a slower epoch is taken
	// for a slower storage side, not a slower link.
	resplitBusy = 0.8
	probeAfter  = 2 * time.Second
	probeSpan   = resplitSettle + resplitWindow
)

// ResplitConfig configures the re-splits within an epoch.
type ResplitConfig struct {
	// Off turns them off (compute-agent --resplit=false): an epoch runs
	// one plan, re-planned between epochs only.
	Off bool
	// Threshold is the relative move of the measured rate that counts.
	// Zero means DefaultResplitThreshold.
	Threshold float64
	// Hold is how long the move must last. Zero means DefaultResplitHold.
	Hold time.Duration
	// Max bounds the re-splits, and the probes, of one epoch. Zero means
	// DefaultResplitMax.
	Max int
	// Tick is how often the epoch's bytes are read (on the ticker's
	// clock; the rates are on Host.Now's). Zero means 200 ms.
	Tick time.Duration
}

func (c ResplitConfig) withDefaults() ResplitConfig {
	if c.Threshold <= 0 {
		c.Threshold = DefaultResplitThreshold
	}
	if c.Hold <= 0 {
		c.Hold = DefaultResplitHold
	}
	if c.Max <= 0 {
		c.Max = DefaultResplitMax
	}
	if c.Tick <= 0 {
		c.Tick = resplitTick
	}
	return c
}

// A move is what the follower asks for after a step.
type move struct {
	kind     string  // "" (nothing), report.ResplitLink, ResplitProbe, ResplitRevert
	measured float64 // the window's rate, bytes/s
	up       bool    // a ResplitLink over the rate before it
	why      string
}

// mark is what the epoch had received, its offloads' storage budget
// time, and its links' delivery rate (LinkDeliverer; 0: unknown), at a
// time.
type mark struct {
	at               time.Time
	bytes, storageNS int64
	delivery         float64
}

// LinkDeliverer is what an Epoch may also tell: the rate its storage
// agents' ends of the links last saw their data delivered at, bytes/s,
// summed (0: not told by every one; the engine's Epoch.LinkDelivery).
// Without it a drop is judged by the storage side's load alone.
type LinkDeliverer interface {
	LinkDelivery() float64
}

// reading is a window's figures: the rate, the storage side's load and
// the links' least delivery rate (linkOK: told in the window). The least,
// as the kernel keeps a high sample (a burst the link's queue let through
// at once) until a sample taken with its data queued replaces it.
type reading struct {
	rate, busy, link float64
	linkOK           bool
}

// follower decides the re-splits of one epoch from its bytes and its
// storage side's budget time, read every tick (step); it does no I/O.
// The caller carries out each move and tells it the new plan's link rate
// (changedTo).
type follower struct {
	cfg   ResplitConfig
	cores float64
	// base is the link rate the epoch's first plan was made for, rate the
	// current plan's, low the plan's before a probe.
	base, rate, low float64

	marks   []mark
	first   time.Time // the first mark with bytes
	changed time.Time // the last change of plan
	since   time.Time // when the current move began (zero: none)
	dir     int       // its direction: -1 down, +1 up
	ref     float64   // the rate in the window before it began
	probing bool
	n, np   int // re-splits and probes made
	// last is the last window's reading (lastOK: there was one), for the
	// debug log.
	last   reading
	lastOK bool
}

func newFollower(cfg ResplitConfig, cores, rate float64) *follower {
	return &follower{cfg: cfg.withDefaults(), cores: cores, base: rate, rate: rate}
}

// span is the reading over [from, to], counted from no earlier than the
// later of the last change of plan plus resplitSettle and the first bytes
// plus resplitRamp; ok is false when that leaves less than most of a
// window.
func (f *follower) span(from, to time.Time) (rd reading, ok bool) {
	if f.first.IsZero() {
		return reading{}, false
	}
	if t := f.changed.Add(resplitSettle); t.After(from) {
		from = t
	}
	if t := f.first.Add(resplitRamp); t.After(from) {
		from = t
	}
	i := 0
	for i < len(f.marks) && f.marks[i].at.Before(from) {
		i++
	}
	j := len(f.marks) - 1
	for j > i && f.marks[j].at.After(to) {
		j--
	}
	if j <= i {
		return reading{}, false
	}
	a, b := f.marks[i], f.marks[j]
	dt := b.at.Sub(a.at).Seconds()
	if dt < 0.7*resplitWindow.Seconds() {
		return reading{}, false
	}
	rd.rate = float64(b.bytes-a.bytes) / dt
	if f.cores > 0 {
		rd.busy = float64(b.storageNS-a.storageNS) / 1e9 / f.cores / dt
	}
	for _, m := range f.marks[i+1 : j+1] {
		if m.delivery > 0 && (!rd.linkOK || m.delivery < rd.link) {
			rd.link, rd.linkOK = m.delivery, true
		}
	}
	return rd, true
}

// linkDown says whether a window's lower rate may be the link's: the
// links' delivery rate under the plan's link rate by the threshold, or,
// where it is not told, the storage side under resplitBusy.
func (f *follower) linkDown(rd reading) bool {
	if rd.linkOK {
		return rd.link < (1-f.cfg.Threshold)*f.rate
	}
	return rd.busy < resplitBusy
}

// why is the reading's grounds, for a move's reason.
func (rd reading) why() string {
	s := fmt.Sprintf("storage side %.0f%% busy", 100*rd.busy)
	if rd.linkOK {
		s += fmt.Sprintf(", link delivery %.0f B/s", rd.link)
	}
	return s
}

// step takes the epoch's mark at m.at and says what to do. The rate
// moved when the last window's is more than the threshold off the
// window's before and off the plan's link rate (down only where the link
// may bound the window, linkDown); it must stay so for the hold.
func (f *follower) step(m mark) move {
	now, bytes := m.at, m.bytes
	f.marks = append(f.marks, m)
	for len(f.marks) > 2 && now.Sub(f.marks[1].at) > 2*resplitWindow+resplitTick {
		f.marks = f.marks[1:]
	}
	if f.first.IsZero() && bytes > 0 {
		f.first = now
	}
	rd, ok := f.span(now.Add(-resplitWindow), now)
	f.last, f.lastOK = rd, ok
	if !ok {
		return move{}
	}
	r := rd.rate
	thr := f.cfg.Threshold
	if f.probing {
		if now.Sub(f.changed) < probeSpan {
			return move{}
		}
		f.probing = false
		if r > (1+thr)*f.low {
			f.n++
			return move{report.ResplitLink, r, true, fmt.Sprintf("probe: link carried %.0f B/s, over the %.0f B/s the plan before it was made for", r, f.low)}
		}
		return move{report.ResplitRevert, r, false, fmt.Sprintf("probe: link carried %.0f B/s, not over the %.0f B/s the plan before it was made for", r, f.low)}
	}
	down := func(ref float64) bool { return r < (1-thr)*ref && r < (1-thr)*f.rate && f.linkDown(rd) }
	up := func(ref float64) bool { return r > (1+thr)*ref && r > (1+thr)*f.rate }
	if f.since.IsZero() {
		before, ok := f.span(now.Add(-2*resplitWindow), now.Add(-resplitWindow))
		prev := before.rate
		switch {
		case ok && down(prev):
			f.dir, f.since, f.ref = -1, now, prev
		case ok && up(prev):
			f.dir, f.since, f.ref = 1, now, prev
		}
	} else if f.dir < 0 && !down(f.ref) || f.dir > 0 && !up(f.ref) {
		f.dir, f.since = 0, time.Time{} // it came back: no move
	}
	if f.dir != 0 && now.Sub(f.since) >= f.cfg.Hold && f.n < f.cfg.Max {
		f.n++
		word := "under"
		if f.dir > 0 {
			word = "over"
		}
		return move{report.ResplitLink, r, f.dir > 0, fmt.Sprintf("link %.0f B/s for %v, %s the %.0f B/s before (plan %.0f B/s; %s)",
			r, f.cfg.Hold, word, f.ref, f.rate, rd.why())}
	}
	if f.dir == 0 && f.rate < (1-thr)*f.base && now.Sub(f.changed) >= probeAfter && f.np < f.cfg.Max && f.n < f.cfg.Max {
		f.np++
		f.probing, f.low = true, f.rate
		return move{report.ResplitProbe, r, false, fmt.Sprintf("probe: the plan for %.0f B/s again, after %v at %.0f B/s", f.base, probeAfter, f.rate)}
	}
	return move{}
}

// changedTo records that the epoch runs a new plan since now, made for
// link rate rate.
func (f *follower) changedTo(now time.Time, rate float64) {
	f.rate, f.changed, f.dir, f.since = rate, now, 0, time.Time{}
}

// epochPlan is a plan an epoch may run, with what the planner had when it
// made it.
type epochPlan struct {
	run     *RunPlan
	rate    float64 // link bytes/s
	seconds float64 // its predicted epoch
	cores   float64
}

// current is the planner's current plan as an epochPlan.
func (pl *Planner) current() epochPlan {
	return epochPlan{run: pl.Run, rate: pl.Res.LinkBytesPerSec, seconds: pl.Expected.Seconds, cores: pl.Res.StorageCores}
}

// follow re-splits epoch e, of shard positions, while it runs (see the top
// of this file), until ended is closed or ctx ends, and returns what it
// did and the link rate its last re-split measured where that was a
// re-split up (0: none, or the last went down). began is the epoch's
// start.
func (p *Run) follow(ctx context.Context, e Epoch, ended <-chan struct{}, shard int, began time.Time) (out []report.Resplit, last float64) {
	pl, h := p.pl, p.h
	start := pl.current()
	if start.run == nil || !(start.rate > 0) || shard <= 0 {
		return nil, 0
	}
	defer func() {
		if len(out) > 0 && last == 0 {
			// The drift after the epoch judges it against the rate it
			// began with, and the next epoch gets a plan of its own.
			pl.Res.LinkBytesPerSec = start.rate
			pl.Invalidate()
		}
	}()
	f := newFollower(h.Resplit, start.cores, start.rate)
	cur, low := start, start
	tick := time.NewTicker(f.cfg.Tick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out, last
		case <-ended:
			return out, last
		case <-tick.C:
		}
		now := h.Now()
		mk := mark{at: now, bytes: e.BytesReceived()}
		if o := e.Offloads(); o != nil {
			mk.storageNS = o.TotalEffNS
		}
		if ld, ok := e.(LinkDeliverer); ok {
			mk.delivery = ld.LinkDelivery()
		}
		m := f.step(mk)
		if f.lastOK {
			h.Log.Debug().Float64("at_seconds", now.Sub(began).Seconds()).Float64("rate", f.last.rate).Float64("plan_rate", f.rate).
				Float64("storage_busy", f.last.busy).Float64("link_delivery", f.last.link).Msg("re-split: window")
		}
		if m.kind == "" {
			continue
		}
		var next epochPlan
		switch m.kind {
		case report.ResplitLink:
			pl.Res.LinkBytesPerSec = m.measured
			if err := pl.Replan(); err != nil {
				h.Log.Warn().Err(err).Msg("re-split: no plan for the rate measured; the epoch keeps its plan")
				pl.Res.LinkBytesPerSec = cur.rate
				f.changedTo(now, cur.rate)
				continue
			}
			next, low, last = pl.current(), pl.current(), 0.0
			if m.up {
				last = m.measured
			}
		case report.ResplitProbe:
			next = start
		case report.ResplitRevert:
			next = low
		}
		requested := p.swapIn(e, next)
		f.changedTo(now, next.rate)
		if requested >= shard {
			return out, last // nothing left to re-split
		}
		left := float64(shard-requested) / float64(shard)
		rs := report.Resplit{AtSeconds: now.Sub(began).Seconds(), Kind: m.kind, Reason: m.why, MeasuredBytesPerSec: m.measured,
			PlanBytesPerSec: cur.rate, NewBytesPerSec: next.rate, Requested: requested, PredictedRemainingSeconds: next.seconds * left}
		h.Log.Info().Str("kind", rs.Kind).Float64("at_seconds", rs.AtSeconds).Float64("measured", rs.MeasuredBytesPerSec).
			Float64("plan_rate", rs.PlanBytesPerSec).Float64("new_rate", rs.NewBytesPerSec).Int("requested", requested).
			Float64("predicted_remaining_seconds", rs.PredictedRemainingSeconds).Msg("re-split: " + rs.Reason)
		out = append(out, rs)
		cur = next
	}
}

// swapIn hands e the plan ep for the positions not yet requested and
// returns how many were requested before.
func (p *Run) swapIn(e Epoch, ep epochPlan) int {
	splitOf := p.h.SplitOf(ep.run)
	k := func(s uint64) int {
		k, err := splitOf(s)
		if err != nil {
			return 0 // checked when planned; raw is always right
		}
		return k
	}
	return e.Swap(ep.run, k, ep.rate, ep.cores)
}
