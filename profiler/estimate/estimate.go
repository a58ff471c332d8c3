// Package estimate builds a stage 2 profile (profiler.Profile, the type
// the policies plan from) from what is known about each sample before any
// op runs (its file size, its JPEG header and its id) and from a handful
// of samples actually run, so that a plan exists before the first epoch
// has been recorded.
//
// # The model
//
// Sizes follow from shapes and are exact where the shapes are: the raw
// size is the file's, decode gives W*H*3 bytes (grey is replicated to
// three channels), a crop or resize gives its output size, flip keeps the
// size, to_tensor and normalize give 4 bytes per value. Random ops are
// replayed, not run: the crop box and the flip's coin are pure functions
// of (seed, epoch, sample, op) (ops.SeedFor, ops.SampleRRCBox), so the
// estimate uses the same box and coin the run with that seed and epoch
// draws.
//
// Costs and compressed sizes are fitted on the calibration samples, which
// run through a profiler.Recorder exactly as stage 2 runs every sample.
// Each is a least-squares fit A + B1*x1 + B2*x2 + ... on a few features of
// the sample, every term non-negative (a feature whose term would be
// negative, or that the calibration cannot tell from the others, is
// dropped):
//
//   - decode: the image's pixels and the file's bytes, fitted per class
//     (baseline or progressive, colour or grey) where the calibration holds
//     at least minClass samples of the class, otherwise over all;
//   - encode_jpeg (a pipeline that compresses its crop): its output's
//     bytes, the one size not known from shapes, A + B*pixels*bpp +
//     C*pixels where bpp is the file's bytes per pixel (the crop is
//     resampled, so the file's bytes in the area it shows predict it
//     worse: TestEncodeSizeFeatures); its cost on the same features. Per
//     sample the fit is off as much as the zstd ratios' are, in sum far
//     less (docs/policy.md, "The compressed crop"). The decode after it keeps the encode's dimensions (W*H*3 bytes, exact)
//     and is priced on the JPEG's bytes (the fitted ones, the recorded
//     ones in calibration) and its pixels. A JPEG does not compress: the
//     zstd ratio at the split after it fits to about 1;
//   - random_resized_crop: the box's pixels and rows (the resampler's two
//     passes); resize, its input and output pixels; the flip, the pixels
//     it mirrors (zero when its coin says no flip); center_crop, to_tensor
//     and normalize, their output pixels;
//   - the zstd ratio at every split (Compressed/Bytes), at most 1: the
//     file's bytes per pixel and the value's "detail", the file's bytes
//     over the source area the value shows, per pixel of the value (a
//     small box enlarged to 224x224 compresses better than a large one
//     shrunk to it);
//   - compressing and decompressing a split's payload: the bytes zstd
//     saves and the payload's bytes (zstd gives up quickly on a payload it
//     cannot shrink);
//   - the JPEG-domain cut (ops.SplitCut) of the epoch's box holds about the
//     file's bytes in the cut region (ops.Pipeline.CutRegion, rounded out to
//     iMCUs: the header's MCU size, else 16x16, 8x8 for grey),
//     A + B*raw*region/image. As the recorder does, the size and the
//     compute side's cost are scaled to the mean region over
//     the crop's boxes (profiler.MeanCutArea), and a cut no smaller than the file is declined as
//     ops declines it. The storage side's cost: the file's bytes (the
//     transform reads every coefficient), the image's pixels (its
//     coefficient buffers), the region's bytes and pixels; the compute
//     side's: the region's pixels and bytes and the box's rows. A
//     decode class none of whose calibration samples could be cut is
//     estimated without the cut.
//
// Assumptions: CPU cost is close to linear in the pixels and bytes an op
// touches, on the machine that calibrated (costs are that machine's thread
// CPU time, like a recorded profile's, and move with its load as a
// recorded profile's do); the calibration samples represent the dataset
// (Pick spreads them over its image sizes); compressibility and the cut's
// bytes follow the file's bytes per pixel (per sample, both are off by
// 15-35% in the mean square: content varies within an image, and what
// matters to a plan is their sum over many samples). The calibration
// samples themselves are not estimated: their recorded entries are used as
// they are. An op the package cannot size (not one of ops' built-in ops)
// is an error, since its output size would be a guess.
package estimate

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/profiler"
)

