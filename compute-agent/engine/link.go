package engine

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/report"
)

// Windows by bandwidth x round trip. A window of a fixed count of
// requests holds count x response bytes in flight: on a long link that is
// a fraction of what the link holds (500 Mbit/s at 80 ms holds 5 MB; 64
// responses of 28 KB are 1.8 MB), and the link idles for the rest of each
// round trip. So each storage agent's link is read every linkEvery
// (linkwatch: TCP_INFO at both ends, a timed Info call else), and its
// window grows to cover bdpFactor bandwidth-delay products on top of what
// it holds on a short link: in count, Config.Window plus enough of the
// epoch's mean responses for those bytes (linkwatch.WindowCount); in
// bytes, the pacing of several agents (pace) and the raw lane's rawLead
// (capLanes) gain the same bytes, and the offloads' storage CPU lead
// gains the round trip. Config.WindowBytes stays the hard bound of the
// bytes in flight. The bandwidth is the most this agent delivered in one
// reading's interval this epoch or the last (linkwatch.Memory), or the
// planner's link rate shared among the agents, whichever is more; the
// round trip is the least seen (the path's own, not its queues). A
// window that is too small measures a rate too low, but bdpFactor of it
// is twice the bytes it held, so the window doubles each interval until
// the link, not the window, bounds the rate.
const (
	linkEvery = 250 * time.Millisecond
	bdpFactor = 2
	// linkReadTimeout bounds one reading's Info call.
	linkReadTimeout = time.Second
)

// linkState is a fetcher's readings of its link during an epoch.
type linkState struct {
	mu    sync.Mutex
	stats linkwatch.Stats
	// peakBytes is the most estimated response bytes the window had
	// outstanding at a reading.
	peakBytes int64
	// lastBytes and lastAt are servedBytes and the time at the previous
	// reading; peakRate the most bytes/s between two readings.
	// seedRate is the last epoch's peakRate (linkwatch.Memory).
	lastBytes int64
	lastAt    time.Time
	peakRate  float64
	seedRate  float64
	// rtt is the round trip windows are sized by (ns; the least seen, 0
	// unknown), rttMean the mean (ns), which deadlines count.
	rtt, rttMean atomic.Int64
	// laneRate is the link rate capLanes last sized the raw lane for.
	laneRate float64
	// recvWarned: checkRecvWindow warned this epoch.
	recvWarned atomic.Bool
}

// RTT is the least round trip seen to the storage agent this epoch (0:
// none yet).
func (f *Fetcher) RTT() time.Duration { return time.Duration(f.link.rtt.Load()) }

// bdp is bdpFactor bandwidth-delay products at rate bytes/s.
func (f *Fetcher) bdp(rate float64) int64 {
	return int64(bdpFactor * rate * f.RTT().Seconds())
}

