package ops

import (
	"fmt"
	"time"

	"github.com/sophon-dl/sophon/internal/bytesize"
)

// Limits bound what one pipeline run may cost a server that runs ops on
// data and specs it does not trust (see [Pipeline.RunLimited]). They only
// ever refuse: a run that passes its limits gives exactly the bytes the
// unlimited run gives, wherever it runs. Zero fields mean no limit, so
// Limits{} is what [Pipeline.Run] uses.
//
// The defaults ([DefaultLimits]) keep a storage agent with two workers
// under about 512 MiB on hostile input. One worker's peak is its decoded
// image (at most MaxPixels*3 = 96 MiB) plus libjpeg's coefficient buffers
// (MaxMemory, 128 MiB, freed before the decode returns) or plus the next
// op's output (MaxOutputBytes, 128 MiB): about 224 MiB each, 448 MiB for
// two. NB: this counts live bytes; the Go heap may grow to twice its live
// size before a collection unless the process sets GOMEMLIMIT.
type Limits struct {
	// MaxPixels bounds the width times height a JPEG's frame header may
	// declare, before any pixel is decoded. A decode op runs under the
	// smaller of this and its own max_pixels (the spec's, DefaultMaxPixels
	// when unset): a client spec can lower the server's cap, never raise
	// it. Zero means the op's own limit only.
	MaxPixels int64
	// MaxScans bounds the number of scans of a multi-scan (progressive or
	// non-interleaved) JPEG, as djpeg -maxscans does: the decoder refuses
	// the file when it reaches scan MaxScans+1. Each scan makes libjpeg
	// visit every block of its components, so a small file of thousands of
	// scans costs CPU out of all proportion to its size. libjpeg's simple
	// progression writes 10 scans for colour and 6 for grey. Zero means no
	// limit. The pure-Go decoder counts the file's SOS markers before
	// decoding instead.
	MaxScans int
	// MaxMemory bounds libjpeg's own allocations for whole-image buffers
	// (its cinfo->mem->max_memory_to_use): the DCT coefficients that a
	// multi-scan JPEG makes it hold, 128 bytes per 8x8 block of every
	// component, whatever the file's size (a 4:4:4 colour image needs 6
	// bytes a pixel). It is checked from the frame header before anything
	// is allocated, and libjpeg enforces it too. Zero means no limit. The
	// pure-Go decoder counts its own buffers, 256 bytes per block of a
	// progressive image. [Pipeline.Cut] counts the lossless transform's
	// buffers against it too (every coefficient of the file, baseline or
	// not, and of the cut, and the cut's worst-case output buffer) and
	// declines the cut where they exceed it.
	MaxMemory int64
	// MaxOutputBytes bounds every op's output (an image's W*H*3 bytes, a
	// tensor's C*H*W*4), computed from the op's parameters and the input's
	// dimensions before the op allocates. A decode op's output counts as the
	// whole image the frame header declares, even where the pipeline decodes
	// only a crop of it, so that a split or a fused pair refuses exactly
	// what the ops run one by one refuse. Zero means no limit.
	MaxOutputBytes int64
	// MaxResultBytes bounds the run's result (the last op's output, what
	// RunLimited returns), checked with MaxOutputBytes before any op runs:
	// a server sets it to the payload its messages carry, so that an
	// intermediate it could not send is never computed. Zero means no bound
	// beyond MaxOutputBytes.
	MaxResultBytes int64
	// Deadline, when set, is checked before every op and, inside libjpeg,
	// at every progress-monitor call (each row of input while a multi-scan
	// JPEG is buffered, each output row). A run past it fails with
	// ErrDeadline. The zero time means none. The pure-Go decoder checks it
	// only between ops.
	Deadline time.Time
}

// Server defaults; see [DefaultLimits].
const (
	// DefaultServerMaxPixels is 32 Mi pixels (e.g. 8192x4096): larger than
	// any camera photo in common datasets, a 96 MiB RGB image.
	DefaultServerMaxPixels = 32 << 20
	// DefaultMaxScans allows any sensible progression (libjpeg writes at
	// most 10 scans; a 12-bit successive approximation of every
	// coefficient of four components needs fewer than 64).
	DefaultMaxScans = 64
	// DefaultMaxMemory holds the coefficients of a progressive 4:2:0 image
	// of 44 M pixels or of a 4:4:4 one of 22 M pixels.
	DefaultMaxMemory = 128 << 20
	// DefaultMaxOutputBytes holds a full-size decode (96 MiB) and a 224x224
	// tensor many times over, but not a float tensor of a full-size decode.
	DefaultMaxOutputBytes = 128 << 20
)

// DefaultLimits are the limits a server should apply to requests from
// clients it does not trust: MaxPixels 32 Mi, MaxScans 64, MaxMemory 128
// MiB, MaxOutputBytes 128 MiB and no deadline (the server sets one per
// request, e.g. lim.Deadline = time.Now().Add(2 * time.Second)).
// [DefaultMaxPixels] stays the decoder's limit for local use.
func DefaultLimits() Limits {
	return Limits{
		MaxPixels:      DefaultServerMaxPixels,
		MaxScans:       DefaultMaxScans,
		MaxMemory:      DefaultMaxMemory,
		MaxOutputBytes: DefaultMaxOutputBytes,
	}
}