// Errors.
var (
	// ErrUnsupported is a pipeline with an op whose output size the
	// package cannot derive from shapes.
	ErrUnsupported = errors.New("estimate: op not supported")
	// ErrSample is a sample whose header is unusable (no pixels).
	ErrSample = errors.New("estimate: bad sample")
	// ErrCalibration is a calibration that recorded no sample.
	ErrCalibration = errors.New("estimate: no calibration sample recorded")
)

// Sample is what a catalog knows of one sample without running any op.
type Sample struct {
	// ID is the sample's id: the crop box is drawn for it.
	ID uint64
	// Raw is the file's size in bytes.
	Raw int64
	// W, H, Components and Progressive are the JPEG header's.
	W, H        int
	Components  int
	Progressive bool
	// MCUW and MCUH are its iMCU's size in pixels (jpeg.Header.MCUW,
	// MCUH), to which the cut rounds its region; zero means unknown:
	// 16x16 (4:2:0, the usual) for colour, 8x8 for grey.
	MCUW, MCUH int
}

// Header is the JPEG header the sample's fields describe
// (jpeg.HeaderOf), for checking it against the limits of a run.
func (s Sample) Header() jpeg.Header {
	return jpeg.HeaderOf(s.W, s.H, s.Components, s.Progressive, s.MCUW, s.MCUH)
}

// FromHeader is the sample with this id, raw size and header.
func FromHeader(id uint64, raw int64, h jpeg.Header) Sample {
	return Sample{ID: id, Raw: raw, W: h.W, H: h.H, Components: h.Components, Progressive: h.Progressive, MCUW: h.MCUW, MCUH: h.MCUH}
}

// FromSummary is the sample with this id and raw size whose header the
// catalog summarised (a storage agent's jpeg.Summary, as
// catalog.Catalog.Header gives it); ok is false when the summary is
// unknown.
func FromSummary(id uint64, raw int64, s jpeg.Summary) (Sample, bool) {
	if !s.Known() {
		return Sample{}, false
	}
	w, h := s.MCU()
	return Sample{ID: id, Raw: raw, W: s.Width(), H: s.Height(), Components: s.Components(), Progressive: s.Progressive(), MCUW: w, MCUH: h}, true
}

// minClass is the fewest calibration samples of a decode class fitted on
// their own.
const minClass = 3

// Model is a calibrated estimator for one pipeline and one (seed, epoch):
// the fits the package comment describes, and the calibration samples'
// own records.
type Model struct {
	p           *ops.Pipeline
	seed, epoch uint64
	// lim are the limits the runs the model prices apply (Calibrate's).
	lim ops.Limits

	// op[j] is op j's cost fit; decode[class] overrides op 0's for a
	// decode class with its own fit.
	op     []linear
	decode map[int]linear
	// size[j] is op j's output size fit where its size is not exact
	// (encode_jpeg).
	size []linear
	// ratio[k], comp[k], decomp[k]: split k's zstd ratio, compress and
	// decompress cost.
	ratio, comp, decomp []linear
	// cut fits; cutClass says which decode classes cut.
	cutBytes, cutNS, cutFinish linear
	cutClass                   map[int]bool

	// recorded are the calibration samples' records, by id.
	recorded map[uint64]profiler.SampleProfile
}

// Calibrated is a calibration sample: its catalog entry and its file.
type Calibrated struct {
	Sample
	Data []byte
}

