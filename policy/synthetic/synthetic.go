// Package synthetic generates profiles of two JPEG datasets' shapes,
// deterministic in a seed, with or without the JPEG cut's measurements: the
// policy command explains plans for them, and the planners' tests and
// benchmarks plan them.
package synthetic

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/sophon-dl/sophon/profiler"
)

// Pipeline is the op list of every synthetic profile.
var Pipeline = []string{"decode", "random_resized_crop", "random_horizontal_flip", "to_tensor", "normalize"}

const (
	cropBytes   = 224 * 224 * 3     // uint8 crop: 150,528 B
	tensorBytes = 224 * 224 * 3 * 4 // float32 tensor: 602,112 B
)

// shape is a dataset's JPEG size distribution (log-normal) and image
// geometry.
type shape struct {
	mu, sigma float64 // of ln(JPEG bytes)
	long      int     // long side in pixels
}

// Kinds: "openimages-like" (long side 1024 px, JPEG sizes log-normal with
// mean ~320 KB, 75% above the 150,528 B crop and 11% above the 602,112 B
// tensor) and "imagenet-like" (long side 500 px, mean ~115 KB, 23% above
// the crop; a log-normal with that tail cannot have a mean below ~114.6 KB).
var kinds = map[string]shape{
	// P(X > 150528) = 0.75 and P(X > 602112) = 0.11 give sigma = 0.7295,
	// mu = ln(150528) + 0.6745 sigma.
	"openimages-like": {mu: math.Log(cropBytes) + 0.6745*0.7295, sigma: 0.7295, long: 1024},
	// P(X > 150528) = 0.23 with the smallest mean.
	"imagenet-like": {mu: math.Log(cropBytes) - 0.7388*0.7388, sigma: 0.7388, long: 500},
}

// Profile returns an n-sample profile of the given kind for the
// pipeline [decode, random_resized_crop 224, flip, to_tensor, normalize],
// deterministic in seed. CPU costs: decode 10 ns per JPEG byte + 2 ns per
// pixel, crop 1.3 ms, flip 0.05 ms, to_tensor 0.1 ms, normalize 0.15 ms,
// each with ~10% noise; zstd shrinks pixels by ~1.18x and tensors by ~2.5x
// and cannot shrink a JPEG; it costs 5 ns per input byte to compress and
// 1 ns to decompress. It panics on an unknown kind.
func Profile(kind string, n int, seed uint64) *profiler.Profile {
	sh, ok := kinds[kind]
	if !ok {
		panic(fmt.Sprintf("synthetic: unknown kind %q", kind))
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	noise := func(x float64) int64 {
		f := 1 + 0.1*rng.NormFloat64()
		return int64(x * min(max(f, 0.7), 1.3))
	}
	p := &profiler.Profile{
		Version:     profiler.ProfileVersion,
		Fingerprint: fmt.Sprintf("synthetic-%s-%d-%d", kind, n, seed),
		Pipeline:    "synthetic",
		Ops:         append([]string(nil), Pipeline...),
		Samples:     make([]profiler.SampleProfile, n),
	}
	for i := range p.Samples {
		jpeg := int64(math.Exp(sh.mu + sh.sigma*rng.NormFloat64()))
		jpeg = max(jpeg, 1024)
		short := int(float64(sh.long) * (0.6 + 0.4*rng.Float64()))
		pixels := int64(sh.long * short)
		decoded := pixels * 3
		bytes := []int64{jpeg, decoded, cropBytes, cropBytes, tensorBytes, tensorBytes}
		pix := float64(decoded) / (1.18 * (1 + 0.05*rng.NormFloat64()))
		crop := float64(cropBytes) / (1.18 * (1 + 0.05*rng.NormFloat64()))
		ten := float64(tensorBytes) / (2.5 * (1 + 0.05*rng.NormFloat64()))
		comp := []int64{jpeg, int64(pix), int64(crop), int64(crop), int64(ten), int64(ten)}
		cns := make([]int64, 6)
		dns := make([]int64, 6)
		for k, b := range bytes {
			comp[k] = min(comp[k], b)
			cns[k] = noise(5 * float64(b))
			dns[k] = noise(float64(b))
		}
		p.Samples[i] = profiler.SampleProfile{
			ID:           uint64(i),
			Raw:          jpeg,
			Bytes:        bytes,
			Compressed:   comp,
			CompressNS:   cns,
			DecompressNS: dns,
			OpNS: []int64{
				noise(10*float64(jpeg) + 2*float64(pixels)),
				noise(1.3e6),
				noise(0.05e6),
				noise(0.1e6),
				noise(0.15e6),
			},
		}
	}
	return p
}

// WithCut returns a copy of p, a profile of Pipeline such as Profile's,
// in which the samples have the JPEG-domain crop's measurements
// (profiler.SampleProfile.CutBytes, CutNS, CutFinishNS), deterministic in
// seed: 2% of the samples cannot be cut; the others' cut keeps a fraction
// of the JPEG uniform on [0.06, 0.86] (46% on average, as measured for
// 1024-px photos; the crop box's area is uniform on [0.08, 1] of the
// image's, widened by the cut's margin), plus its 16-byte geometry. The
// cut costs 4 ns per JPEG byte read and 4 ns per cut byte written on the
// storage side; finishing it costs 10 ns per cut byte and 2 ns per pixel
// of the cut decoded, plus the crop's resampling (p's measured
// random_resized_crop), each with ~10% noise. The copy shares p's slices;
// neither may be modified. It panics when p's first two ops are not decode
// and random_resized_crop.
func WithCut(p *profiler.Profile, seed uint64) *profiler.Profile {
	if len(p.Ops) < 2 || p.Ops[0] != Pipeline[0] || p.Ops[1] != Pipeline[1] {
		panic(fmt.Sprintf("synthetic: ops %v cannot cut: they do not start with decode, random_resized_crop", p.Ops))
	}
	out := *p
	out.Samples = make([]profiler.SampleProfile, len(p.Samples))
	copy(out.Samples, p.Samples)
	addCut(out.Samples, seed)
	return &out
}

// addCut gives samples WithCut's cut measurements, in place.
func addCut(samples []profiler.SampleProfile, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 0xc07))
	noise := func(x float64) int64 {
		f := 1 + 0.1*rng.NormFloat64()
		return int64(x * min(max(f, 0.7), 1.3))
	}
	for i := range samples {
		s := &samples[i]
		s.CutBytes, s.CutNS, s.CutFinishNS = 0, 0, 0
		f := 0.06 + 0.8*rng.Float64()
		if rng.Float64() >= 0.02 {
			data := int64(f * float64(s.Raw))
			pixels := f * float64(s.Bytes[1]) / 3
			s.CutBytes = cutGeomBytes + data
			s.CutNS = noise(4*float64(s.Raw) + 4*float64(data))
			s.CutFinishNS = noise(10*float64(data)+2*pixels) + s.OpNS[1]
		}
	}
}

