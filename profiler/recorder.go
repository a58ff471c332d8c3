package profiler

import (
	"cmp"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sophon-dl/sophon/internal/cpuclock"
	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// Stage 2: what one epoch's record says about later epochs.
//
// The planner needs, per sample and split k, the bytes that would cross the
// link and the CPU time of the ops on either side, in every later epoch.
// Random ops redraw each epoch (ops.SeedFor mixes in the epoch), so a record
// is one draw, and the profile predicts later epochs as follows:
//
//   - Sizes after a fixed-shape op do not vary: random_resized_crop 224
//     always gives 224x224x3 bytes, and everything after it (flip, tensor)
//     is fixed too. Decode's size is the JPEG's dimensions, so it does not
//     vary either, nor does the raw size. For the presets every recorded
//     size is therefore exact for every epoch, except encode_jpeg's
//     output (imagenet-train-q95, -q90): a JPEG's bytes follow the crop's
//     content, so the recorded size is one draw, unbiased as a cost is. (A random op whose output
//     size varies would make Bytes one draw; the mean over epochs, see
//     [Merge], is then the estimate.)
//   - Costs of random ops vary: the crop's resampling cost depends on the
//     box it draws, the flip's on whether it mirrors. The first epoch's
//     measurement is the estimate of every later epoch's cost. It is
//     unbiased, because each epoch's box is an independent draw from the
//     same distribution (a fresh seed per epoch), so the recorded cost has
//     the same expectation as any later epoch's. Its variance per sample is
//     large, but the planner sums costs over many samples, where errors
//     average out. [Merge] averages several epochs' records to reduce the
//     per-sample variance where that matters.
//   - Compressed sizes of random outputs vary a little with the crop's
//     content; the same argument applies.
//   - The JPEG-domain cut (ops.SplitCut) covers the epoch's crop box, so
//     its size and the compute side's cost vary with the box's area. One
//     draw would do for sums, but a planner that picks the samples to cut
//     by their recorded size picks those whose recorded box happened to be
//     small (selection bias: in a test, a plan's cut bytes grew 16% from
//     the recorded epoch to the next). The recorded cut is therefore scaled
//     to the expected area of the regions the cut keeps (MeanCutArea, from
//     the image's dimensions alone),
//     and a planner scales it to each epoch's own box (CutAreas.AtEpoch);
//     the bytes per pixel of the cut come from the one cut made. The storage side's cost (the transform reads the whole file)
//     is kept as measured. Whether a file can be cut at all can vary too (a
//     box covering nearly the whole image gives a cut no smaller than the
//     file, which is declined).
//
// CPU time is the thread CPU clock (CLOCK_THREAD_CPUTIME_ID) of the
// recording goroutine, locked to its OS thread for the record, read around
// each op from inside the pipeline's observer: it counts the op's own work
// (cgo decoding included) and not time spent descheduled, so records taken
// on a busy node by several goroutines at once stay comparable. It does not
// count work the Go runtime does on other threads (background GC).
// NB: RunObserved runs ops one by one, while a real run fuses adjacent pairs
// (decode + random_resized_crop, to_tensor + normalize), so a suffix's
// recorded cost is an upper bound on the fused compute-side cost.

// Recorder errors.
var (
	// ErrSampleRange is a sample id outside [0, n).
	ErrSampleRange = errors.New("profiler: sample out of range")
	// ErrDuplicate is a second record of the same sample.
	ErrDuplicate = errors.New("profiler: sample recorded twice")
)

// Recorder collects stage 2's per-sample records for one pipeline and
// dataset during the first epoch. It is safe for concurrent Record calls on
// different samples.
type Recorder struct {
	p           *ops.Pipeline
	fingerprint string
	n           int
	// lim and opTimeout bound Record's runs (see Limit).
	lim       ops.Limits
	opTimeout time.Duration

	mu      sync.Mutex
	samples []SampleProfile // by id; valid where have is set
	have    []bool
	count   int
}

// NewRecorder returns a recorder for the n samples (ids 0..n-1) of the
// dataset with the given fingerprint, run through p.
func NewRecorder(p *ops.Pipeline, fingerprint string, n int) *Recorder {
	n = max(n, 0)
	warmWire()
	return &Recorder{
		p:           p,
		fingerprint: fingerprint,
		n:           n,
		samples:     make([]SampleProfile, n),
		have:        make([]bool, n),
	}
}

// Limit makes Record run each sample under lim, as the agent's own runs
// ([ops.Pipeline.RunLimited]), with the deadline opTimeout after the
// sample's record starts (none when zero): a sample they refuse is not
// recorded, and a cut they decline is recorded without the cut. Call it
// before the first Record. Without it, Record runs unlimited.
func (r *Recorder) Limit(lim ops.Limits, opTimeout time.Duration) {
	r.lim, r.opTimeout = lim, opTimeout
}

// warmWire runs the wire codec once, so its one-time setup (the shared
// zstd encoder and decoder, their buffers) is not charged to the first
// sample recorded.
func warmWire() {
	v := ops.NewImage(64, 64)
	if w, err := wireform.Encode(v, wireform.CodecZstd); err == nil {
		_, _ = wireform.Decode(w, wireform.Limits{})
	}
}

// Record runs the whole pipeline on one sample (raw is its file, key seeds
// the random ops; normally key.Sample == sample) and keeps its raw size,
// every op's output size (the wire payload size, [ops.Value.Size]) and
// thread CPU time, and for every split k the zstd-compressed payload size
// with the CPU time of compressing it ([wireform.Encode]) and decompressing
// it ([wireform.Decode]). Compression runs between ops and is excluded from
// the ops' times. When the pipeline can cut ([ops.Pipeline.CanCut]) it also
// cuts the sample with the same key and keeps the cut's payload size and
// the CPU time of both its sides (see [SampleProfile.CutBytes]). A sample
// the pipeline fails on is not recorded (it stays in [Recorder.Missing])
// and its error is returned; a sample that cannot be cut is recorded
// without the cut.
func (r *Recorder) Record(sample uint64, raw []byte, key ops.Key) error {
	if sample >= uint64(r.n) {
		return fmt.Errorf("%w: %d of %d", ErrSampleRange, sample, r.n)
	}
	lim := r.lim
	if r.opTimeout > 0 {
		lim.Deadline = time.Now().Add(r.opTimeout)
	}
	sp, err := measureSample(r.p, sample, raw, key, lim)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.have[sample] {
		return fmt.Errorf("%w: %d", ErrDuplicate, sample)
	}
	r.samples[sample] = sp
	r.have[sample] = true
	r.count++
	return nil
}

func measureSample(p *ops.Pipeline, sample uint64, raw []byte, key ops.Key, lim ops.Limits) (SampleProfile, error) {
	n := p.Len()
	sp := SampleProfile{
		ID:           sample,
		Raw:          int64(len(raw)),
		Bytes:        make([]int64, n+1),
		Compressed:   make([]int64, n+1),
		CompressNS:   make([]int64, n+1),
		DecompressNS: make([]int64, n+1),
		OpNS:         make([]int64, n),
	}
	// The thread CPU clock needs the goroutine to stay on one thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	in := ops.Encoded(raw)
	sp.Bytes[0] = int64(len(raw))
	if err := measureWire(in, &sp, 0); err != nil {
		return sp, err
	}
	var werr error
	last := int64(cpuclock.Thread())
	_, err := p.RunObservedLimited(key, in, 0, n, func(j int, out ops.Value, _ time.Duration) {
		sp.OpNS[j] = max(int64(cpuclock.Thread())-last, 0)
		sp.Bytes[j+1] = int64(out.Size())
		if werr == nil {
			werr = measureWire(out, &sp, j+1)
		}
		last = int64(cpuclock.Thread())
	}, lim)
	if err != nil {
		return sp, err
	}
	if werr != nil {
		return sp, werr
	}
	if p.CanCut() {
		measureCut(p, key, in, &sp, lim)
	}
	return sp, nil
}

// measureCut fills the cut split's size and costs, or leaves them zero when
// the sample cannot be cut. Any failure counts as that: ErrCannotCut is
// the expected one, and a cut that fails otherwise on a sample the whole
// pipeline ran on is one the storage agent would not send either. The
// caller holds the goroutine on its OS thread.
func measureCut(p *ops.Pipeline, key ops.Key, raw ops.Encoded, sp *SampleProfile, lim ops.Limits) {
	t0 := int64(cpuclock.Thread())
	cut, err := p.Cut(key, raw, lim)
	t1 := int64(cpuclock.Thread())
	if err != nil || cut == nil {
		return
	}
	t2 := int64(cpuclock.Thread())
	_, err = p.RunLimited(key, cut, ops.SplitCut, 2, lim)
	t3 := int64(cpuclock.Thread())
	if err != nil {
		return
	}
	scale := cutScale(p, key, cut, raw)
	sp.CutBytes = max(1, min(int64(float64(cut.Size())*scale), int64(len(raw))))
	sp.CutNS = max(t1-t0, 0)
	sp.CutFinishNS = max(int64(float64(t3-t2)*scale), 0)
}

// cutScale is the mean area of the regions the cut keeps (MeanCutArea)
// over the area of key's own, both rounded to the iMCUs of the file raw's
// header, or 1 when either is unknown.
func cutScale(p *ops.Pipeline, key ops.Key, cut *ops.CutJPEG, raw []byte) float64 {
	im := CutImage{W: cut.W, H: cut.H}
	if h, err := jpeg.ReadHeader(raw); err == nil {
		im = CutImageOf(cut.W, cut.H, h.MCUW, h.MCUH, h.Components)
	}
	mean, err := MeanCutArea(p, im)
	if err != nil {
		return 1
	}
	f, ok := cutFactor(p, im, key, mean)
	if !ok || !(f > 0) {
		return 1
	}
	return 1 / f
}

// measureWire fills split k's compressed size and codec costs for v.
func measureWire(v ops.Value, sp *SampleProfile, k int) error {
	t0 := int64(cpuclock.Thread())
	w, err := wireform.Encode(v, wireform.CodecZstd)
	t1 := int64(cpuclock.Thread())
	if err != nil {
		return fmt.Errorf("profiler: sample %d split %d: %w", sp.ID, k, err)
	}
	lim := wireform.Limits{MaxPayload: max(v.Size(), wireform.DefaultMaxPayload)}
	t2 := int64(cpuclock.Thread())
	_, err = wireform.Decode(w, lim)
	t3 := int64(cpuclock.Thread())
	if err != nil {
		return fmt.Errorf("profiler: sample %d split %d: %w", sp.ID, k, err)
	}
	info, err := wireform.ReadHeader(w)
	if err != nil {
		return fmt.Errorf("profiler: sample %d split %d: %w", sp.ID, k, err)
	}
	sp.Compressed[k] = min(int64(info.StoredLen), sp.Bytes[k])
	sp.CompressNS[k] = max(t1-t0, 0)
	sp.DecompressNS[k] = max(t3-t2, 0)
	return nil
}

// Recorded is the number of samples recorded so far.
func (r *Recorder) Recorded() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Missing lists, in order, the ids in [0, n) not recorded (yet, or because
// the pipeline failed on them). The planner should treat them as No-Off:
// the raw file crosses the link, as it must for a sample no op can process.
func (r *Recorder) Missing() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []uint64
	for i, ok := range r.have {
		if !ok {
			out = append(out, uint64(i))
		}
	}
	return out
}

// Profile returns the records so far: the recorded samples only, sorted by
// id (see [Recorder.Missing] for the others). The sample slices are shared
// with the recorder, which never changes them once recorded; callers must
// not modify them either.
func (r *Recorder) Profile() *Profile {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := newProfile(r.p, r.fingerprint)
	p.Samples = make([]SampleProfile, 0, r.count)
	for i, ok := range r.have {
		if ok {
			p.Samples = append(p.Samples, r.samples[i])
		}
	}
	return p
}

func newProfile(p *ops.Pipeline, fingerprint string) *Profile {
	names := make([]string, p.Len())
	for j := range names {
		names[j] = p.Op(j).Name()
	}
	k, _ := p.CropSplit()
	return &Profile{Version: ProfileVersion, Fingerprint: fingerprint, Pipeline: p.ID(), Ops: names, CropSplit: k}
}

// FromTraces builds a profile from [Trace] results. Trace measures wall
// time, not thread CPU time, and does not time compression, so OpNS holds
// the wall durations and CompressNS and DecompressNS are left empty;
// Compressed is filled from the traces (equal to Bytes for codec none).
// Samples are sorted by id; two traces of one sample are an error.
func FromTraces(p *ops.Pipeline, fingerprint string, traces []SampleTrace) (*Profile, error) {
	out := newProfile(p, fingerprint)
	n := p.Len()
	out.Samples = make([]SampleProfile, 0, len(traces))
	for _, t := range traces {
		if len(t.Ops) != n {
			return nil, fmt.Errorf("%w: sample %d has %d ops, pipeline %d", ErrProfileInvalid, t.Sample, len(t.Ops), n)
		}
		sp := SampleProfile{
			ID:         t.Sample,
			Raw:        int64(t.Raw),
			Bytes:      make([]int64, n+1),
			Compressed: make([]int64, n+1),
			OpNS:       make([]int64, n),
		}
		sp.Bytes[0], sp.Compressed[0] = sp.Raw, sp.Raw
		for j, c := range t.Ops {
			sp.Bytes[j+1] = int64(c.Bytes)
			sp.Compressed[j+1] = min(int64(c.Compressed), int64(c.Bytes))
			sp.OpNS[j] = int64(c.Dur)
		}
		out.Samples = append(out.Samples, sp)
	}
	slices.SortFunc(out.Samples, func(a, b SampleProfile) int { return cmp.Compare(a.ID, b.ID) })
	for i := 1; i < len(out.Samples); i++ {
		if out.Samples[i].ID == out.Samples[i-1].ID {
			return nil, fmt.Errorf("%w: %d", ErrDuplicate, out.Samples[i].ID)
		}
	}
	return out, nil
}