// Calibrate runs the calibration samples through p with a
// profiler.Recorder, keyed by (seed, epoch, sample id) as stage 2 keys
// them, under lim with opTimeout per sample (Recorder.Limit: the agents'
// limits, so that calibration runs no file the agents would refuse), and
// fits the model. A sample the pipeline fails on, or whose header lim
// refuses, is left out; ErrCalibration means none was recorded. The
// model keeps lim: Profile prices no sample whose header lim refuses.
func Calibrate(p *ops.Pipeline, seed, epoch uint64, cal []Calibrated, lim ops.Limits, opTimeout time.Duration) (*Model, error) {
	cal = slices.DeleteFunc(slices.Clone(cal), func(c Calibrated) bool {
		return p.CheckHeader(c.ID, c.Header(), lim) != nil
	})
	// The recorder indexes the calibration samples 0..len(cal)-1; their
	// keys carry their ids, which draw the boxes.
	rec := profiler.NewRecorder(p, "", len(cal))
	rec.Limit(lim, opTimeout)
	// One goroutine per core: the samples are independent and the
	// recorder is safe for concurrent use (stage 2's workers share one).
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(len(cal), runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for i := range next {
				_ = rec.Record(uint64(i), cal[i].Data, ops.Key{Seed: seed, Epoch: epoch, Sample: cal[i].ID})
			}
		})
	}
	for i := range cal {
		next <- i
	}
	close(next)
	wg.Wait()
	var samples []Sample
	var records []profiler.SampleProfile
	for _, sp := range rec.Profile().Samples {
		c := cal[sp.ID]
		sp.ID = c.ID
		samples, records = append(samples, c.Sample), append(records, sp)
	}
	if len(samples) == 0 {
		return nil, ErrCalibration
	}
	m, err := Fit(p, seed, epoch, samples, records)
	if err != nil {
		return nil, err
	}
	m.lim = lim
	return m, nil
}

// Admit splits samples into those the model prices and those whose header
// the calibration's limits refuse (ops.Pipeline.CheckHeader): every run
// of such a file fails before decoding, so it costs no CPU and sends no
// bytes beyond an attempt, and a plan leaves it raw (k = 0). Pricing it
// as the decode its header claims (a 678-byte file declaring 65535x65535,
// 4.3 G pixels) would make it outweigh the whole dataset.
func (m *Model) Admit(samples []Sample) (kept []Sample, refused []error) {
	for _, s := range samples {
		if err := m.refuses(s); err != nil {
			refused = append(refused, err)
			continue
		}
		kept = append(kept, s)
	}
	return kept, refused
}

// refuses is the error of the model's limits for s's header; nil for a
// header without pixels, which is no refusal but a bad sample (ErrSample).
func (m *Model) refuses(s Sample) error {
	if s.W <= 0 || s.H <= 0 {
		return nil
	}
	return m.p.CheckHeader(s.ID, s.Header(), m.lim)
}

// Fit fits the model on calibration samples already recorded (records[i]
// is samples[i]'s entry of a profiler.Recorder's profile for p with keys
// (seed, epoch, id)).
func Fit(p *ops.Pipeline, seed, epoch uint64, samples []Sample, records []profiler.SampleProfile) (*Model, error) {
	if len(samples) == 0 || len(samples) != len(records) {
		return nil, ErrCalibration
	}
	n := p.Len()
	m := &Model{p: p, seed: seed, epoch: epoch, decode: map[int]linear{}, cutClass: map[int]bool{},
		recorded: make(map[uint64]profiler.SampleProfile, len(samples))}
	fs := make([]feats, len(samples))
	for i, s := range samples {
		f, err := sampleFeats(p, s, seed, epoch)
		if err != nil {
			return nil, err
		}
		if len(records[i].OpNS) != n || len(records[i].Bytes) != n+1 {
			return nil, fmt.Errorf("%w: record of sample %d has %d ops, pipeline %d", profiler.ErrProfileInvalid, s.ID, len(records[i].OpNS), n)
		}
		for j := range f.ops {
			// A decode of an encode's output is fitted on the bytes the
			// encode actually wrote.
			if f.ops[j].inBytes {
				f.ops[j].work[0] = float64(records[i].Bytes[j])
			}
		}
		fs[i] = f
		m.recorded[s.ID] = records[i]
	}
	col := func(get func(i int) float64) []float64 {
		out := make([]float64, len(samples))
		for i := range out {
			out[i] = get(i)
		}
		return out
	}
	m.op, m.size = make([]linear, n), make([]linear, n)
	for j := range n {
		if fs[0].ops[j].size != nil {
			var xs [][]float64
			for q := range fs[0].ops[j].size {
				xs = append(xs, col(func(i int) float64 { return fs[i].ops[j].size[q] }))
			}
			m.size[j] = fit(col(func(i int) float64 { return float64(records[i].Bytes[j+1]) }), xs...)
		}
		var xs [][]float64
		for q := range fs[0].ops[j].work {
			xs = append(xs, col(func(i int) float64 { return fs[i].ops[j].work[q] }))
		}
		y := col(func(i int) float64 { return float64(records[i].OpNS[j]) })
		m.op[j] = fit(y, xs...)
		if j == 0 {
			m.fitDecodeClasses(fs, y, xs)
		}
	}
	m.fitWire(fs, records)
	if p.CanCut() {
		m.fitCut(samples, fs, records)
	}
	return m, nil
}