// decode returns the limits a decode op whose own limits are own runs under:
// for each bound the smaller of the two, a zero meaning no bound.
func (l Limits) decode(own DecodeLimits) DecodeLimits {
	d := own
	if l.MaxPixels > 0 && l.MaxPixels < int64(own.PixelLimit()) {
		d.MaxPixels = int(l.MaxPixels)
	}
	if l.MaxScans > 0 && (d.MaxScans <= 0 || l.MaxScans < d.MaxScans) {
		d.MaxScans = l.MaxScans
	}
	if l.MaxMemory > 0 && (d.MaxMemory <= 0 || l.MaxMemory < d.MaxMemory) {
		d.MaxMemory = l.MaxMemory
	}
	if l.MaxOutputBytes > 0 && (d.MaxBytes <= 0 || l.MaxOutputBytes < d.MaxBytes) {
		d.MaxBytes = l.MaxOutputBytes
	}
	if !l.Deadline.IsZero() && (d.Deadline.IsZero() || l.Deadline.Before(d.Deadline)) {
		d.Deadline = l.Deadline
	}
	return d
}

// checkDeadline fails with ErrDeadline once d (when set) has passed.
func checkDeadline(d time.Time, what string) error {
	if d.IsZero() {
		return nil
	}
	if late := time.Since(d); late >= 0 {
		return wrapf(ErrDeadline, "%s: deadline passed %v ago", what, late.Round(time.Microsecond))
	}
	return nil
}

// shape is the size of a value, known before the value is allocated.
type shape struct {
	kind Kind
	// c, h, w: an image is h x w x c bytes (c = Channels), a tensor c x h x
	// w float32s.
	c, h, w int
	// data is the input itself when kind is KindEncoded: decode ops read
	// its header.
	data Encoded
}

func shapeOf(v Value) shape {
	switch v := v.(type) {
	case Encoded:
		return shape{kind: KindEncoded, data: v}
	case *Image:
		return shape{kind: KindImage, c: Channels, h: v.H, w: v.W}
	case *Tensor:
		return shape{kind: KindTensor, c: v.C, h: v.H, w: v.W}
	}
	return shape{}
}

func imageShape(w, h int) shape { return shape{kind: KindImage, c: Channels, h: h, w: w} }

// bytes is the shape's payload size, saturating rather than overflowing.
func (s shape) bytes() int64 {
	switch s.kind {
	case KindEncoded:
		if s.data == nil && s.w > 0 {
			return maxEncodedBytes(int64(s.w), int64(s.h))
		}
		return int64(len(s.data))
	case KindTensor:
		return mulSat(mulSat(mulSat(int64(s.c), int64(s.h)), int64(s.w)), 4)
	}
	return mulSat(mulSat(int64(s.w), int64(s.h)), int64(s.c))
}

func (s shape) String() string {
	if s.kind == KindTensor {
		return fmt.Sprintf("%dx%dx%d float32", s.c, s.h, s.w)
	}
	return fmt.Sprintf("%dx%dx%d", s.w, s.h, s.c)
}

// mulSat multiplies non-negative a and b, saturating at the largest int64.
func mulSat(a, b int64) int64 {
	if a <= 0 || b <= 0 {
		return 0
	}
	if a > (1<<63-1)/b {
		return 1<<63 - 1
	}
	return a * b
}

// shaper is implemented by every op of this package: outShape returns the
// shape of Apply's output for an input of shape in without allocating it,
// or the error Apply would return before allocating.
type shaper interface {
	outShape(in shape) (shape, error)
}

// checkOutput refuses an op whose output would exceed max bytes.
func checkOutput(name string, out shape, max int64) error {
	if max <= 0 {
		return nil
	}
	if n := out.bytes(); n > max {
		return wrapf(ErrTooLarge, "%s output %v = %s above the %s limit", name, out, bytesize.Format(n), bytesize.Format(max))
	}
	return nil
}

var (
	_ shaper = Decode{}
	_ shaper = RandomResizedCrop{}
	_ shaper = Resize{}
	_ shaper = CenterCrop{}
	_ shaper = RandomHorizontalFlip{}
	_ shaper = ToTensor{}
	_ shaper = Normalize{}
	_ shaper = Encode{}
	_ shaper = DecodeRandomResizedCrop{}
)

// limitOp returns op set to run under lim: decode ops take the smaller of
// their own limits and lim's.
func limitOp(op Op, lim Limits) Op {
	switch o := op.(type) {
	case Decode:
		o.Limits = lim.decode(o.Limits)
		return o
	case DecodeRandomResizedCrop:
		o.Limits = lim.decode(o.Limits)
		return o
	}
	return op
}
