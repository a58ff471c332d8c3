package ops

import "fmt"

// Kind names the representation of a [Value].
type Kind uint8

const (
	// KindEncoded is encoded image bytes (JPEG), as stored on disk.
	KindEncoded Kind = 1
	// KindImage is a decoded image: uint8, HWC, RGB.
	KindImage Kind = 2
	// KindTensor is a float32 CHW tensor.
	KindTensor Kind = 3
)

func (k Kind) String() string {
	switch k {
	case KindEncoded:
		return "encoded"
	case KindImage:
		return "image"
	case KindTensor:
		return "tensor"
	case KindCut:
		return "cut"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Value is one representation of a sample between two ops.
type Value interface {
	Kind() Kind
	// Size is the payload size in bytes: what crossing the link would cost
	// before any wire header or compression.
	Size() int
}

// Encoded is encoded image bytes (a JPEG file's contents).
type Encoded []byte

// Kind implements [Value].
func (Encoded) Kind() Kind { return KindEncoded }

// Size implements [Value].
func (e Encoded) Size() int { return len(e) }

// Image is a decoded 8-bit RGB image stored row-major, HWC: the pixel at
// (x, y) occupies Pix[(y*W+x)*3 : (y*W+x)*3+3].
type Image struct {
	W, H int
	Pix  []uint8
}

// Channels is the number of interleaved channels of every [Image].
const Channels = 3

// NewImage allocates a zeroed w x h image.
func NewImage(w, h int) *Image {
	return &Image{W: w, H: h, Pix: make([]uint8, w*h*Channels)}
}

// Kind implements [Value].
func (*Image) Kind() Kind { return KindImage }

// Size implements [Value].
func (m *Image) Size() int { return len(m.Pix) }

// Stride is the number of bytes in one row.
func (m *Image) Stride() int { return m.W * Channels }

// Tensor is a float32 tensor laid out CHW.
type Tensor struct {
	C, H, W int
	Data    []float32
}

// NewTensor allocates a zeroed c x h x w tensor.
func NewTensor(c, h, w int) *Tensor {
	return &Tensor{C: c, H: h, W: w, Data: make([]float32, c*h*w)}
}

// Kind implements [Value].
func (*Tensor) Kind() Kind { return KindTensor }

// Size implements [Value].
func (t *Tensor) Size() int { return len(t.Data) * 4 }

// Rect is an integer rectangle: origin (X, Y), extent W x H.
type Rect struct {
	X, Y, W, H int
}

func (r Rect) String() string { return fmt.Sprintf("%dx%d+%d+%d", r.W, r.H, r.X, r.Y) }
