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

	"github.com/sophon-dl/sophon/compute-agent/handoff"
	"github.com/sophon-dl/sophon/compute-agent/report"
	"github.com/sophon-dl/sophon/compute-agent/schedule"
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
// Strict order: each rank's rows are its order's samples in index order:
// the rank's k-th good sample goes to row k % B of its batch k / B. A
// batch opens when the rank has a free slot and every earlier batch has
// opened; samples that cannot take their row yet (an earlier index is
// still out, or their batch is not open) are parked, which the schedule's
// gate bounds.
//
// A failed sample (--on-error skip) takes no row: the next samples fill
// its place (in strict order the rank's following indices shift up by
// one), so a failure never shortens a batch in the middle of the epoch.
// The rows the failures leave free come at the end of the rank's epoch,
// and are filled with repeats of the rank's first rows, as
// DistributedSampler pads a shard with repeats of its start (Layout.Repeat);
// a repeat row carries the global position of a failed sample, so a resume
// bitmap still holds one position per row. Every batch then has the rows it
// has without failures: B, and the epoch's last m - (nb-1)*B. Only a rank
// with no good row to repeat (in completion order: no local rank with one)
// publishes batches with fewer rows, down to 0; the batch still counts, so
// every rank gets nb batches.
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
	fifo     []schedule.Item // ring buffer of fifoCap
	fifoHead int
	fifoLen  int
	placed   []bool // strict: position has its row
	unplaced int    // strict: first position without a row
	// Completion order: the positions not yet handed to Place, and the
	// global positions of the failed ones (the repeats carry them, in
	// this order; used counts those taken).
	unresolved int
	failed     []uint64
	used       int
	rr         int
	pending    int      // batches not yet released, all ranks
	waiters    []Waiter // placers waiting for room in the queue
	done       chan struct{}
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

	// Strict order: the next index of the rank's order to resolve, the
	// rank's next row, the samples parked by index, and the global
	// positions of its failed samples in index order.
	nextJ, row int
	parked     map[int32]schedule.Item
	failed     []uint64

	// The rank's first rows, kept to repeat at its epoch's end: keep rows
	// of rowBytes in kept, their label, id and position in keptMeta;
	// keptN are reserved, keptDone copied; repeats counts those written.
	kept            []byte
	keptMeta        []keptRow
	keptN, keptDone int
	repeats         int

	batches, samples int
	waitNS           int64

	todo []schedule.Item // release's scratch
	ts   []target

	waitCounter, batchCounter prometheus.Counter // nil without metrics
}

// keptRow is a kept row's metadata.
type keptRow struct {
	label        int64
	sample, gpos uint64
}

// openBatch is a batch being filled in a slot: rows 0..reserved-1 are
// taken by samples, complete of them copied in.
type openBatch struct {
	slot, index                int
	target, reserved, complete int
}

// Layout is the epoch an Assembler fills.
type Layout struct {
	Strict bool
	// Batch is the batch size; Queue bounds the samples waiting for a
	// slot in completion order (Queue*Batch of them).
	Batch, Queue int
	// Rows and Batches are per rank per epoch; First[lr] is the batch
	// local rank lr starts at.
	Rows, Batches int
	First         []int
	// Positions counts the node epoch's positions.
	Positions int
	// Repeat keeps each rank's first rows (at most Batch, and
	// repeatBytes of them) to fill the rows failed samples leave free at
	// the end of its epoch. Without it those batches are published short.
	Repeat bool
}

// repeatBytes bounds the rows a rank keeps to repeat.
const repeatBytes = 32 << 20