// ProfileCut is WithCut(Profile(kind, n, seed), seed) built in place,
// without the copy: the same profile at two thirds of the peak memory.
func ProfileCut(kind string, n int, seed uint64) *profiler.Profile {
	p := Profile(kind, n, seed)
	addCut(p.Samples, seed)
	return p
}

// cutGeomBytes is a cut's geometry on the wire, beside its JPEG.
const cutGeomBytes = 16

// WithoutCut returns a copy of p without any cut measurements. The copy
// shares p's slices; neither may be modified.
func WithoutCut(p *profiler.Profile) *profiler.Profile {
	out := *p
	out.Samples = make([]profiler.SampleProfile, len(p.Samples))
	for i, s := range p.Samples {
		s.CutBytes, s.CutNS, s.CutFinishNS = 0, 0, 0
		out.Samples[i] = s
	}
	return &out
}

// Compressed-crop pipelines: imagenet-train whose crop goes through a
// baseline JPEG before to_tensor (ops' presets imagenet-train-q95 and
// -q90). The split after encode_jpeg sends the crop's JPEG.

// CompressedPipeline is the op list of a profile of Compressed.
var CompressedPipeline = []string{"decode", "random_resized_crop", "random_horizontal_flip", "encode_jpeg", "decode", "to_tensor", "normalize"}

// cropJPEG is what `testbed ops` measured of a compressed-crop preset
// over a generated dataset: the mean bytes at the crop's split (2) and at
// the split after encode_jpeg (4), which do not vary between runs, and
// per run the mean op times (ms) of random_resized_crop, encode_jpeg and
// the decode after it. Compressed uses only ratios of the JPEG to the
// crop, the times' as the median over the runs: the profile keeps its own
// crop cost, and the machine's load, which slows a run's ops alike,
// cancels in a run's ratio, while the times themselves move with it.
type cropJPEG struct {
	cropBytes, jpegBytes float64
	// runs are {crop, encode, decode} ms, one per run.
	runs [][3]float64
}

// encodePerCrop and decodePerCrop are the median over the runs of the
// encode's and the decode's time over the crop's.
func (c cropJPEG) encodePerCrop() float64 { return c.medianRatio(1) }
func (c cropJPEG) decodePerCrop() float64 { return c.medianRatio(2) }

func (c cropJPEG) medianRatio(op int) float64 {
	r := make([]float64, len(c.runs))
	for i, run := range c.runs {
		r[i] = run[op] / run[0]
	}
	slices.Sort(r)
	if len(r)%2 == 1 {
		return r[len(r)/2]
	}
	return (r[len(r)/2-1] + r[len(r)/2]) / 2
}

