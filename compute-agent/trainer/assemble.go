package trainer

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sophon-dl/sophon/compute-agent/epoch"
	"github.com/sophon-dl/sophon/compute-agent/handoff"
	"github.com/sophon-dl/sophon/compute-agent/report"
)

// Assembler fills the local ranks' slots for one epoch. Finishing workers
// hand it finished samples (place) and copy each straight into a row of a
// leased slot; a slot whose rows are all in is published (READY), and the
// trainer's RELEASE returns it.
//
// Completion order: the samples of all local ranks form one shared queue;
// a row goes to whichever rank has a batch open or a free slot, so a slow
// or paused rank does not hold the others back, and each sample reaches
// one rank. When no rank can take a sample it waits in the queue (at most
// fifoCap); when that is full the workers wait, their results stop, the
// fetch windows fill and no new request goes out.
//
// Strict order: rank r's index j goes to row j % B of its batch j / B. A
// batch opens when the rank has a free slot and every earlier batch has
// opened; samples of batches not open yet are parked, which the schedule's
// gate bounds.
type Assembler struct {
	e      Epoch
	m      *Metrics // nil without metrics
	strict bool
	batch  int
	ranks  []*rankFeed

	mu       sync.Mutex
	sig      chan struct{}
	err      error
	errCode  string
	fifo     []epoch.Item // ring buffer of fifoCap
	fifoHead int
	fifoLen  int
	parked   map[int]epoch.Item // strict: by position
	placed   []bool             // strict: position has its row
	unplaced int                // strict: first position without a row
	rr       int
	pending  int      // batches not yet released, all ranks
	waiters  []Waiter // placers waiting for room in the queue
	done     chan struct{}
	// first is when the first batch was published (zero: none yet).
	first time.Time
}

// Epoch is what an Assembler needs of the epoch whose samples it places.
type Epoch interface {
	// Num is the epoch's number.
	Num() uint64
	// Delivered moves the schedule's strict-order gate: every position
	// below pos has its row.
	Delivered(pos int)
	// Placed counts a sample in its row, at split with wire bytes (the
	// report's by_split).
	Placed(split int, wire int64)
	// Hashed reports whether the rows of published batches are hashed
	// and handed to Consumed.
	Hashed() bool
	// Consumed journals a published batch's samples with their rows'
	// hashes and reports them (Config.OnSample).
	Consumed(ids []uint64, shas [][32]byte) error
}

// Metrics are the assembler's series.
type Metrics struct {
	Wait, Batches *prometheus.CounterVec // by rank
	Samples       prometheus.Counter
}

// rankFeed is one rank's slots during the epoch.
type rankFeed struct {
	c     *Conn
	local int
	rows  int // rows per epoch (RankSamples)
	free  []int
	next  int          // next batch to open
	end   int          // batches per epoch
	open  []*openBatch // open batches in index order
	state []openBatch  // by slot
	held  []bool       // by slot: published, not yet released

	batches, samples int
	waitNS           int64

	todo []epoch.Item // release's scratch
	ts   []target

	waitCounter, batchCounter prometheus.Counter // nil without metrics
}

// openBatch is a batch being filled in a slot.
type openBatch struct {
	slot, index                int
	target, reserved, complete int
	holes                      []bool
}

// NewAssembler prepares the ranks' feeds; first[lr] is the batch each rank
// starts at.
func NewAssembler(e Epoch, m *Metrics, conns []*Conn, strict bool, batch, queue, rows, nb int, first []int, positions int) *Assembler {
	a := &Assembler{e: e, m: m, strict: strict, batch: batch, sig: make(chan struct{}), done: make(chan struct{})}
	for lr, c := range conns {
		rf := &rankFeed{c: c, local: lr, rows: rows, next: first[lr], end: nb,
			state: make([]openBatch, c.ring.Slots), held: make([]bool, c.ring.Slots),
			open: make([]*openBatch, 0, c.ring.Slots)}
		for s := c.ring.Slots - 1; s >= 0; s-- {
			rf.free = append(rf.free, s)
			rf.state[s].holes = make([]bool, batch)
		}
		a.pending += nb - first[lr]
		if m != nil {
			rank := strconv.Itoa(c.hello.Rank)
			rf.waitCounter, rf.batchCounter = m.Wait.WithLabelValues(rank), m.Batches.WithLabelValues(rank)
		}
		a.ranks = append(a.ranks, rf)
	}
	if strict {
		a.parked = map[int]epoch.Item{}
		a.placed = make([]bool, positions)
	} else {
		a.fifo = make([]epoch.Item, max(queue*batch, 1))
	}
	a.mu.Lock()
	for _, rf := range a.ranks {
		a.openLocked(rf)
	}
	a.checkDoneLocked()
	a.mu.Unlock()
	return a
}

