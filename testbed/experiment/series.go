package experiment

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"time"
)

// counts are the counters sampled while a run goes on. rx and rxPackets
// are what the compute side received: in netns mode one entry per compute
// node, the bytes and packets its interface received; on loopback one
// entry, the bytes every shaping proxy relayed to the compute side. With
// several nodes, links is what each storage node sent on its link and cpu
// each storage agent's CPU time in ns, in storage node order.
type counts struct {
	rx, rxPackets []int64
	links, cpu    []int64
}

// shape is the lengths of c's counters.
func (c counts) shape() [4]int { return [4]int{len(c.rx), len(c.rxPackets), len(c.links), len(c.cpu)} }

// vec flattens c: rx..., rxPackets..., links..., cpu....
func (c counts) vec() []float64 {
	var v []float64
	for _, l := range [][]int64{c.rx, c.rxPackets, c.links, c.cpu} {
		for _, x := range l {
			v = append(v, float64(x))
		}
	}
	return v
}

// series is the counters sampled over time.
type series struct {
	mu sync.Mutex
	t  []int64 // Unix ns
	v  [][]float64
	// dims is the samples' counts.shape.
	dims [4]int
}

// add records c at t. Every sample of a series has the shape of the
// first; others are dropped.
func (s *series) add(t time.Time, c counts) {
	s.mu.Lock()
	if len(s.t) == 0 {
		s.dims = c.shape()
	}
	if c.shape() == s.dims {
		s.t = append(s.t, t.UnixNano())
		s.v = append(s.v, c.vec())
	}
	s.mu.Unlock()
}

// at is the counters at Unix time ns, linearly interpolated between
// samples and clamped to the first and last; nil before any sample.
func (s *series) at(ns int64) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.t) == 0 {
		return nil
	}
	i := sort.Search(len(s.t), func(i int) bool { return s.t[i] >= ns })
	switch {
	case i == 0:
		return s.v[0]
	case i == len(s.t):
		return s.v[len(s.v)-1]
	}
	f := float64(ns-s.t[i-1]) / float64(s.t[i]-s.t[i-1])
	a, b := s.v[i-1], s.v[i]
	out := make([]float64, len(a))
	for k := range a {
		out[k] = a[k] + f*(b[k]-a[k])
	}
	return out
}

// during is the counters' increase over [from, to] (Unix ns).
func (s *series) during(from, to int64) counts {
	a, b := s.at(from), s.at(to)
	if a == nil {
		return counts{}
	}
	s.mu.Lock()
	dims := s.dims
	s.mu.Unlock()
	var c counts
	k := 0
	for i, l := range []*[]int64{&c.rx, &c.rxPackets, &c.links, &c.cpu} {
		for range dims[i] {
			*l = append(*l, int64(math.Round(b[k]-a[k])))
			k++
		}
	}
	return c
}

// rate is the bytes per second the compute side received over the last d.
func (s *series) rate(d time.Duration) float64 {
	now := time.Now().UnixNano()
	b1, b0 := s.at(now), s.at(now-d.Nanoseconds())
	if b1 == nil {
		return 0
	}
	s.mu.Lock()
	n := s.dims[0]
	s.mu.Unlock()
	var got float64
	for k := range n {
		got += b1[k] - b0[k]
	}
	return got / d.Seconds()
}

// sampleEvery is how often the link counter is read while a run goes on:
// the epochs' bytes are interpolated between samples, so this bounds their
// error to a few milliseconds of traffic at each end.
const sampleEvery = 5 * time.Millisecond

// watch samples b.received into s until ctx ends, and prints a progress
// line every x.cfg.ProgressEvery from line.
func (x *experiment) watch(ctx context.Context, b *bed, s *series, line func(linkMBps float64) string) {
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	last := time.Now()
	for {
		if c, err := b.received(); err == nil {
			s.add(time.Now(), c)
		}
		if x.cfg.Progress != nil && time.Since(last) >= x.cfg.ProgressEvery {
			last = time.Now()
			fmt.Fprintln(x.cfg.Progress, line(s.rate(x.cfg.ProgressEvery)/1e6))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
