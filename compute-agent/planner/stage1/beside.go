package stage1

import (
	"context"
	"slices"
	"sync"
	"time"
)

// What stage 1 beside a running first epoch measures of it (used by the
// compute agent's policy run, planner.Run, which owns the epoch): the raw
// files it received (CollectRaws) and its link rate (LinkMeter,
// LinkSince).

// CalibrationWait bounds the wait for the epoch's calibration samples; the
// plan is then made from those that arrived.
const CalibrationWait = 2 * time.Second

// Beside is what stage 1 beside the first epoch hears from it: the raw
// files it received, and the end of its run.
type Beside struct {
	Raws  <-chan RawFile
	Ended <-chan struct{}
}

// RawFile is a raw file the first epoch received.
type RawFile struct {
	Sample uint64
	Raw    []byte
}

// LinkMeter estimates the link's rate from the first epoch's own traffic
// while stage 1 runs beside it. Bytes over time since the first file
// underrates a link that idled for a while: while the storage agent had
// nothing ready (its CPU busy with the epoch's first cuts, or, where both
// agents share a machine, with the compute side's calibration) nothing
// crossed, and a plan made for that rate offloads more than the link
// needs. The meter samples the epoch's bytes every meterTick and takes the
// median rate of the meterSpan spans whose rate is at least a third of
// the highest span's: the spans in which the link carried what it could.
type LinkMeter struct {
	mu    sync.Mutex
	at    []time.Time
	bytes []int64
}

const (
	meterTick = 25 * time.Millisecond
	meterSpan = 100 * time.Millisecond
	// meterMinSpans is how many busy spans a rate needs.
	meterMinSpans = 3
	// meterMax bounds the samples kept (a minute's worth).
	meterMax = int(time.Minute / meterTick)
)

// StartLinkMeter runs a meter on bytes (the epoch's bytes so far) until stop
// is called.
func StartLinkMeter(now func() time.Time, bytes func() int64) (m *LinkMeter, stop func()) {
	m = &LinkMeter{}
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		m.run(done, now, bytes)
	}()
	return m, func() {
		close(done)
		<-stopped
	}
}

// run samples bytes (the epoch's bytes so far) at now's time every
// meterTick until done is closed.
func (m *LinkMeter) run(done <-chan struct{}, now func() time.Time, bytes func() int64) {
	t := time.NewTicker(meterTick)
	defer t.Stop()
	for {
		m.sample(now(), bytes())
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

func (m *LinkMeter) sample(at time.Time, b int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.at) < meterMax {
		m.at, m.bytes = append(m.at, at), append(m.bytes, b)
	}
}

// Rate is the median of the busy spans' rates since the first sample with
// bytes, or 0 when there are fewer than meterMinSpans of them.
func (m *LinkMeter) Rate() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := 0
	for i < len(m.bytes) && m.bytes[i] == 0 {
		i++
	}
	var rates []float64
	for j := i; j < len(m.at); j++ {
		if dt := m.at[j].Sub(m.at[i]); dt >= meterSpan {
			rates = append(rates, float64(m.bytes[j]-m.bytes[i])/dt.Seconds())
			i = j
		}
	}
	if len(rates) == 0 {
		return 0
	}
	hi := slices.Max(rates)
	rates = slices.DeleteFunc(rates, func(r float64) bool { return r < hi/3 })
	if len(rates) < meterMinSpans {
		return 0
	}
	slices.Sort(rates)
	return rates[len(rates)/2]
}

// peakSpan is the span over which LinkMeter.Peak takes its rates. The
// epoch's bytes count a response whole once it has arrived, and the
// transport's buffers let a receiver that fell behind catch up at once,
// so a span's rate reads high by up to a response and a buffer over the
// span (in the testbed, at 12 MB/s: 5-18% over a quarter second, 4-8%
// over half a second); a second keeps that to a few percent and is still
// short enough to find the link's busy stretches in a storage-bound
// epoch.
const peakSpan = time.Second

// Peak is the highest rate over any peakSpan of the meter's samples since
// the first with bytes, or 0 before there is one: what the link carried
// when it was busiest, about a floor on its capacity (within peakSpan's
// error), which an epoch whose storage side held the link idle most of
// the time does not hide as its median busy span (Rate) does.
func (m *LinkMeter) Peak() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := 0
	for i < len(m.bytes) && m.bytes[i] == 0 {
		i++
	}
	var peak float64
	for j := i; j < len(m.at); j++ {
		for i+1 < j && m.at[j].Sub(m.at[i+1]) >= peakSpan {
			i++
		}
		if dt := m.at[j].Sub(m.at[i]); dt >= peakSpan {
			peak = max(peak, float64(m.bytes[j]-m.bytes[i])/dt.Seconds())
		}
	}
	return peak
}

// LinkSince is the epoch's bytes per second from first (when the first
// raw file arrived) to now, when it had received bytes; from (t0, b0), when
// stage 1 began, where no file arrived.
func LinkSince(first Mark, t0 time.Time, b0 int64, now time.Time, bytes int64) float64 {
	if first.at.IsZero() {
		first = Mark{t0, b0}
	}
	if dt := now.Sub(first.at).Seconds(); dt > 0 {
		return float64(bytes-first.bytes) / dt
	}
	return 0
}

// RawPhaseRate is the link's rate while the first epoch's calibration
// files crossed: the bytes since the first of them arrived (first) over
// the time since, taken when the last of the n asked for arrived (kept of
// them did). The storage agents read raw files without a CPU budget, so
// the link carried what it could over that span, whatever the
// provisional plan's cuts then do. 0 when fewer than n arrived
// (CollectRaws stopped waiting: the span is not the files' alone) or none
// did.
func RawPhaseRate(first Mark, kept, n int, now time.Time, bytes int64) float64 {
	if kept < n || n < 2 || first.at.IsZero() {
		return 0
	}
	if dt := now.Sub(first.at).Seconds(); dt > 0 {
		return float64(bytes-first.bytes) / dt
	}
	return 0
}

// Mark is when the epoch had received how many bytes.
type Mark struct {
	at    time.Time
	bytes int64
}

// CollectRaws takes the first epoch's raw files from ep.Raws until it has
// n of them, CalibrationWait has passed or the epoch's run ended (then
// with those already sent); first is when the first arrived and the
// epoch's bytes then (bytes).
func CollectRaws(ctx context.Context, ep Beside, n int, now func() time.Time, bytes func() int64) (kept map[uint64][]byte, first Mark, err error) {
	kept = map[uint64][]byte{}
	wait := time.NewTimer(CalibrationWait)
	defer wait.Stop()
	take := func(r RawFile) {
		if len(kept) == 0 {
			first = Mark{now(), bytes()}
		}
		kept[r.Sample] = r.Raw
	}
	for len(kept) < n {
		select {
		case <-ctx.Done():
			return nil, first, ctx.Err()
		case <-wait.C:
			return kept, first, nil
		case <-ep.Ended:
			for len(kept) < n {
				select {
				case r := <-ep.Raws:
					take(r)
				default:
					return kept, first, nil
				}
			}
		case r := <-ep.Raws:
			take(r)
		}
	}
	return kept, first, nil
}
