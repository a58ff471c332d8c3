package profiler

import (
	"errors"
	"math"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/ops/wireform"
)

type testImage struct {
	raw  []byte
	w, h int
}

func testImages(t testing.TB, n int) []testImage {
	t.Helper()
	sizes := [][2]int{{320, 240}, {500, 375}, {200, 300}, {640, 480}}
	out := make([]testImage, n)
	for i := range out {
		w, h := sizes[i%len(sizes)][0], sizes[i%len(sizes)][1]
		raw, err := synth.JPEG(uint64(i+1), w, h, synth.Options{})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = testImage{raw, w, h}
	}
	return out
}

func trainPipeline(t testing.TB) *ops.Pipeline {
	t.Helper()
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRecorderSizesAndCosts(t *testing.T) {
	p := trainPipeline(t)
	imgs := testImages(t, 4)
	r := NewRecorder(p, "fp", len(imgs))
	for i, im := range imgs {
		if err := r.Record(uint64(i), im.raw, ops.Key{Seed: 7, Sample: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	prof := r.Profile()
	if err := prof.Validate(); err != nil {
		t.Fatal(err)
	}
	wantOps := []string{"decode", "random_resized_crop", "random_horizontal_flip", "to_tensor", "normalize"}
	if prof.Version != ProfileVersion || prof.Fingerprint != "fp" || prof.Pipeline != p.ID() || !slices.Equal(prof.Ops, wantOps) {
		t.Fatalf("header: got %+v", prof)
	}
	if len(prof.Samples) != len(imgs) || len(r.Missing()) != 0 || r.Recorded() != len(imgs) {
		t.Fatalf("got %d samples, missing %v", len(prof.Samples), r.Missing())
	}
	for i, s := range prof.Samples {
		im := imgs[i]
		want := []int64{int64(len(im.raw)), int64(im.w * im.h * 3), 150528, 150528, 602112, 602112}
		if s.ID != uint64(i) || s.Raw != int64(len(im.raw)) || !slices.Equal(s.Bytes, want) {
			t.Errorf("sample %d: got id %d raw %d bytes %v, want bytes %v", i, s.ID, s.Raw, s.Bytes, want)
		}
		for j, ns := range s.OpNS {
			if ns <= 0 {
				t.Errorf("sample %d op %d: got %d ns, want > 0", i, j, ns)
			}
		}
		for k := range s.Bytes {
			if s.Compressed[k] <= 0 || s.Compressed[k] > s.Bytes[k] || s.CompressNS[k] <= 0 || s.DecompressNS[k] <= 0 {
				t.Errorf("sample %d split %d: got compressed %d of %d, %d ns to compress, %d ns to decompress",
					i, k, s.Compressed[k], s.Bytes[k], s.CompressNS[k], s.DecompressNS[k])
			}
		}
		// The normalised float tensor compresses well; the JPEG does not.
		if s.Compressed[5] >= s.Bytes[5] || s.Compressed[0] != s.Bytes[0] {
			t.Errorf("sample %d: got compressed %v of %v", i, s.Compressed, s.Bytes)
		}
		if got := s.PrefixNS(2); got != s.OpNS[0]+s.OpNS[1] {
			t.Errorf("PrefixNS(2) = %d, want %d", got, s.OpNS[0]+s.OpNS[1])
		}
	}
}

func TestRecorderErrors(t *testing.T) {
	p := trainPipeline(t)
	imgs := testImages(t, 1)
	r := NewRecorder(p, "fp", 3)
	if err := r.Record(3, imgs[0].raw, ops.Key{Sample: 3}); !errors.Is(err, ErrSampleRange) {
		t.Errorf("out of range: got %v, want ErrSampleRange", err)
	}
	if err := r.Record(1, imgs[0].raw, ops.Key{Sample: 1}); err != nil {
		t.Fatal(err)
	}
	if err := r.Record(1, imgs[0].raw, ops.Key{Sample: 1}); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate: got %v, want ErrDuplicate", err)
	}
	if err := r.Record(2, []byte("junk"), ops.Key{Sample: 2}); !errors.Is(err, ops.ErrNotJPEG) {
		t.Errorf("junk: got %v, want ErrNotJPEG", err)
	}
	if got, want := r.Missing(), []uint64{0, 2}; !slices.Equal(got, want) {
		t.Errorf("missing: got %v, want %v", got, want)
	}
	if got := r.Profile(); len(got.Samples) != 1 || got.Samples[0].ID != 1 {
		t.Errorf("profile: got %+v", got.Samples)
	}

	// Under the agent's limits: a sample they refuse is not recorded.
	lim := ops.DefaultLimits()
	lim.MaxPixels = 100
	r.Limit(lim, time.Minute)
	if err := r.Record(0, imgs[0].raw, ops.Key{Sample: 0}); !errors.Is(err, ops.ErrTooLarge) {
		t.Errorf("above the pixel limit: got %v, want ErrTooLarge", err)
	}
	r.Limit(ops.DefaultLimits(), time.Minute)
	if err := r.Record(2, imgs[0].raw, ops.Key{Sample: 2}); err != nil {
		t.Errorf("within the limits: %v", err)
	}
	if got, want := r.Missing(), []uint64{0}; !slices.Equal(got, want) {
		t.Errorf("missing: got %v, want %v", got, want)
	}
}

// sizes drops the timings, which vary run to run.
func sizes(p *Profile) [][]int64 {
	var out [][]int64
	for _, s := range p.Samples {
		out = append(out, s.Bytes, s.Compressed)
	}
	return out
}

func TestRecorderConcurrent(t *testing.T) {
	p := trainPipeline(t)
	imgs := testImages(t, 12)
	seq := NewRecorder(p, "fp", len(imgs))
	for i, im := range imgs {
		if err := seq.Record(uint64(i), im.raw, ops.Key{Sample: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	par := NewRecorder(p, "fp", len(imgs))
	var wg sync.WaitGroup
	errs := make([]error, len(imgs))
	for w := range 4 {
		wg.Go(func() {
			// Scrambled order: worker w takes ids w, w+4, ... backwards.
			for i := len(imgs) - 1 - w; i >= 0; i -= 4 {
				errs[i] = par.Record(uint64(i), imgs[i].raw, ops.Key{Sample: uint64(i)})
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	got := par.Profile()
	for i, s := range got.Samples {
		if s.ID != uint64(i) {
			t.Fatalf("sample %d has id %d: not sorted", i, s.ID)
		}
	}
	if !reflect.DeepEqual(sizes(got), sizes(seq.Profile())) {
		t.Errorf("concurrent sizes differ from sequential:\ngot  %v\nwant %v", sizes(got), sizes(seq.Profile()))
	}
}

// Sizes do not depend on the epoch's draws; Merge averages costs.
func TestRecorderEpochsAndMerge(t *testing.T) {
	p := trainPipeline(t)
	imgs := testImages(t, 3)
	var profs []*Profile
	for epoch := range uint64(2) {
		r := NewRecorder(p, "fp", len(imgs))
		for i, im := range imgs {
			if err := r.Record(uint64(i), im.raw, ops.Key{Epoch: epoch, Sample: uint64(i)}); err != nil {
				t.Fatal(err)
			}
		}
		profs = append(profs, r.Profile())
	}
	for i := range imgs {
		if a, b := profs[0].Samples[i].Bytes, profs[1].Samples[i].Bytes; !slices.Equal(a, b) {
			t.Errorf("sample %d: epoch 0 bytes %v, epoch 1 %v", i, a, b)
		}
	}
	m, err := Merge(profs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
	for i, s := range m.Samples {
		a, b := profs[0].Samples[i], profs[1].Samples[i]
		if !slices.Equal(s.Bytes, a.Bytes) {
			t.Errorf("merged bytes %v, want %v", s.Bytes, a.Bytes)
		}
		for j := range s.OpNS {
			if want := (a.OpNS[j] + b.OpNS[j] + 1) / 2; s.OpNS[j] != want {
				t.Errorf("sample %d op %d: merged %d ns, want %d", i, j, s.OpNS[j], want)
			}
		}
	}
	other := *profs[1]
	other.Fingerprint = "other"
	if _, err := Merge(profs[0], &other); !errors.Is(err, ErrProfileMismatch) {
		t.Errorf("merge across datasets: got %v, want ErrProfileMismatch", err)
	}
}

func TestMergeDisjoint(t *testing.T) {
	a := &Profile{Fingerprint: "f", Pipeline: "p", Ops: []string{"x"}, Samples: []SampleProfile{
		{ID: 1, Raw: 10, Bytes: []int64{10, 4}, OpNS: []int64{100}, Compressed: []int64{10, 2}},
	}}
	b := &Profile{Fingerprint: "f", Pipeline: "p", Ops: []string{"x"}, Samples: []SampleProfile{
		{ID: 0, Raw: 7, Bytes: []int64{7, 4}, OpNS: []int64{5}},
		{ID: 1, Raw: 10, Bytes: []int64{10, 4}, OpNS: []int64{201}},
	}}
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	want := []SampleProfile{
		{ID: 0, Raw: 7, Bytes: []int64{7, 4}, OpNS: []int64{5}},
		// Compressed missing in b counts as Bytes: (2+4)/2.
		{ID: 1, Raw: 10, Bytes: []int64{10, 4}, OpNS: []int64{151}, Compressed: []int64{10, 3}},
	}
	if !reflect.DeepEqual(m.Samples, want) {
		t.Errorf("got %+v, want %+v", m.Samples, want)
	}
}

func TestFromTraces(t *testing.T) {
	p := trainPipeline(t)
	imgs := testImages(t, 2)
	var traces []SampleTrace
	for i := len(imgs) - 1; i >= 0; i-- {
		tr, err := Trace(p, ops.Key{Sample: uint64(i)}, imgs[i].raw, wireform.CodecZstd)
		if err != nil {
			t.Fatal(err)
		}
		traces = append(traces, tr)
	}
	prof, err := FromTraces(p, "fp", traces)
	if err != nil {
		t.Fatal(err)
	}
	if err := prof.Validate(); err != nil {
		t.Fatal(err)
	}
	if prof.Samples[0].ID != 0 || prof.Samples[1].Bytes[2] != 150528 {
		t.Errorf("got %+v", prof.Samples)
	}
	if _, err := FromTraces(p, "fp", append(traces, traces[0])); !errors.Is(err, ErrDuplicate) {
		t.Errorf("duplicate trace: got %v, want ErrDuplicate", err)
	}
}

func TestMergeCutAndResources(t *testing.T) {
	ops2 := []string{"decode", "random_resized_crop"}
	s := func(id uint64, cut, cns, fns int64) SampleProfile {
		return SampleProfile{ID: id, Raw: 100, Bytes: []int64{100, 900, 50}, OpNS: []int64{10, 20},
			CutBytes: cut, CutNS: cns, CutFinishNS: fns}
	}
	a := &Profile{Fingerprint: "f", Pipeline: "p", Ops: ops2,
		Samples:   []SampleProfile{s(0, 40, 3, 11), s(1, 60, 4, 12), s(2, 0, 0, 0)},
		Resources: &MeasuredResources{LinkBytesPerSec: 100, ComputeCores: 4, Epochs: 3}}
	b := &Profile{Fingerprint: "f", Pipeline: "p", Ops: ops2,
		Samples:   []SampleProfile{s(0, 50, 6, 14), s(1, 0, 0, 0), s(2, 30, 1, 1), s(3, 70, 2, 8)},
		Resources: &MeasuredResources{LinkBytesPerSec: 200, StorageCores: 2}}
	m, err := Merge(a, b)
	if err != nil {
		t.Fatal(err)
	}
	got := [][3]int64{}
	for _, x := range m.Samples {
		got = append(got, [3]int64{x.CutBytes, x.CutNS, x.CutFinishNS})
	}
	// Sample 0 is cut in both records: means. 1 and 2 were declined in one
	// record: no cut. 3 has one record.
	want := [][3]int64{{45, 5, 13}, {0, 0, 0}, {0, 0, 0}, {70, 2, 8}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("cut fields: got %v, want %v", got, want)
	}
	// a weighs its 3 epochs, b (no Epochs) one.
	wantR := MeasuredResources{LinkBytesPerSec: 125, StorageCores: 2, ComputeCores: 4, Epochs: 4}
	if m.Resources == nil || *m.Resources != wantR {
		t.Errorf("resources: got %+v, want %+v", m.Resources, wantR)
	}
	if err := m.Validate(); err != nil {
		t.Error(err)
	}
	a.Resources, b.Resources = nil, nil
	if m, err := Merge(a, b); err != nil || m.Resources != nil {
		t.Errorf("no resources: got %+v, %v; want nil", m.Resources, err)
	}
}

// The cut's measurements are recorded where the pipeline can cut and the
// backend cuts the file; a backend that declines every file (a build
// without libturbojpeg) leaves them zero. Either way they agree with what
// Cut gives for the same key.
func TestRecorderCut(t *testing.T) {
	p := trainPipeline(t)
	if !p.CanCut() {
		t.Fatalf("%s cannot cut", p.ID())
	}
	imgs := testImages(t, 4)
	r := NewRecorder(p, "fp", len(imgs))
	for i, im := range imgs {
		if err := r.Record(uint64(i), im.raw, ops.Key{Seed: 3, Sample: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	prof := r.Profile()
	if err := prof.Validate(); err != nil {
		t.Fatal(err)
	}
	cuts := 0
	for i, s := range prof.Samples {
		key := ops.Key{Seed: 3, Sample: uint64(i)}
		c, err := p.Cut(key, ops.Encoded(imgs[i].raw), ops.Limits{})
		if err != nil {
			if !errors.Is(err, ops.ErrCannotCut) {
				t.Errorf("sample %d: cut: %v", i, err)
			}
			if s.CutBytes != 0 || s.CutNS != 0 || s.CutFinishNS != 0 {
				t.Errorf("sample %d cannot be cut (%v) but has cut %d B, %d ns, %d ns", i, err, s.CutBytes, s.CutNS, s.CutFinishNS)
			}
			continue
		}
		cuts++
		// The recorded cut is scaled to the mean area the reference
		// boxes keep (cutScale), not the one box's.
		scale := cutScale(p, key, c, imgs[i].raw)
		if got, want := s.CutBytes, max(1, min(int64(float64(c.Size())*scale), s.Raw)); got != want {
			t.Errorf("sample %d: cut bytes %d, Cut gives %d scaled by %.3f to %d", i, got, c.Size(), scale, want)
		}
		if scale <= 0.1 || scale > 20 {
			t.Errorf("sample %d: cut scaled by %.3f", i, scale)
		}
		if s.CutBytes >= s.Raw+16 || s.CutNS <= 0 || s.CutFinishNS <= 0 {
			t.Errorf("sample %d: cut %d of %d raw bytes, %d ns to cut, %d ns to finish", i, s.CutBytes, s.Raw, s.CutNS, s.CutFinishNS)
		}
	}
	t.Logf("%d of %d samples cut", cuts, len(imgs))

	// A pipeline that does not start with decode, random_resized_crop has
	// no cut.
	val, err := ops.Preset("imagenet-val")
	if err != nil {
		t.Fatal(err)
	}
	if val.CanCut() {
		t.Fatalf("%s can cut", val.ID())
	}
	rv := NewRecorder(val, "fp", 1)
	if err := rv.Record(0, imgs[0].raw, ops.Key{}); err != nil {
		t.Fatal(err)
	}
	if s := rv.Profile().Samples[0]; s.HasCut() || s.CutNS != 0 || s.CutFinishNS != 0 {
		t.Errorf("val pipeline: got cut %d B, %d ns, %d ns, want none", s.CutBytes, s.CutNS, s.CutFinishNS)
	}
}

// TestCutScale: the scale is the mean area of the reference boxes' cut
// regions over the recorded one's, rounded to whole iMCUs (16x16 where the
// file's header is unknown), from the dimensions alone.
func TestCutScale(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	cut := &ops.CutJPEG{W: 1024, H: 768}
	key := ops.Key{Seed: 9, Epoch: 4, Sample: 17}
	this, err := p.CutRegion(cut.W, cut.H, key)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for j := range uint64(CutDraws) {
		r, err := p.CutRegion(cut.W, cut.H, ops.Key{Epoch: refEpoch + j})
		if err != nil {
			t.Fatal(err)
		}
		sum += CutImage{W: 1024, H: 768, MCUW: 16, MCUH: 16}.Area(r)
	}
	want := sum / CutDraws / CutImage{W: 1024, H: 768}.Area(this)
	if got := cutScale(p, key, cut, nil); math.Abs(got-want) > 1e-12 {
		t.Fatalf("scale %v, want %v", got, want)
	}
	val, err := ops.Preset("imagenet-val")
	if err != nil {
		t.Fatal(err)
	}
	if got := cutScale(val, key, cut, nil); got != 1 {
		t.Fatalf("scale %v for a pipeline without the cut, want 1", got)
	}
}

// A pipeline that compresses its crop records the split after
// encode_jpeg as any other: the JPEG's bytes, what the wire form at that
// split carries, and a decode after it sized as the crop.
func TestRecorderEncodedSplit(t *testing.T) {
	p, err := ops.Preset("imagenet-train-q95")
	if err != nil {
		t.Fatal(err)
	}
	const k = 4 // after encode_jpeg
	if _, ok := p.Op(k - 1).(ops.Encode); !ok {
		t.Fatalf("op %d is %s, want encode_jpeg", k-1, p.Op(k-1).Name())
	}
	imgs := testImages(t, 4)
	rec := NewRecorder(p, "fp", len(imgs))
	for i, im := range imgs {
		if err := rec.Record(uint64(i), im.raw, ops.Key{Seed: 1, Sample: uint64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i, sp := range rec.Profile().Samples {
		v, err := p.Run(ops.Key{Seed: 1, Sample: uint64(i)}, ops.Encoded(imgs[i].raw), 0, k)
		if err != nil {
			t.Fatal(err)
		}
		jpg, ok := v.(ops.Encoded)
		if !ok {
			t.Fatalf("split %d holds %T, want ops.Encoded", k, v)
		}
		w, err := wireform.Encode(v, wireform.CodecNone)
		if err != nil {
			t.Fatal(err)
		}
		info, err := wireform.ReadHeader(w)
		if err != nil {
			t.Fatal(err)
		}
		if sp.Bytes[k] != int64(len(jpg)) || int64(info.StoredLen) != sp.Bytes[k] {
			t.Errorf("sample %d: split %d recorded %d bytes, want the JPEG's %d (wire payload %d)", i, k, sp.Bytes[k], len(jpg), info.StoredLen)
		}
		if sp.Bytes[k+1] != 224*224*3 || sp.OpNS[k-1] <= 0 || sp.OpNS[k] <= 0 {
			t.Errorf("sample %d: decode after the encode %d bytes, encode %d ns, decode %d ns", i, sp.Bytes[k+1], sp.OpNS[k-1], sp.OpNS[k])
		}
		// A JPEG does not compress: zstd keeps at most its bytes.
		if sp.Compressed[k] > sp.Bytes[k] || sp.Compressed[k] < sp.Bytes[k]*9/10 {
			t.Errorf("sample %d: split %d compresses to %d of %d bytes", i, k, sp.Compressed[k], sp.Bytes[k])
		}
	}
}