// measuredCrops are, by kind and quality, the tables of three runs of
//
//	testbed gen --kind KIND -n 200 --out DIR --seed 11
//	testbed ops --data DIR --preset imagenet-train-qQ --seed 11 --bench 0
//
// (docs/policy.md, "The compressed crop", gives the date, the machine and
// the tables): the column "mean bytes" of splits 2 and 4, and per run
// "op ms" of splits 2, 4 and 5.
var measuredCrops = map[string]map[int]cropJPEG{
	"openimages-like": {
		95: {cropBytes: 150528, jpegBytes: 34448, runs: [][3]float64{{1.908, 0.364, 0.453}, {1.868, 0.370, 0.453}, {2.104, 0.396, 0.488}}},
		90: {cropBytes: 150528, jpegBytes: 24323, runs: [][3]float64{{1.824, 0.307, 0.376}, {1.730, 0.305, 0.367}, {1.813, 0.312, 0.373}}},
	},
	"imagenet-like": {
		95: {cropBytes: 150528, jpegBytes: 37993, runs: [][3]float64{{0.773, 0.367, 0.455}, {0.777, 0.376, 0.473}, {0.748, 0.367, 0.458}}},
		90: {cropBytes: 150528, jpegBytes: 27350, runs: [][3]float64{{0.752, 0.323, 0.392}, {0.741, 0.311, 0.380}, {0.745, 0.323, 0.389}}},
	},
}

// CompressedQualities lists the qualities Compressed has measurements
// for.
func CompressedQualities(kind string) []int {
	var qs []int
	for q := range measuredCrops[kind] {
		qs = append(qs, q)
	}
	slices.Sort(qs)
	return qs
}

// Compressed returns a copy of p, a profile of Pipeline of the given kind
// such as Profile's or ProfileCut's, for CompressedPipeline at the JPEG
// quality: encode_jpeg and a decode inserted after the flip,
// deterministic in seed. Per sample, the JPEG's bytes are the crop's
// times the measured ratio of their means (measuredCrops), and the
// encode's and the decode's costs are the sample's own crop cost (its
// random_resized_crop OpNS) times the median measured ratio of their op
// times to the crop's, each with ~10% noise; the decoded crop is the crop's
// size and compresses as the crop does; zstd cannot shrink the JPEG
// (`testbed ops` measures 1.00x), and costs 5 ns per byte to try and 1 ns
// to undo, as Profile's codec does. The cut's measurements, where p has
// them, carry over: the compute side finishes a cut with the ops after
// the crop, encode and decode included. The error names a kind or
// quality without measurements.
func Compressed(p *profiler.Profile, kind string, quality int, seed uint64) (*profiler.Profile, error) {
	m, ok := measuredCrops[kind][quality]
	if !ok {
		return nil, fmt.Errorf("synthetic: no compressed-crop measurements for %s at quality %d (have %v)", kind, quality, CompressedQualities(kind))
	}
	if !slices.Equal(p.Ops, Pipeline) {
		return nil, fmt.Errorf("synthetic: ops %v are not %v", p.Ops, Pipeline)
	}
	rng := rand.New(rand.NewPCG(seed, 0x7e9))
	noise := func(x float64) int64 {
		f := 1 + 0.1*rng.NormFloat64()
		return max(int64(x*min(max(f, 0.7), 1.3)), 1)
	}
	out := *p
	out.Pipeline = fmt.Sprintf("synthetic-imagenet-train-q%d", quality)
	out.Fingerprint = fmt.Sprintf("%s-q%d", p.Fingerprint, quality)
	out.Ops = slices.Clone(CompressedPipeline)
	out.Samples = make([]profiler.SampleProfile, len(p.Samples))
	// ins puts the encode's and the decode's entries after the flip's
	// (index 3 of a per-split slice, 2 of OpNS).
	ins := func(s []int64, at int, enc, dec int64) []int64 {
		return slices.Concat(s[:at], []int64{enc, dec}, s[at:])
	}
	for i, s := range p.Samples {
		jpeg := noise(float64(s.Bytes[2]) * m.jpegBytes / m.cropBytes)
		crop := float64(s.OpNS[1])
		s.Bytes = ins(s.Bytes, 4, jpeg, s.Bytes[2])
		s.OpNS = ins(s.OpNS, 3, noise(crop*m.encodePerCrop()), noise(crop*m.decodePerCrop()))
		if s.Compressed != nil {
			s.Compressed = ins(s.Compressed, 4, jpeg, s.Compressed[2])
			s.CompressNS = ins(s.CompressNS, 4, noise(5*float64(jpeg)), s.CompressNS[2])
			s.DecompressNS = ins(s.DecompressNS, 4, noise(float64(jpeg)), s.DecompressNS[2])
		}
		out.Samples[i] = s
	}
	return &out, nil
}