// fitDecodeClasses fits op 0 per decode class where the class has enough
// calibration samples.
func (m *Model) fitDecodeClasses(fs []feats, y []float64, xs [][]float64) {
	classes := map[int][]int{}
	for i, f := range fs {
		classes[f.class] = append(classes[f.class], i)
	}
	if len(classes) < 2 {
		return
	}
	for c, idx := range classes {
		if len(idx) < minClass {
			continue
		}
		pick := func(v []float64) []float64 {
			out := make([]float64, len(idx))
			for k, i := range idx {
				out[k] = v[i]
			}
			return out
		}
		picked := make([][]float64, len(xs))
		for q, x := range xs {
			picked[q] = pick(x)
		}
		m.decode[c] = fit(pick(y), picked...)
	}
}

// fitWire fits every split's zstd ratio and codec costs, where the records
// have compression data.
func (m *Model) fitWire(fs []feats, records []profiler.SampleProfile) {
	n := m.p.Len()
	if len(records[0].Compressed) != n+1 {
		return
	}
	m.ratio, m.comp, m.decomp = make([]linear, n+1), make([]linear, n+1), make([]linear, n+1)
	for k := range n + 1 {
		var bpp, d, ratio, bytes, saved, cns, dns []float64
		for i, r := range records {
			if len(r.Compressed) != n+1 || r.Bytes[k] <= 0 {
				continue
			}
			bpp = append(bpp, fs[i].bpp)
			d = append(d, detailAt(fs[i], k))
			ratio = append(ratio, float64(r.Compressed[k])/float64(r.Bytes[k]))
			bytes = append(bytes, float64(r.Bytes[k]))
			saved = append(saved, float64(r.Bytes[k]-r.Compressed[k]))
			if len(r.CompressNS) == n+1 && len(r.DecompressNS) == n+1 {
				cns = append(cns, float64(r.CompressNS[k]))
				dns = append(dns, float64(r.DecompressNS[k]))
			}
		}
		m.ratio[k] = fit(ratio, bpp, d)
		if len(cns) == len(bytes) {
			m.comp[k] = fit(cns, saved, bytes)
			m.decomp[k] = fit(dns, saved, bytes)
		}
	}
}

// detailAt is the detail feature of split k: the raw file's bytes per
// pixel at k = 0, op k-1's output's after.
func detailAt(f feats, k int) float64 {
	if k == 0 {
		return 1
	}
	return f.ops[k-1].detail
}

// fitCut fits the cut's size and costs on the samples that were cut.
func (m *Model) fitCut(samples []Sample, fs []feats, records []profiler.SampleProfile) {
	var x, y, px, raw, ns, area, rows, fin []float64
	seen := map[int]bool{}
	for i, r := range records {
		f := fs[i]
		seen[f.class] = true
		if !r.HasCut() || f.thisArea == 0 || f.meanArea == 0 {
			continue
		}
		m.cutClass[f.class] = true
		s := samples[i]
		img := float64(s.W) * float64(s.H)
		unscale := f.thisArea / f.meanArea
		x = append(x, float64(s.Raw)*f.thisArea/img)
		y = append(y, float64(r.CutBytes)*unscale)
		px = append(px, img)
		raw = append(raw, float64(s.Raw))
		ns = append(ns, float64(r.CutNS))
		area = append(area, f.thisArea)
		rows = append(rows, f.cutRows)
		fin = append(fin, float64(r.CutFinishNS)*unscale)
	}
	if len(x) == 0 {
		return
	}
	m.cutBytes = fit(y, x)
	m.cutNS = fit(ns, raw, px, x, area)
	m.cutFinish = fit(fin, area, x, rows)
}

