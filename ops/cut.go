package ops

import "github.com/sophon-dl/sophon/ops/jpeg"

// The JPEG-domain crop split.
//
// RandomResizedCrop's box for (seed, epoch, sample) depends only on the
// image's dimensions, which the JPEG header gives. So the storage agent can
// cut the JPEG to that box without decoding it: libjpeg-turbo's lossless
// transform (tjTransform with TJXOPT_CROP) copies the DCT coefficients of
// the whole iMCUs that cover the box, widened by CutMargin pixels on every
// side where the image has them, into a smaller JPEG. The compute agent
// decodes the box's pixels from the cut file ([Pipeline.Run] from
// [SplitCut]) and resamples them exactly as RandomResizedCrop would.
//
// Why it is exact: decoding is per 8x8 block (entropy decoding, dequantising
// and the inverse DCT see one block's coefficients), except chroma
// upsampling, which reads the neighbouring chroma samples of each pixel. The
// cut keeps every coefficient of its blocks, and the margin keeps every
// neighbour the box's pixels read, so each of the box's pixels decodes from
// the cut file to the same bytes as from the whole file. Where the cut
// reaches an edge of the image, it is that edge, and libjpeg replicates it
// the same way in both. The cut is a baseline file: where the original is
// progressive, each of its coefficients must be complete (libjpeg smooths
// the blocks of an incomplete progressive image using their neighbours, and
// a baseline cut of it would not be smoothed). Files where this argument
// does not hold (see [jpeg.Cut]), and files the transform does not read
// without a warning, are declined with ErrCannotCut, and the sample crosses
// the link in another form; the model sees the same bytes either way.

// SplitCut is the split of the JPEG-domain crop: the storage agent sends the
// JPEG cut to ops[1]'s crop box (a [CutJPEG]), the compute agent runs the
// rest. It lies between split 0 (raw) and split 1 (decoded) in the work it
// moves, and only pipelines whose first two ops are decode and
// random_resized_crop have it ([Pipeline.CanCut]).
const SplitCut = -1

// CutMargin is how many pixels of the image around the crop box a cut
// keeps, where the image has them, before rounding out to whole iMCUs.
const CutMargin = 16

// ErrCannotCut: the JPEG cannot be cut losslessly with the exactness the
// split needs (unknown chroma subsampling, an incomplete progressive
// sequence, data the transform does not read cleanly, a scan or memory
// limit only the transform would break, a cut no smaller than the file, a
// build without libturbojpeg). The sample may still decode, or fail: a
// server sends it in another form, and the decode there decides.
var ErrCannotCut = jpeg.ErrCannotCut

// KindCut is a [CutJPEG]: a JPEG cut losslessly out of a larger one.
const KindCut Kind = 4

// CutJPEG is a JPEG cut out of the original image: Data is a complete JPEG
// whose pixels are the original's rectangle (X, Y) to (X+w, Y+h), w x h being
// Data's own dimensions; W x H are the original's dimensions, from which the
// crop box is drawn again on the compute side.
type CutJPEG struct {
	W, H int
	X, Y int
	Data []byte
}

// Kind implements [Value].
func (*CutJPEG) Kind() Kind { return KindCut }

// Size implements [Value]: the cut file's bytes plus its geometry.
func (c *CutJPEG) Size() int { return cutGeomLen + len(c.Data) }

// cutGeomLen is the geometry prefix of a cut's wire payload (package
// wireform): W, H, X, Y as uint32 little-endian.
const cutGeomLen = 16

// CanCut reports whether the pipeline has the split [SplitCut]: its first op
// is decode and its second random_resized_crop.
func (p *Pipeline) CanCut() bool {
	if len(p.ops) < 2 {
		return false
	}
	_, d := p.ops[0].(Decode)
	_, c := p.ops[1].(RandomResizedCrop)
	return d && c
}

