package computeagent

import (
	"slices"
	"sync"
	"time"
)

// linkMeter estimates the link's rate from the first epoch's own traffic
// while stage 1 runs beside it. Bytes over time since the first file
// underrates a link that idled for a while: while the storage agent had
// nothing ready (its CPU busy with the epoch's first cuts, or, where both
// agents share a machine, with the compute side's calibration) nothing
// crossed, and a plan made for that rate offloads more than the link
// needs. The meter samples the epoch's bytes every meterTick and takes the
// median rate of the meterSpan spans whose rate is at least a third of
// the highest span's: the spans in which the link carried what it could.
type linkMeter struct {
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

// startMeter runs a meter on bytes (the epoch's bytes so far) until stop
// is called.
func startMeter(now func() time.Time, bytes func() int64) (m *linkMeter, stop func()) {
	m = &linkMeter{}
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
func (m *linkMeter) run(done <-chan struct{}, now func() time.Time, bytes func() int64) {
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

func (m *linkMeter) sample(at time.Time, b int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.at) < meterMax {
		m.at, m.bytes = append(m.at, at), append(m.bytes, b)
	}
}

// rate is the median of the busy spans' rates since the first sample with
// bytes, or 0 when there are fewer than meterMinSpans of them.
func (m *linkMeter) rate() float64 {
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
