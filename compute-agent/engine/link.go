package engine

import (
	"context"
	"sync"
	"time"

	"github.com/sophon-dl/sophon/compute-agent/linkwatch"
	"github.com/sophon-dl/sophon/compute-agent/report"
)

// RTT is the least round trip seen to the storage agent this epoch (0:
// none yet).
func (f *Fetcher) RTT() time.Duration { return f.link.RTT() }

// bdp is linkwatch.BDPFactor bandwidth-delay products at rate bytes/s.
func (f *Fetcher) bdp(rate float64) int64 { return f.link.BDP(rate) }

// watchLinks reads the links of fs at once and every linkwatch.Interval
// until ctx ends, and once more then, so that the readings span the
// epoch, resizing each fetcher's window by bandwidth x round trip after
// each reading (each read within linkwatch.ReadTimeout; a reading taken
// while ctx ended is dropped). It returns after the last reading.
func (e *Epoch) watchLinks(ctx context.Context, fs []*Fetcher) {
	t := time.NewTicker(linkwatch.Interval)
	defer t.Stop()
	for {
		final := ctx.Err() != nil
		rctx := ctx
		if final {
			rctx = context.WithoutCancel(ctx)
		}
		var wg sync.WaitGroup
		for _, f := range fs {
			wg.Go(func() {
				c, cancel := context.WithTimeout(rctx, linkwatch.ReadTimeout)
				r := linkwatch.Read(c, linkwatch.Peer{Client: f.client, TCP: f.tcp}, e.cfg.Now)
				cancel()
				if rctx.Err() == nil {
					f.readLink(r)
				}
			})
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

// readLink takes reading r of f's link and resizes f's window.
func (f *Fetcher) readLink(r linkwatch.Reading) {
	e := f.e
	now := e.cfg.Now()
	var bytes int64
	for _, s := range f.stripes {
		_, b := e.sched.InFlight(&s.w)
		bytes += b
	}
	rate := f.link.Add(r, now, bytes, f.servedBytes.Load(), f.mem)
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
	bdp, short := f.link.RecvWindowShort(w, rate)
	if !short {
		return
	}
	rtt := f.RTT()
	f.e.log.Warn().Str("storage", f.name).Int("recv_window", w).Int64("bdp_bytes", bdp).Dur("rtt", rtt).
		Float64("stream_cap_bytes_per_sec", float64(w)/rtt.Seconds()).Int64("want_recv_window", 2*bdp).
		Msg("--recv-window is below the link's bandwidth x round trip: each stream carries at most the window per round trip; raise --recv-window to twice the product, or set 0 for grpc's own")
}

// SeedLink keeps rate (bytes/s) and rtt as f's link's last (its
// linkwatch.Memory; none without SetTCP's): stage 1's link probe, so that
// the first epoch starts where the probe left the link, as later epochs
// start where the last one ended (stage1.LinkSeeder).
func (f *Fetcher) SeedLink(rate float64, rtt time.Duration) {
	if f.mem != nil && rate > 0 && rtt > 0 {
		f.mem.Store(rate, rtt)
	}
}

// seedLink starts f's window where the last epoch's ended (linkwatch.Memory):
// its rate and round trip until this epoch measured its own. Call it in
// prepare, after capLanes.
func (f *Fetcher) seedLink() {
	if rate, ok := f.link.Seed(f.mem); ok {
		f.resize(rate)
	}
}

// resize sets f's window count by bandwidth x round trip at rate bytes/s
// (linkwatch.WindowCount), each stripe its share, and its lanes' bounds
// (capLanes) for the round trip.
func (f *Fetcher) resize(rate float64) {
	e := f.e
	if len(f.stripes) == 0 {
		return
	}
	count := linkwatch.WindowCount(e.cfg.Window, f.bdp(rate), f.meanResponse(), e.cfg.WindowBytes)
	e.sched.Adjust(&f.stripes[0].w, func() {
		for _, s := range f.stripes {
			s.w.MaxCount = max(int(linkwatch.Share(int64(count), len(f.stripes))), 1)
		}
		f.capLanes(e.sched.CPUOf != nil, f.laneRate)
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
		d := f.link.Delivery()
		if d <= 0 {
			return 0
		}
		sum += d
	}
	return sum
}

// linkReport is f's link over the epoch for the report (nil: never read).
func (f *Fetcher) linkReport() *report.Link {
	r := f.link.Report()
	if r != nil && len(f.stripes) > 0 {
		f.e.sched.Adjust(&f.stripes[0].w, func() {
			for _, s := range f.stripes {
				r.WindowCount += s.w.MaxCount
				r.WindowBytes += s.w.MaxBytes
			}
		})
	}
	return r
}