// NewAssembler prepares the ranks' feeds for the epoch l lays out.
func NewAssembler(e Epoch, m *Metrics, conns []*Conn, l Layout) *Assembler {
	a := &Assembler{e: e, m: m, strict: l.Strict, batch: l.Batch, sig: make(chan struct{}), done: make(chan struct{}),
		unresolved: l.Positions}
	for lr, c := range conns {
		first := l.First[lr]
		rf := &rankFeed{c: c, local: lr, rows: l.Rows, next: first, end: l.Batches,
			state: make([]openBatch, c.ring.Slots), held: make([]bool, c.ring.Slots),
			open: make([]*openBatch, 0, c.ring.Slots), nextJ: first * l.Batch, row: first * l.Batch}
		for s := c.ring.Slots - 1; s >= 0; s-- {
			rf.free = append(rf.free, s)
		}
		if l.Strict {
			rf.parked = map[int32]schedule.Item{}
		}
		if rb := c.ring.Geometry.RowBytes; l.Repeat && rb > 0 {
			keep := min(l.Batch, max(1, repeatBytes/rb))
			rf.kept, rf.keptMeta = make([]byte, keep*rb), make([]keptRow, keep)
		}
		a.pending += l.Batches - first
		if m != nil {
			rank := strconv.Itoa(c.hello.Rank)
			rf.waitCounter, rf.batchCounter = m.Wait.WithLabelValues(rank), m.Batches.WithLabelValues(rank)
		}
		a.ranks = append(a.ranks, rf)
	}
	if l.Strict {
		a.placed = make([]bool, l.Positions)
	} else {
		a.fifo = make([]schedule.Item, max(l.Queue*l.Batch, 1))
	}
	a.mu.Lock()
	for _, rf := range a.ranks {
		a.openLocked(rf, false)
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
	rf   *rankFeed
	ob   *openBatch
	row  int
	keep int // its place among rf's kept rows; -1: none
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
func (a *Assembler) Place(ctx context.Context, it schedule.Item, w Waiter) error {
	if a.strict {
		return a.placeStrict(it)
	}
	a.mu.Lock()
	if it.Failed {
		a.unresolved--
		a.failed = append(a.failed, it.GPos)
		err := a.err
		if err == nil {
			err = a.settleLocked(nil)
		}
		a.mu.Unlock()
		return err
	}
	for {
		if a.err != nil {
			a.mu.Unlock()
			return a.err
		}
		// NB: a sample counts as resolved only once it holds a row or a
		// place in the queue: one waiting here keeps the ranks from
		// taking repeats for the rows it will fill.
		if t, ok := a.targetLocked(); ok {
			a.unresolved--
			a.mu.Unlock()
			return a.fill(t, it)
		}
		if a.fifoLen < len(a.fifo) {
			a.unresolved--
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

// placeStrict parks it under its rank's index and places what of the
// rank's parked samples can take their rows now.
func (a *Assembler) placeStrict(it schedule.Item) error {
	rf := a.ranks[it.Rank]
	a.mu.Lock()
	if a.err != nil {
		a.mu.Unlock()
		return a.err
	}
	rf.parked[it.J] = it
	a.mu.Unlock()
	return a.drainStrict(rf)
}

// drainStrict resolves rf's parked samples in index order: a failed one
// is passed over, a good one takes the rank's next row while its batch is
// open, and is copied in outside the lock.
func (a *Assembler) drainStrict(rf *rankFeed) error {
	for {
		a.mu.Lock()
		if a.err != nil {
			a.mu.Unlock()
			return a.err
		}
		t, it, ok := a.nextStrictLocked(rf)
		if !ok {
			err := a.settleLocked(rf)
			a.mu.Unlock()
			return err
		}
		a.mu.Unlock()
		if err := a.fill(t, it); err != nil {
			return err
		}
	}
}

// nextStrictLocked resolves rf's parked samples up to the first good one
// that can take its row, and reserves that row.
func (a *Assembler) nextStrictLocked(rf *rankFeed) (target, schedule.Item, bool) {
	for {
		it, ok := rf.parked[int32(rf.nextJ)]
		if !ok {
			return target{}, schedule.Item{}, false
		}
		if it.Failed {
			delete(rf.parked, it.J)
			rf.failed = append(rf.failed, it.GPos)
			rf.nextJ++
			a.markPlacedLocked(it.Pos)
			continue
		}
		b := rf.row / a.batch
		for _, ob := range rf.open {
			if ob.index == b {
				delete(rf.parked, it.J)
				t := a.reserveLocked(rf, ob)
				rf.row++
				rf.nextJ++
				a.markPlacedLocked(it.Pos)
				return t, it, true
			}
		}
		return target{}, schedule.Item{}, false
	}
}

// reserveLocked takes ob's next row, and a place among rf's kept rows
// while there is one.
func (a *Assembler) reserveLocked(rf *rankFeed, ob *openBatch) target {
	t := target{rf: rf, ob: ob, row: ob.reserved, keep: -1}
	ob.reserved++
	if rf.keptN < len(rf.keptMeta) {
		t.keep = rf.keptN
		rf.keptN++
	}
	return t
}

// targetLocked reserves a row for a good sample in completion order, if
// one is open for it.
func (a *Assembler) targetLocked() (target, bool) {
	// A batch already being filled first, so batches complete quickly.
	n := len(a.ranks)
	for i := range n {
		rf := a.ranks[(a.rr+i)%n]
		if k := len(rf.open); k > 0 {
			if ob := rf.open[k-1]; ob.reserved < ob.target {
				return a.reserveLocked(rf, ob), true
			}
		}
	}
	for i := range n {
		rf := a.ranks[(a.rr+i)%n]
		if ob := a.openLocked(rf, false); ob != nil {
			a.rr = (a.rr + i + 1) % n
			return a.reserveLocked(rf, ob), true
		}
	}
	return target{}, false
}

// openLocked opens rf's next batch in a free slot: in strict order (or
// with all) every batch it can, in completion order one when none is being
// filled. It returns the batch opened last, or nil.
func (a *Assembler) openLocked(rf *rankFeed, all bool) *openBatch {
	var last *openBatch
	for len(rf.free) > 0 && rf.next < rf.end {
		if !a.strict && !all {
			if k := len(rf.open); k > 0 && rf.open[k-1].reserved < rf.open[k-1].target {
				break
			}
		}
		s := rf.free[len(rf.free)-1]
		rf.free = rf.free[:len(rf.free)-1]
		ob := &rf.state[s]
		ob.slot, ob.index, ob.reserved, ob.complete = s, rf.next, 0, 0
		ob.target = min(a.batch, rf.rows-rf.next*a.batch)
		rf.next++
		rf.open = append(rf.open, ob)
		last = ob
		if !a.strict && !all {
			break
		}
	}
	return last
}

// exhaustedLocked reports whether no more samples come for rf: in strict
// order every index of its order is resolved, in completion order every
// position of the node's epoch is and none waits in the queue.
func (a *Assembler) exhaustedLocked(rf *rankFeed) bool {
	if a.strict {
		return rf.nextJ >= rf.rows
	}
	return a.unresolved == 0 && a.fifoLen == 0
}

// settleLocked publishes rf's complete batches; once no more samples
// come, it opens every batch there is a slot for and publishes them with
// repeats in their free rows (in completion order for every rank; rf nil:
// only then).
func (a *Assembler) settleLocked(rf *rankFeed) error {
	if rf != nil && !a.exhaustedLocked(rf) {
		return a.publishLocked(rf)
	}
	for _, f := range a.ranks {
		if (a.strict && f != rf) || !a.exhaustedLocked(f) {
			continue
		}
		a.openLocked(f, true)
		if err := a.publishLocked(f); err != nil {
			return err
		}
	}
	return nil
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

// fill copies it into its row, and into the rank's kept rows when the row
// is one of its first, and completes the row.
func (a *Assembler) fill(t target, it schedule.Item) error {
	r := t.rf.c.ring
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
	if t.keep >= 0 {
		copy(t.rf.kept[t.keep*len(src):], src)
		t.rf.keptMeta[t.keep] = keptRow{label: int64(it.Label), sample: it.Sample, gpos: it.GPos}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t.ob.complete++
	if t.keep >= 0 {
		t.rf.keptDone++
	}
	a.e.Placed(it.Split, it.Wire)
	return a.settleLocked(t.rf)
}

// rowBytes is a finished sample's row: the uint8 image or the float32
// tensor's bytes.
func rowBytes(it schedule.Item) ([]byte, error) {
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
// END after its last. Once no more samples come for rf, a batch is
// complete when its reserved rows are in; repeats fill the rest.
func (a *Assembler) publishLocked(rf *rankFeed) error {
	for len(rf.open) > 0 {
		ob := rf.open[0]
		if ob.complete < ob.reserved || (ob.reserved < ob.target && !a.exhaustedLocked(rf)) {
			return nil
		}
		src, wait := a.repeatSourceLocked(rf)
		if ob.reserved < ob.target && wait {
			return nil // the copy's fill settles again
		}
		copy(rf.open, rf.open[1:])
		rf.open = rf.open[:len(rf.open)-1]
		r := rf.c.ring
		var rows int
		var err error
		if !r.With(func() {
			rows = a.repeatLocked(rf, src, ob)
			r.WriteHeader(ob.slot, rows, a.e.Num(), uint64(ob.index))
			if a.e.Hashed() {
				err = a.report(r, ob.slot, rows)
			}
		}) {
			return a.failLocked(a.ringClosedErr(rf))
		}
		if err != nil {
			return a.failLocked(fmt.Errorf("trainer: samples out: %w", err))
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

// repeatSourceLocked is the rank whose kept rows fill rf's free rows: rf
// itself, or in completion order, when rf has none, another local rank
// whose kept rows are all copied (wait: one is still being copied). Nil
// when there is none.
func (a *Assembler) repeatSourceLocked(rf *rankFeed) (src *rankFeed, wait bool) {
	if rf.keptN > 0 || a.strict {
		return rf, false
	}
	for _, f := range a.ranks {
		switch {
		case f.keptN > 0 && f.keptDone == f.keptN:
			return f, false
		case f.keptN > 0:
			wait = true
		}
	}
	return nil, wait
}

// repeatLocked fills ob's free rows (the rows failed samples left at the
// end of rf's epoch) with repeats of src's kept rows, in order and round
// and round, and returns the batch's rows. Each repeat carries the global
// position of a failed sample (rf's own in strict order, in index order).
// The ring's lock is held.
func (a *Assembler) repeatLocked(rf, src *rankFeed, ob *openBatch) int {
	if ob.reserved == ob.target || src == nil || src.keptN == 0 {
		return ob.reserved
	}
	r := rf.c.ring
	rb := r.Geometry.RowBytes
	for j := ob.reserved; j < ob.target; j++ {
		k := rf.repeats % src.keptN
		m := src.keptMeta[k]
		pos := m.gpos
		if a.strict && rf.repeats < len(rf.failed) {
			pos = rf.failed[rf.repeats]
		} else if !a.strict && a.used < len(a.failed) {
			pos = a.failed[a.used]
			a.used++
		}
		copy(r.Row(ob.slot, j), src.kept[k*rb:(k+1)*rb])
		r.SetMeta(ob.slot, j, m.label, m.sample, pos)
		rf.repeats++
	}
	return ob.target
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
	if a.strict {
		a.openLocked(rf, false)
		a.wakeLocked()
		a.mu.Unlock()
		return a.drainStrict(rf)
	}
	// rf's scratch: only rf's connection goroutine releases rf's slots.
	todo, ts := rf.todo[:0], rf.ts[:0]
	for a.fifoLen > 0 {
		t, ok := a.targetLocked()
		if !ok {
			break
		}
		it := a.fifo[a.fifoHead]
		a.fifo[a.fifoHead] = schedule.Item{}
		a.fifoHead = (a.fifoHead + 1) % len(a.fifo)
		a.fifoLen--
		todo, ts = append(todo, it), append(ts, t)
	}
	err := a.settleLocked(rf)
	a.wakeLocked()
	a.mu.Unlock()
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
	n := a.fifoLen
	for _, rf := range a.ranks {
		n += len(rf.parked)
	}
	return n
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
			Samples: rf.samples, Repeated: rf.repeats, WaitSeconds: float64(rf.waitNS) / 1e9}
	}
	return out
}
