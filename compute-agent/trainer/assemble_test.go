package trainer

import (
	"encoding/binary"
	"io"
	"testing"

	"github.com/sophon-dl/sophon/internal/testutil"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sophon-dl/sophon/compute-agent/handoff"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
	"github.com/sophon-dl/sophon/ops"
)

// TestHandoffNoAllocsPerBatch: in steady state a batch's whole cycle on
// the agent's side (rows placed into a leased slot, header, READY, the
// trainer's RELEASE read and applied) allocates nothing.
func TestHandoffNoAllocsPerBatch(t *testing.T) {
	const batch = 16
	l := handoff.NewSlotLayout(batch, [3]int{8, 8, 3}, handoff.DTypeUint8, handoff.LayoutNHWC)
	r, err := handoff.NewRing("allocs", 2, l)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	agentSide, trainerSide := testutil.UnixPair(t)
	tc := &Conn{c: agentSide, ring: r, hello: handoff.HelloMsg{World: 1, LocalWorld: 1}}
	m := &Metrics{
		Wait:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "wait"}, []string{"rank"}),
		Batches: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "batches"}, []string{"rank"}),
		Samples: prometheus.NewCounter(prometheus.CounterOpts{Name: "samples"}),
	}
	const batches = 1 << 20
	asm := NewAssembler(&fakeEpoch{}, m, []*Conn{tc}, Layout{Batch: batch, Queue: 1, Rows: batch * batches, Batches: batches,
		First: []int{0}, Positions: batch * batches})
	img := ops.NewImage(8, 8)
	fr := handoff.NewFrameReader(agentSide)
	var ready [5 + handoff.ReadyLen]byte
	var rel [5 + handoff.ReleaseLen]byte
	binary.LittleEndian.PutUint32(rel[:], 1+handoff.ReleaseLen)
	rel[4] = handoff.FrameRelease
	wake := NewWaiter()
	cycle := func() {
		for i := range batch {
			if err := asm.Place(t.Context(), schedule.Item{Sample: uint64(i), Image: img}, wake); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := io.ReadFull(trainerSide, ready[:]); err != nil || ready[4] != handoff.FrameReady {
			t.Fatalf("READY: %v %x", err, ready[4])
		}
		copy(rel[5:9], ready[5:9])
		if _, err := trainerSide.Write(rel[:]); err != nil {
			t.Fatal(err)
		}
		typ, p, err := fr.Next()
		if err != nil {
			t.Fatal(err)
		}
		m, err := handoff.DecodeClientFrame(typ, p)
		if err != nil || !m.Release.OK {
			t.Fatalf("RELEASE: %v", err)
		}
		if err := asm.Release(tc, m.Release.Slot, m.Release.WaitNS); err != nil {
			t.Fatal(err)
		}
	}
	for range 4 { // warm up the scratch slices and buffers
		cycle()
	}
	if got := testing.AllocsPerRun(50, cycle); got != 0 {
		t.Errorf("%.1f allocations per batch, want 0", got)
	}
}

// fakeEpoch is an epoch without a schedule, journal or report.
type fakeEpoch struct{ placed int }

func (*fakeEpoch) Num() uint64                                  { return 0 }
func (*fakeEpoch) Delivered(int)                                {}
func (e *fakeEpoch) Placed(int, int64)                          { e.placed++ }
func (*fakeEpoch) Hashed() bool                                 { return false }
func (*fakeEpoch) Consumed(ids []uint64, shas [][32]byte) error { return nil }