// cutOps returns the pipeline's decode and crop ops, or an ErrSplit error.
func (p *Pipeline) cutOps() (Decode, RandomResizedCrop, error) {
	if !p.CanCut() {
		return Decode{}, RandomResizedCrop{}, wrapf(ErrSplit, "pipeline %s has no cut split: it does not start with decode, random_resized_crop", p.id)
	}
	return p.ops[0].(Decode), p.ops[1].(RandomResizedCrop), nil
}

// CheckHeader refuses, from a JPEG's header alone, a file that the
// pipeline's decode refuses under lim before decoding anything: more
// pixels than the smaller of lim's and the op's own cap, a multi-scan
// frame whose coefficient buffers exceed MaxMemory, a whole image above
// MaxOutputBytes (wrapping ErrTooLarge), or a passed deadline. A planner
// that prices a sample from its header checks it first: a file every run
// refuses costs no CPU and sends no bytes. Nil for a pipeline that does
// not start with decode. Errors are *SampleError values naming the sample.
func (p *Pipeline) CheckHeader(sample uint64, h JPEGHeader, lim Limits) error {
	if len(p.ops) == 0 {
		return nil
	}
	var err error
	switch d := p.ops[0].(type) {
	case Decode:
		err = checkHeader(d, h, lim)
	case DecodeRandomResizedCrop:
		// It decodes only its box, so only the header's limits apply.
		if err = checkDims(h); err == nil {
			err = lim.decode(d.Limits).Check(h)
		}
	default:
		return nil
	}
	if err != nil {
		return &SampleError{Sample: sample, Op: p.ops[0].Name(), Err: err}
	}
	return nil
}

// checkHeader is CheckHeader's check for decode op d.
func checkHeader(d Decode, h JPEGHeader, lim Limits) error {
	if err := checkDims(h); err != nil {
		return err
	}
	if err := lim.decode(d.Limits).Check(h); err != nil {
		return err
	}
	// The decode's output is the whole image, whatever the pipeline decodes
	// of it (see Limits.MaxOutputBytes).
	return checkOutput(d.Name(), imageShape(h.W, h.H), lim.MaxOutputBytes)
}

// checkDims refuses a header without pixels.
func checkDims(h JPEGHeader) error {
	if h.W <= 0 || h.H <= 0 {
		return wrapf(ErrCorrupt, "header of a %dx%d frame", h.W, h.H)
	}
	return nil
}

// Cut is the storage side of [SplitCut]: it reads raw's header, draws
// ops[1]'s crop box for key exactly as the crop would, and cuts the JPEG to
// the box widened by [CutMargin] and rounded out to whole iMCUs, without
// decoding it. Under lim it refuses, with the decode's own errors, what the
// whole run refuses from the header (the pixels, the whole image's output
// bytes, a multi-scan file's coefficient memory, a passed deadline). A file
// that cannot be cut exactly fails with an error wrapping ErrCannotCut, and
// so does one that would break lim only in the transform (more than
// MaxScans scans, where the decode fails at scan MaxScans+1 or earlier;
// buffers above MaxMemory: the transform holds every coefficient even of a
// baseline file) and one the transform does not read cleanly: the decode
// of the raw file then fails or succeeds exactly as it would have. Errors
// are *SampleError values naming the sample.
func (p *Pipeline) Cut(key Key, raw Encoded, lim Limits) (*CutJPEG, error) {
	d, c, err := p.cutOps()
	if err != nil {
		return nil, &SampleError{Sample: key.Sample, Err: err}
	}
	fail := func(err error) (*CutJPEG, error) {
		return nil, &SampleError{Sample: key.Sample, Op: "cut", Err: err}
	}
	dl := lim.decode(d.Limits)
	h, err := ReadJPEGHeader(raw)
	if err != nil {
		return fail(err)
	}
	if err := checkHeader(d, h, lim); err != nil {
		return fail(err)
	}
	var r Rand
	r.Seed(SeedFor(key.Seed, key.Epoch, key.Sample, 1))
	box := SampleRRCBox(h.W, h.H, c.Params, &r)
	out, jgot, err := jpeg.Cut(raw, h, jpeg.Rect(cutRegion(h.W, h.H, box)), dl)
	if err != nil {
		return fail(err)
	}
	got := Rect(jgot)
	if len(out) >= len(raw) {
		return fail(wrapf(ErrCannotCut, "the cut %v is %d bytes, no smaller than the %d-byte file", got, len(out), len(raw)))
	}
	return &CutJPEG{W: h.W, H: h.H, X: got.X, Y: got.Y, Data: out}, nil
}