// watchLinks reads each fetcher's link at once and every linkEvery until
// ctx ends, resizing its window after each reading, and once more then,
// so that the readings span the epoch.
func (e *Epoch) watchLinks(ctx context.Context, fs []*Fetcher) {
	t := time.NewTicker(linkEvery)
	defer t.Stop()
	for {
		final := ctx.Err() != nil
		rctx := ctx
		if final {
			rctx = context.WithoutCancel(ctx)
		}
		var wg sync.WaitGroup
		for _, f := range fs {
			wg.Go(func() { f.readLink(rctx) })
		}
		wg.Wait()
		if final {
			return
		}
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// readLink takes one reading of f's link and resizes f's window.
func (f *Fetcher) readLink(ctx context.Context) {
	e := f.e
	rctx, cancel := context.WithTimeout(ctx, linkReadTimeout)
	r := linkwatch.Read(rctx, linkwatch.Peer{Client: f.client, TCP: f.tcp}, e.cfg.Now)
	cancel()
	if ctx.Err() != nil {
		return
	}
	now := e.cfg.Now()
	_, bytes := e.sched.InFlight(&f.w)
	got := f.servedBytes.Load()
	l := &f.link
	l.mu.Lock()
	l.stats.Add(r)
	l.peakBytes = max(l.peakBytes, bytes)
	if !l.lastAt.IsZero() && got > l.lastBytes {
		if dt := now.Sub(l.lastAt).Seconds(); dt > 0 {
			l.peakRate = max(l.peakRate, float64(got-l.lastBytes)/dt)
		}
	}
	l.lastBytes, l.lastAt = got, now
	rate := max(l.peakRate, l.seedRate)
	if m := l.stats.MinRTT(); m > 0 {
		l.rtt.Store(int64(m))
		if f.mem != nil && l.peakRate > 0 {
			f.mem.Store(l.peakRate, m)
		}
	}
	if d, _ := l.stats.RTT(); d > 0 {
		l.rttMean.Store(int64(d))
	}
	l.mu.Unlock()
	if n := len(e.fs); n > 0 && e.linkRate > 0 {
		rate = max(rate, e.linkRate/float64(n))
	}
	f.checkRecvWindow(rate)
	f.resize(rate)
}

// checkRecvWindow warns, once per epoch and agent, when the gRPC stream
// window (Config.RecvWindow) is below one bandwidth-delay product at
// rate: the storage agent then waits for a window update every round
// trip, and the stream carries at most the window per round trip,
// whatever the fetch window. The connection keeps its window (grpc sets
// it when it dials); the remedy is --recv-window at twice the product, or
// 0 for grpc's own, which grows with the product it measures.
func (f *Fetcher) checkRecvWindow(rate float64) {
	w := f.e.cfg.RecvWindow
	bdp := f.bdp(rate) / bdpFactor
	if w <= 0 || bdp <= int64(w) || !f.link.recvWarned.CompareAndSwap(false, true) {
		return
	}
	rtt := f.RTT()
	f.e.log.Warn().Str("storage", f.name).Int("recv_window", w).Int64("bdp_bytes", bdp).Dur("rtt", rtt).
		Float64("stream_cap_bytes_per_sec", float64(w)/rtt.Seconds()).Int64("want_recv_window", 2*bdp).
		Msg("--recv-window is below the link's bandwidth x round trip: each stream carries at most the window per round trip; raise --recv-window to twice the product, or set 0 for grpc's own")
}

// seedLink starts f's window where the last epoch's ended (linkwatch.Memory):
// its rate and round trip until this epoch measured its own. Call it in
// prepare, after capLanes.
func (f *Fetcher) seedLink() {
	if f.mem == nil {
		return
	}
	rate, rtt := f.mem.Load()
	if rate <= 0 || rtt <= 0 {
		return
	}
	f.link.seedRate = rate
	f.link.rtt.Store(int64(rtt))
	f.link.rttMean.Store(int64(rtt))
	f.resize(rate)
}

// resize sets f's window count by bandwidth x round trip at rate bytes/s
// (see linkEvery), and its lanes' bounds (capLanes) for the round trip.
func (f *Fetcher) resize(rate float64) {
	e := f.e
	count := linkwatch.WindowCount(e.cfg.Window, f.bdp(rate), f.meanResponse(), e.cfg.WindowBytes)
	e.sched.Adjust(&f.w, func() {
		f.w.MaxCount = count
		f.capLanes(e.sched.CPUOf != nil, f.link.laneRate)
	})
}

// meanResponse is the mean response the agent sent this epoch (from its
// 8th), else the epoch's mean estimate.
func (f *Fetcher) meanResponse() int64 {
	if n := f.served.Load(); n >= 8 {
		return max(f.servedBytes.Load()/n, 1)
	}
	return f.e.meanEst
}

// LinkDelivery is the storage agents' delivery rates summed, each as its
// end of the link last told it (linkwatch.Stats.Delivery); 0 when one has
// not told it (a sum without it would read a slower link).
func (e *Epoch) LinkDelivery() float64 {
	var sum float64
	for _, f := range e.fs {
		f.link.mu.Lock()
		d := f.link.stats.Delivery()
		f.link.mu.Unlock()
		if d <= 0 {
			return 0
		}
		sum += d
	}
	return sum
}

// linkReport is f's link over the epoch for the report (nil: never read).
func (f *Fetcher) linkReport() *report.Link {
	l := &f.link
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stats.Readings() == 0 {
		return nil
	}
	r := l.stats.Report()
	r.WindowPeakBytes = l.peakBytes
	f.e.sched.Adjust(&f.w, func() { r.WindowCount, r.WindowBytes = f.w.MaxCount, f.w.MaxBytes })
	return r
}
