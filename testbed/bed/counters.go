package bed

import (
	"math"
	"sort"
	"sync"
	"time"
)

// Counts are a bed's counters at one moment. RX and RXPackets are what
// the compute side received: in netns mode one entry per compute node,
// the bytes and packets its interface received; on loopback one entry,
// the bytes every shaping proxy relayed to the compute side. With several
// nodes, Links is what each storage node sent on its link and CPU each
// storage agent's CPU time in ns (SetStorageAgent), in storage node
// order.
type Counts struct {
	RX, RXPackets []int64
	Links, CPU    []int64
}

// Counters reads the bed's counters (see Counts).
func (b *Bed) Counters() (Counts, error) {
	var c Counts
	if b.topo != nil {
		for _, n := range b.topo.Compute {
			d, err := n.Counters()
			if err != nil {
				return c, err
			}
			c.RX = append(c.RX, int64(d.RxBytes))
			c.RXPackets = append(c.RXPackets, int64(d.RxPackets))
		}
	} else {
		c.RX, c.RXPackets = []int64{0}, []int64{0}
	}
	if !b.multi && b.topo != nil {
		return c, nil
	}
	for _, s := range b.storage {
		var sent int64
		if s.node != nil {
			d, err := s.node.Counters()
			if err != nil {
				return c, err
			}
			sent = int64(d.TxBytes)
		} else {
			s.mu.Lock()
			for _, p := range s.proxies {
				sent += p.Stats().Down
			}
			s.mu.Unlock()
			c.RX[0] += sent
		}
		if b.multi {
			s.mu.Lock()
			pid := s.agent
			s.mu.Unlock()
			var cpu time.Duration
			if pid > 0 {
				cpu = ProcCPU(pid)
			}
			c.Links = append(c.Links, sent)
			c.CPU = append(c.CPU, int64(cpu))
		}
	}
	return c, nil
}

// shape is the lengths of c's counters.
func (c Counts) shape() [4]int { return [4]int{len(c.RX), len(c.RXPackets), len(c.Links), len(c.CPU)} }

// vec flattens c: RX..., RXPackets..., Links..., CPU....
func (c Counts) vec() []float64 {
	var v []float64
	for _, l := range [][]int64{c.RX, c.RXPackets, c.Links, c.CPU} {
		for _, x := range l {
			v = append(v, float64(x))
		}
	}
	return v
}

// Series is a bed's counters sampled over time. The zero Series is empty
// and ready; it is safe for concurrent use.
type Series struct {
	mu sync.Mutex
	t  []int64 // Unix ns
	v  [][]float64
	// dims is the samples' Counts.shape.
	dims [4]int
}

// Add records c at t. Every sample of a series has the shape of the
// first; others are dropped.
func (s *Series) Add(t time.Time, c Counts) {
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
func (s *Series) at(ns int64) []float64 {
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

// Blur is, per counter, the increase between the two samples around
// Unix time ns: how far an interpolated value at ns can be off (zero at
// or outside the series' ends). A starved sampler widens it.
func (s *Series) Blur(ns int64) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.t) == 0 {
		return nil
	}
	out := make([]float64, len(s.v[0]))
	i := sort.Search(len(s.t), func(i int) bool { return s.t[i] >= ns })
	if i == 0 || i == len(s.t) || s.t[i] == ns {
		return out
	}
	for k := range out {
		out[k] = s.v[i][k] - s.v[i-1][k]
	}
	return out
}

// During is the counters' increase over [from, to] (Unix ns), each
// interpolated between samples; zero Counts before any sample.
func (s *Series) During(from, to int64) Counts {
	a, b := s.at(from), s.at(to)
	if a == nil {
		return Counts{}
	}
	s.mu.Lock()
	dims := s.dims
	s.mu.Unlock()
	var c Counts
	k := 0
	for i, l := range []*[]int64{&c.RX, &c.RXPackets, &c.Links, &c.CPU} {
		for range dims[i] {
			*l = append(*l, int64(math.Round(b[k]-a[k])))
			k++
		}
	}
	return c
}

// Rate is the bytes per second the compute side received over the last d.
func (s *Series) Rate(d time.Duration) float64 {
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