// finishCut is the compute side of [SplitCut]: ops[0:2] on a cut. It draws
// the box from the original's dimensions with ops[1]'s seed, checks that the
// cut covers it with its margin (or the image's edge), decodes only the
// box's pixels from the cut file and resamples them as random_resized_crop
// does.
func (p *Pipeline) finishCut(key Key, in Value, lim Limits) (Value, error) {
	d, c, err := p.cutOps()
	if err != nil {
		return nil, err
	}
	cut, ok := in.(*CutJPEG)
	if !ok || cut == nil {
		return nil, wrapf(ErrKind, "split cut takes a cut jpeg, got %v", kindOf(in))
	}
	dl := lim.decode(d.Limits)
	if cut.W < 1 || cut.H < 1 || cut.W > dl.PixelLimit()/cut.H {
		return nil, wrapf(ErrTooLarge, "cut of a %dx%d image", cut.W, cut.H)
	}
	// Refuse what the run from split 0 refuses before decoding: the whole
	// image's and the crop's outputs.
	if err := checkOutput(d.Name(), imageShape(cut.W, cut.H), lim.MaxOutputBytes); err != nil {
		return nil, err
	}
	if err := checkOutput(c.Name(), imageShape(c.W, c.H), lim.MaxOutputBytes); err != nil {
		return nil, err
	}
	h, err := ReadJPEGHeader(cut.Data)
	if err != nil {
		return nil, err
	}
	var r Rand
	r.Seed(SeedFor(key.Seed, key.Epoch, key.Sample, 1))
	box := SampleRRCBox(cut.W, cut.H, c.Params, &r)
	if err := cutCovers(cut, h, box); err != nil {
		return nil, err
	}
	rel := Rect{X: box.X - cut.X, Y: box.Y - cut.Y, W: box.W, H: box.H}
	img, got, err := DecodeJPEGCrop(cut.Data, rel, dl)
	if err != nil {
		return nil, err
	}
	crop := Rect{X: rel.X - got.X, Y: rel.Y - got.Y, W: box.W, H: box.H}
	return Resample(img, crop, [4]float32{0, 0, float32(box.W), float32(box.H)}, c.W, c.H), nil
}

// cutCovers checks that the cut, whose file is w x h = hdr's, lies inside
// the original and covers box with CutMargin pixels on every side where the
// original has them: the margin is what makes its pixels exact.
func cutCovers(cut *CutJPEG, hdr JPEGHeader, box Rect) error {
	x0, y0, x1, y1 := cut.X, cut.Y, cut.X+hdr.W, cut.Y+hdr.H
	if x0 < 0 || y0 < 0 || x1 > cut.W || y1 > cut.H {
		return wrapf(ErrCorrupt, "cut %dx%d+%d+%d lies outside the %dx%d image", hdr.W, hdr.H, x0, y0, cut.W, cut.H)
	}
	need := cutRegion(cut.W, cut.H, box)
	if need.X < x0 || need.Y < y0 || need.X+need.W > x1 || need.Y+need.H > y1 {
		return wrapf(ErrCorrupt, "cut %dx%d+%d+%d does not cover the crop box %v with its %d-pixel margin", hdr.W, hdr.H, x0, y0, box, CutMargin)
	}
	return nil
}

func kindOf(v Value) string {
	if v == nil {
		return "nil"
	}
	return v.Kind().String()
}
