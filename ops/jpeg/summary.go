package jpeg

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Summary is what a planner needs of a JPEG's [Header], in SummarySize
// bytes: the dimensions, the component count, the MCU size and whether the
// frame is progressive, or that the header is unknown (the file is no
// JPEG ReadHeader parses, or its header did not fit the prefix read). The
// zero Summary is unknown.
//
// Its binary form (AppendBinary, ParseSummary) is 5 bytes: the width and
// the height as big-endian uint16s, then a flags byte:
//
//	bit 7     known (when clear, all 5 bytes are zero)
//	bit 6     progressive
//	bits 4-5  components: 0 = 1, 1 = 3, 2 = 4 (3 is invalid)
//	bits 2-3  MCU width / 8 - 1
//	bits 0-1  MCU height / 8 - 1
type Summary struct {
	w, h  uint16
	flags byte
}

// SummarySize is the size of a Summary's binary form.
const SummarySize = 5

const (
	sumKnown       = 1 << 7
	sumProgressive = 1 << 6
)

// ErrSummary: a Summary's binary form is invalid.
var ErrSummary = errors.New("ops: bad jpeg summary")

// Summary is h in SummarySize bytes; h must come from ReadHeader.
func (h Header) Summary() Summary {
	if h.W <= 0 || h.H <= 0 || h.W > 0xFFFF || h.H > 0xFFFF || h.MCUW < 8 || h.MCUH < 8 {
		return Summary{}
	}
	var c byte
	switch h.Components {
	case 1:
	case 3:
		c = 1
	case 4:
		c = 2
	default:
		return Summary{}
	}
	f := byte(sumKnown) | c<<4 | byte(h.MCUW/8-1)<<2 | byte(h.MCUH/8-1)
	if h.Progressive {
		f |= sumProgressive
	}
	return Summary{w: uint16(h.W), h: uint16(h.H), flags: f}
}

// Known reports whether the header was read.
func (s Summary) Known() bool { return s.flags&sumKnown != 0 }

// Width and Height are the frame's dimensions; zero when unknown.
func (s Summary) Width() int  { return int(s.w) }
func (s Summary) Height() int { return int(s.h) }

// Components is 1, 3 or 4; zero when unknown.
func (s Summary) Components() int {
	if !s.Known() {
		return 0
	}
	return [...]int{1, 3, 4, 0}[s.flags>>4&3]
}

// Progressive reports a progressive frame.
func (s Summary) Progressive() bool { return s.flags&sumProgressive != 0 }

// MCU is the minimum coded unit's size in pixels (see Header.MCUW); zero
// when unknown.
func (s Summary) MCU() (w, h int) {
	if !s.Known() {
		return 0, 0
	}
	return 8 * int(s.flags>>2&3+1), 8 * int(s.flags&3+1)
}

func (s Summary) String() string {
	if !s.Known() {
		return "unknown"
	}
	w, h := s.MCU()
	p := ""
	if s.Progressive() {
		p = " progressive"
	}
	return fmt.Sprintf("%dx%d %dc mcu %dx%d%s", s.w, s.h, s.Components(), w, h, p)
}

// AppendBinary appends s's SummarySize-byte binary form to b.
func (s Summary) AppendBinary(b []byte) ([]byte, error) {
	b = binary.BigEndian.AppendUint16(b, s.w)
	b = binary.BigEndian.AppendUint16(b, s.h)
	return append(b, s.flags), nil
}

// ParseSummary reads a Summary from the first SummarySize bytes of b and
// checks it: an unknown one all zero, a known one of nonzero dimensions
// and a valid component code. Errors wrap ErrSummary.
func ParseSummary(b []byte) (Summary, error) {
	if len(b) < SummarySize {
		return Summary{}, fmt.Errorf("%w: %d bytes, want %d", ErrSummary, len(b), SummarySize)
	}
	s := Summary{w: binary.BigEndian.Uint16(b), h: binary.BigEndian.Uint16(b[2:]), flags: b[4]}
	switch {
	case !s.Known():
		if s != (Summary{}) {
			return Summary{}, fmt.Errorf("%w: unknown, with % x", ErrSummary, b[:SummarySize])
		}
	case s.w == 0 || s.h == 0:
		return Summary{}, fmt.Errorf("%w: %dx%d", ErrSummary, s.w, s.h)
	case s.flags>>4&3 == 3:
		return Summary{}, fmt.Errorf("%w: component code 3", ErrSummary)
	}
	return s, nil
}

// Header is the header s summarises, for checking it against a
// DecodeLimits (DecodeLimits.Check) before any byte of the file is read:
// the dimensions, components, progression and MCU are s's, and the
// coefficient buffers are those of the usual sampling, the first
// component at the MCU's factors and every other at 1x1 (the fewest a
// frame with that MCU can have, so a file refused from its summary is
// refused from its real header too). The zero Header when s is unknown.
func (s Summary) Header() Header {
	if !s.Known() {
		return Header{}
	}
	mw, mh := s.MCU()
	return HeaderOf(s.Width(), s.Height(), s.Components(), s.Progressive(), mw, mh)
}

// HeaderOf is the header of a w x h frame of the given components,
// progression and MCU size in pixels, sampled as Summary.Header says.
func HeaderOf(w, h, components int, progressive bool, mcuw, mcuh int) Header {
	hd := Header{W: w, H: h, Components: components, Progressive: progressive, MCUW: mcuw, MCUH: mcuh, multiScan: progressive}
	if w <= 0 || h <= 0 {
		return hd
	}
	hmax, vmax := max(mcuw/8, 1), max(mcuh/8, 1)
	if components == 1 {
		hmax, vmax = 1, 1
	}
	up := func(a, b int) int64 { return int64((a + b - 1) / b) }
	for i := range max(components, 1) {
		hs, vs := 1, 1
		if i == 0 {
			hs, vs = hmax, vmax
		}
		bw, bh := up(w*hs, hmax*8), up(h*vs, vmax*8)
		hd.coefBlocks += (bw + int64(hs) - 1) / int64(hs) * int64(hs) * ((bh + int64(vs) - 1) / int64(vs) * int64(vs))
	}
	return hd
}