// Profile estimates the profile of samples under the model's pipeline,
// seed and epoch, with the given dataset fingerprint. Samples are sorted
// by id, as a recorded profile's are; a calibration sample's entry is its
// record. A sample whose header the model's limits refuse (Admit) is left
// out, as a recorded profile leaves out a sample that failed. Two samples
// with one id are an error.
func (m *Model) Profile(fingerprint string, samples []Sample) (*profiler.Profile, error) {
	n := m.p.Len()
	names := make([]string, n)
	for j := range names {
		names[j] = m.p.Op(j).Name()
	}
	k, _ := m.p.CropSplit()
	out := &profiler.Profile{Version: profiler.ProfileVersion, Fingerprint: fingerprint, Pipeline: m.p.ID(), Ops: names, CropSplit: k}
	sorted := slices.Clone(samples)
	slices.SortFunc(sorted, func(a, b Sample) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	out.Samples = make([]profiler.SampleProfile, 0, len(sorted))
	for i, s := range sorted {
		if i > 0 && sorted[i-1].ID == s.ID {
			return nil, fmt.Errorf("%w: %d", profiler.ErrDuplicate, s.ID)
		}
		if r, ok := m.recorded[s.ID]; ok && r.Raw == s.Raw {
			out.Samples = append(out.Samples, r)
			continue
		}
		if m.refuses(s) != nil {
			continue
		}
		sp, err := m.Sample(s)
		if err != nil {
			return nil, err
		}
		out.Samples = append(out.Samples, sp)
	}
	return out, nil
}

// Sample estimates one sample's profile entry.
func (m *Model) Sample(s Sample) (profiler.SampleProfile, error) {
	f, err := sampleFeats(m.p, s, m.seed, m.epoch)
	if err != nil {
		return profiler.SampleProfile{}, err
	}
	n := m.p.Len()
	sp := profiler.SampleProfile{ID: s.ID, Raw: s.Raw, Bytes: make([]int64, n+1), OpNS: make([]int64, n)}
	sp.Bytes[0] = s.Raw
	for j, of := range f.ops {
		sp.Bytes[j+1] = of.out
		if of.size != nil {
			sp.Bytes[j+1] = max(nanos(m.size[j].at(of.size...)), 1)
		}
		if of.inBytes {
			of.work[0] = float64(sp.Bytes[j])
		}
		fit := m.op[j]
		if c, ok := m.decode[f.class]; ok && j == 0 {
			fit = c
		}
		sp.OpNS[j] = nanos(fit.at(of.work...))
	}
	if m.ratio != nil {
		sp.Compressed = make([]int64, n+1)
		sp.CompressNS = make([]int64, n+1)
		sp.DecompressNS = make([]int64, n+1)
		for k := range n + 1 {
			r := min(m.ratio[k].at(f.bpp, detailAt(f, k)), 1)
			c := max(min(int64(r*float64(sp.Bytes[k])), sp.Bytes[k]), 1)
			sp.Compressed[k] = c
			sp.CompressNS[k] = nanos(m.comp[k].at(float64(sp.Bytes[k]-c), float64(sp.Bytes[k])))
			sp.DecompressNS[k] = nanos(m.decomp[k].at(float64(sp.Bytes[k]-c), float64(sp.Bytes[k])))
		}
	}
	if m.cutClass[f.class] && f.thisArea > 0 {
		img := float64(s.W) * float64(s.H)
		x := float64(s.Raw) * f.thisArea / img
		this := m.cutBytes.at(x)
		if this < float64(s.Raw) {
			scale := f.meanArea / f.thisArea
			sp.CutBytes = max(1, min(int64(this*scale), s.Raw))
			sp.CutNS = max(nanos(m.cutNS.at(float64(s.Raw), img, x, f.thisArea)), 1)
			sp.CutFinishNS = max(nanos(m.cutFinish.at(f.thisArea, x, f.cutRows)*scale), 1)
		}
	}
	return sp, nil
}

func nanos(x float64) int64 { return max(int64(x+0.5), 0) }