// FirstBatch is when the first batch was published to a rank (zero: none
// yet).
func (a *Assembler) FirstBatch() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.first
}

func (a *Assembler) has(tc *Conn) bool {
	for _, rf := range a.ranks {
		if rf.c == tc {
			return true
		}
	}
	return false
}

func (a *Assembler) broadcastLocked() {
	close(a.sig)
	a.sig = make(chan struct{})
}

// Abort fails the epoch: place, release and wait return err, and the
// ranks get an ERROR frame with code.
func (a *Assembler) Abort(err error, code string) {
	a.mu.Lock()
	if a.err == nil {
		a.err, a.errCode = err, code
	}
	a.broadcastLocked()
	a.wakeLocked()
	a.mu.Unlock()
}

// Wait returns when every rank released its last batch of the epoch.
func (a *Assembler) Wait(ctx context.Context) error {
	for {
		a.mu.Lock()
		err, sig := a.err, a.sig
		a.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case <-a.done:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-sig:
		}
	}
}

// target is where a placed sample goes.
type target struct {
	rf  *rankFeed
	ob  *openBatch
	row int
}

// Waiter is one placing goroutine's wake-up channel, reused so that
// waiting for room allocates nothing.
type Waiter chan struct{}

func NewWaiter() Waiter { return make(Waiter, 1) }

// wakeLocked wakes every waiting placer (they re-check).
func (a *Assembler) wakeLocked() {
	for _, w := range a.waiters {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	a.waiters = a.waiters[:0]
}

// Place hands a finished (or failed) sample to a rank. It copies the
// sample into its row outside the lock, then publishes what is complete.
// When the shared queue is full it waits on w, the caller's own waiter.
func (a *Assembler) Place(ctx context.Context, it epoch.Item, w Waiter) error {
	a.mu.Lock()
	for {
		if a.err != nil {
			a.mu.Unlock()
			return a.err
		}
		if t, ok := a.targetLocked(it); ok {
			a.mu.Unlock()
			return a.fill(t, it)
		}
		if a.strict {
			a.parked[it.Pos] = it
			a.mu.Unlock()
			return nil
		}
		if a.fifoLen < len(a.fifo) {
			a.fifo[(a.fifoHead+a.fifoLen)%len(a.fifo)] = it
			a.fifoLen++
			a.mu.Unlock()
			return nil
		}
		a.waiters = append(a.waiters, w)
		a.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-w:
		}
		a.mu.Lock()
		if i := slices.Index(a.waiters, w); i >= 0 {
			a.waiters = slices.Delete(a.waiters, i, i+1)
		}
		if ctx.Err() != nil {
			a.mu.Unlock()
			return ctx.Err()
		}
	}
}

// targetLocked reserves it's row, if one is open for it.
func (a *Assembler) targetLocked(it epoch.Item) (target, bool) {
	if a.strict {
		rf := a.ranks[it.Rank]
		b := int(it.J) / a.batch
		for _, ob := range rf.open {
			if ob.index == b {
				ob.reserved++
				a.markPlacedLocked(it.Pos)
				return target{rf, ob, int(it.J) % a.batch}, true
			}
		}
		return target{}, false
	}
	// A batch already being filled first, so batches complete quickly.
	n := len(a.ranks)
	for i := range n {
		rf := a.ranks[(a.rr+i)%n]
		if k := len(rf.open); k > 0 {
			if ob := rf.open[k-1]; ob.reserved < ob.target {
				ob.reserved++
				return target{rf, ob, ob.reserved - 1}, true
			}
		}
	}
	for i := range n {
		rf := a.ranks[(a.rr+i)%n]
		if ob := a.openLocked(rf); ob != nil {
			a.rr = (a.rr + i + 1) % n
			ob.reserved++
			return target{rf, ob, 0}, true
		}
	}
	return target{}, false
}

