package ops

// Encode compresses an image into a baseline JPEG (libjpeg-turbo under cgo,
// image/jpeg otherwise) at libjpeg's quality factor Quality with chroma
// subsampling Subsampling (420 or 444): torchvision's
// encode_jpeg(img, quality) with 4:2:0, or Pillow's
// img.save(f, "JPEG", quality=q, subsampling=0 or 2). With a decode after
// it, a pipeline compresses its final crop: the pair is a lossy step of
// the pipeline, so a sample is the same whichever node runs it, and a
// split just after Encode sends the JPEG's bytes.
//
// It is deterministic for a given codec and version: libjpeg-turbo's
// encoder uses its integer forward DCT (JDCT_ISLOW), standard Huffman
// tables and no dithering, so the same pixels give the same bytes on
// every node running the same library. The cgo-free build's image/jpeg
// writes other bytes (its own DCT and rounding), and only 4:2:0; a
// pipeline built there has its own ID (Spec.Build), so the agents of the
// two builds never pair.
type Encode struct {
	// Quality is 1-100.
	Quality int
	// Subsampling is 420 or 444.
	Subsampling int
}

func (Encode) Name() string { return "encode_jpeg" }
func (Encode) In() Kind     { return KindImage }
func (Encode) Out() Kind    { return KindEncoded }

// Apply implements [Op]. It takes no draws.
func (o Encode) Apply(in Value, _ *Rand) (Value, error) {
	if err := checkKind(o, in); err != nil {
		return nil, err
	}
	img := in.(*Image)
	if img.W < 1 || img.H < 1 {
		return nil, wrapf(ErrKind, "encode_jpeg: empty %dx%d image", img.W, img.H)
	}
	b, err := EncodeJPEG(img, EncodeOptions{Quality: o.Quality, Subsampling: o.Subsampling})
	if err != nil {
		return nil, err
	}
	return Encoded(b), nil
}

// outShape is an encoded value of the image's dimensions whose bytes are
// not known before it is encoded: shape.bytes counts its bound
// (maxEncodedBytes), and a decode after it takes the dimensions.
func (o Encode) outShape(in shape) (shape, error) {
	return shape{kind: KindEncoded, c: Channels, h: in.h, w: in.w}, nil
}

// maxEncodedBytes bounds the size of a baseline JPEG of w x h pixels from
// Encode: libjpeg-turbo's tjBufSize for 4:4:4 (the larger), 6 bytes per
// pixel of the image padded to whole 8x8 blocks, plus 2048 for the
// headers.
func maxEncodedBytes(w, h int64) int64 {
	return mulSat(mulSat((w+7)&^7, (h+7)&^7), 6) + 2048
}

// EncodeSubsamplings are the chroma subsamplings Encode writes.
var EncodeSubsamplings = []int{420, 444}