// openLocked opens rf's next batch in a free slot: in strict order every
// batch it can, in completion order one when none is being filled. It
// returns the batch opened last, or nil.
func (a *Assembler) openLocked(rf *rankFeed) *openBatch {
	var last *openBatch
	for len(rf.free) > 0 && rf.next < rf.end {
		if !a.strict {
			if k := len(rf.open); k > 0 && rf.open[k-1].reserved < rf.open[k-1].target {
				break
			}
		}
		s := rf.free[len(rf.free)-1]
		rf.free = rf.free[:len(rf.free)-1]
		ob := &rf.state[s]
		ob.slot, ob.index, ob.reserved, ob.complete = s, rf.next, 0, 0
		ob.target = min(a.batch, rf.rows-rf.next*a.batch)
		clear(ob.holes)
		rf.next++
		rf.open = append(rf.open, ob)
		last = ob
		if !a.strict {
			break
		}
	}
	return last
}

// markPlacedLocked moves the strict-order gate past placed positions.
func (a *Assembler) markPlacedLocked(pos int) {
	a.placed[pos] = true
	moved := false
	for a.unplaced < len(a.placed) && a.placed[a.unplaced] {
		a.unplaced++
		moved = true
	}
	if moved {
		a.e.Delivered(a.unplaced)
	}
}

// fill copies it into its row (a failed sample leaves a hole) and
// completes the row.
func (a *Assembler) fill(t target, it epoch.Item) error {
	r := t.rf.c.ring
	if it.Failed {
		t.ob.holes[t.row] = true
	} else {
		src, err := rowBytes(it)
		if err == nil && len(src) != r.Geometry.RowBytes {
			err = fmt.Errorf("%w: epoch %d: sample %d gives a row of %d bytes, the ring's rows hold %d (every sample must have the shape %v)",
				ErrTrainer, a.e.Num(), it.Sample, len(src), r.Geometry.RowBytes, r.Geometry.Shape)
		}
		if err != nil {
			a.Abort(err, handoff.CodeFailed)
			return err
		}
		if !r.With(func() {
			copy(r.Row(t.ob.slot, t.row), src)
			r.SetMeta(t.ob.slot, t.row, int64(it.Label), it.Sample, it.GPos)
		}) {
			return a.ringClosed(t.rf)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t.ob.complete++
	if !it.Failed {
		a.e.Placed(it.Split, it.Wire)
	}
	return a.publishLocked(t.rf)
}

// rowBytes is a finished sample's row: the uint8 image or the float32
// tensor's bytes.
func rowBytes(it epoch.Item) ([]byte, error) {
	switch {
	case it.Image != nil:
		return it.Image.Pix, nil
	case it.Tensor != nil:
		d := it.Tensor.Data
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(d))), 4*len(d)), nil
	}
	return nil, fmt.Errorf("%w: sample %d has no output", ErrTrainer, it.Sample)
}

// publishLocked sends READY for rf's complete batches in index order, and
// END after its last.
func (a *Assembler) publishLocked(rf *rankFeed) error {
	for len(rf.open) > 0 && rf.open[0].complete == rf.open[0].target {
		ob := rf.open[0]
		copy(rf.open, rf.open[1:])
		rf.open = rf.open[:len(rf.open)-1]
		r := rf.c.ring
		var rows int
		var err error
		if !r.With(func() {
			rows = r.Compact(ob.slot, ob.holes[:ob.target])
			r.WriteHeader(ob.slot, rows, a.e.Num(), uint64(ob.index))
			if a.e.Hashed() {
				err = a.report(r, ob.slot, rows)
			}
		}) {
			return a.failLocked(a.ringClosedErr(rf))
		}
		if err != nil {
			return a.failLocked(fmt.Errorf("computeagent: samples out: %w", err))
		}
		rf.held[ob.slot] = true
		if a.first.IsZero() {
			a.first = time.Now()
		}
		rf.batches++
		rf.samples += rows
		if a.m != nil {
			a.m.Samples.Add(float64(rows))
			rf.batchCounter.Inc()
		}
		if err := rf.c.sendReady(ob.slot, rows, a.e.Num(), uint64(ob.index)); err != nil {
			return a.failLocked(fmt.Errorf("%w: rank %d: sending READY: %v", ErrTrainer, rf.c.hello.Rank, err))
		}
		if ob.index == rf.end-1 {
			if err := rf.c.send(handoff.JSONFrame(handoff.FrameEnd, handoff.EndMsg{Epoch: a.e.Num(), Batches: rf.end, Samples: rf.samples})); err != nil {
				return a.failLocked(fmt.Errorf("%w: rank %d: sending END: %v", ErrTrainer, rf.c.hello.Rank, err))
			}
		}
	}
	return nil
}

// report journals a published batch's rows and calls OnSample for them.
func (a *Assembler) report(r *handoff.Ring, slot, rows int) error {
	ids, shas := make([]uint64, rows), make([][32]byte, rows)
	for j := range rows {
		s := r.Slot(slot)
		ids[j] = binary.LittleEndian.Uint64(s[r.Geometry.IDsOff+8*j:])
		shas[j] = sha256.Sum256(r.Row(slot, j))
	}
	return a.e.Consumed(ids, shas)
}

// ringClosedErr is the error of a row or batch of rf's whose ring was
// closed under the epoch (its rank disconnected).
func (a *Assembler) ringClosedErr(rf *rankFeed) error {
	return fmt.Errorf("%w: rank %d disconnected during the epoch", ErrTrainer, rf.c.hello.Rank)
}

// ringClosed fails the epoch for a row whose ring was closed.
func (a *Assembler) ringClosed(rf *rankFeed) error {
	err := a.ringClosedErr(rf)
	a.Abort(err, handoff.CodePeerLost)
	return err
}

func (a *Assembler) failLocked(err error) error {
	if a.err == nil {
		a.err, a.errCode = err, handoff.CodeFailed
	}
	a.broadcastLocked()
	a.wakeLocked()
	return err
}

// Release returns a published slot of tc's and fills it again from the
// parked or queued samples.
func (a *Assembler) Release(tc *Conn, slot int, waitNS int64) error {
	a.mu.Lock()
	var rf *rankFeed
	for _, f := range a.ranks {
		if f.c == tc {
			rf = f
		}
	}
	if slot < 0 || slot >= len(rf.held) || !rf.held[slot] {
		a.mu.Unlock()
		return fmt.Errorf("%w: RELEASE of slot %d, which the trainer does not hold", handoff.ErrFrame, slot)
	}
	rf.held[slot] = false
	rf.free = append(rf.free, slot)
	rf.waitNS += waitNS
	if rf.waitCounter != nil {
		rf.waitCounter.Add(float64(waitNS) / 1e9)
	}
	a.pending--
	a.checkDoneLocked()
	// rf's scratch: only rf's connection goroutine releases rf's slots.
	todo, ts := rf.todo[:0], rf.ts[:0]
	if a.strict {
		a.openLocked(rf)
		for pos, it := range a.parked {
			if it.Rank != int32(rf.local) {
				continue
			}
			if t, ok := a.targetLocked(it); ok {
				delete(a.parked, pos)
				todo, ts = append(todo, it), append(ts, t)
			}
		}
	} else {
		for a.fifoLen > 0 {
			it := a.fifo[a.fifoHead]
			t, ok := a.targetLocked(it)
			if !ok {
				break
			}
			a.fifo[a.fifoHead] = epoch.Item{}
			a.fifoHead = (a.fifoHead + 1) % len(a.fifo)
			a.fifoLen--
			todo, ts = append(todo, it), append(ts, t)
		}
	}
	a.wakeLocked()
	a.mu.Unlock()
	var err error
	for i, it := range todo {
		if err == nil {
			err = a.fill(ts[i], it)
		}
	}
	clear(todo) // drop the finished samples' memory
	rf.todo, rf.ts = todo[:0], ts[:0]
	return err
}

// Queued is the number of finished samples waiting for a slot.
func (a *Assembler) Queued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.fifoLen + len(a.parked)
}

// checkDoneLocked closes done once every batch was released.
func (a *Assembler) checkDoneLocked() {
	if a.pending == 0 {
		select {
		case <-a.done:
		default:
			close(a.done)
		}
	}
}

// Stats are the ranks' account for the report.
func (a *Assembler) Stats() []report.TrainerStats {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]report.TrainerStats, len(a.ranks))
	for i, rf := range a.ranks {
		out[i] = report.TrainerStats{Rank: rf.c.hello.Rank, LocalRank: rf.local, Batches: rf.batches,
			Samples: rf.samples, WaitSeconds: float64(rf.waitNS) / 1e9}
	}
	return out
}
