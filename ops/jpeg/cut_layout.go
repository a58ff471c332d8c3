package jpeg

// This file holds the pure-Go checks that decide whether a JPEG can be cut
// exactly: its sampling factors and, for a progressive frame, whether its
// scans complete every coefficient. The cgo backend runs them before the
// lossless transform.

// Chroma subsamplings as libturbojpeg numbers them (TJSAMP_*).
const (
	cutSamp444  = 0
	cutSamp422  = 1
	cutSamp420  = 2
	cutSampGray = 3
	cutSamp440  = 4
	cutSamp411  = 5
)

// cutLayout is what a cut needs to know of a JPEG beyond its header.
type cutLayout struct {
	// samp is the libturbojpeg subsampling (cutSamp444, ...).
	samp int
	// mcuW, mcuH is the iMCU: the unit a lossless crop moves in.
	mcuW, mcuH int
	// factors are the components' sampling factors (h, v), from the frame
	// header.
	factors [4][2]int
	n       int
}

// readCutLayout checks that data, whose header is h, has a layout the cut
// reproduces exactly, and returns it. Every refusal wraps ErrCannotCut: it
// says nothing about whether the file decodes, which the decode decides.
//
// It accepts the chroma subsamplings libturbojpeg names, written the
// standard way (libjpeg's): grey with 1x1 factors; three components whose
// first has factors 1x1 (4:4:4), 2x1 (4:2:2), 2x2 (4:2:0), 1x2 (4:4:0) or
// 4x1 (4:1:1) over 1x1 chroma; four (CMYK, YCCK) likewise, with the fourth
// sampled as the first. Each of these upsamples chroma by a whole factor,
// reading at most one neighbouring chroma sample on each side. A
// progressive frame must bring every coefficient of every component to full
// precision (a last scan with Al = 0): otherwise libjpeg's block smoothing
// would make the full decode differ from the cut's.
//
// It walks the markers up to the first scan (through every scan of a
// progressive frame), skipping entropy-coded data without decoding it: time
// linear in len(data), no allocation.
func readCutLayout(data []byte, h Header) (cutLayout, error) {
	var (
		l       cutLayout
		ids     [4]byte
		sawSOF  bool
		bits    [4][64]int8 // libjpeg's coef_bits: -1 until a scan sends the coefficient, then its Al
		scans   int
		inScans bool
	)
	for c := range bits {
		for k := range bits[c] {
			bits[c][k] = -1
		}
	}
	p := 2 // after SOI
	for {
		if p+1 >= len(data) {
			if !inScans {
				return l, wrapf(ErrCannotCut, "the file ends at offset %d before its first scan", p)
			}
			return l, wrapf(ErrCannotCut, "the progressive file ends after %d scans without an EOI marker", scans)
		}
		if data[p] != 0xFF {
			return l, wrapf(ErrCannotCut, "byte 0x%02x at offset %d where a marker should start", data[p], p)
		}
		m := data[p+1]
		p += 2
		switch {
		case m == 0xFF:
			p-- // fill byte
			continue
		case m == 0xD9: // EOI
			if !inScans {
				return l, wrapf(ErrCannotCut, "EOI marker before any scan")
			}
			return l, l.checkComplete(&bits, scans)
		case m == 0x01 || (m >= 0xD0 && m <= 0xD8):
			continue
		}
		if p+1 >= len(data) {
			return l, wrapf(ErrCannotCut, "the file ends inside marker 0x%02x", m)
		}
		n := int(data[p])<<8 | int(data[p+1])
		if n < 2 || len(data)-p < n {
			return l, wrapf(ErrCannotCut, "marker 0x%02x at offset %d has length %d", m, p-2, n)
		}
		seg := data[p+2 : p+n]
		p += n
		switch {
		case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC: // SOFn
			if sawSOF {
				return l, wrapf(ErrCannotCut, "the frame header SOF%d disagrees with the header parse", m-0xC0)
			}
			sawSOF = true
			if err := l.frame(h, m, seg, &ids); err != nil {
				return l, err
			}
		case m == 0xDA: // SOS
			if !sawSOF {
				return l, wrapf(ErrCannotCut, "a scan before the frame header")
			}
			if !h.Progressive {
				return l, nil
			}
			inScans = true
			scans++
			if err := cutScanBits(seg, l.n, &ids, &bits); err != nil {
				return l, err
			}
			p = skipEntropy(data, p)
		}
	}
}

// frame reads the frame header seg of SOF marker m into l and ids, or
// refuses it.
func (l *cutLayout) frame(h Header, m byte, seg []byte, ids *[4]byte) error {
	if len(seg) < 6 || len(seg) != 6+3*int(seg[5]) || int(seg[5]) != h.Components {
		return wrapf(ErrCannotCut, "the frame header SOF%d disagrees with the header parse", m-0xC0)
	}
	if m >= 0xC9 {
		// Arithmetic coding: libjpeg's arithmetic decoder reads corrupt
		// data without a warning the transform could stop on, and the
		// Huffman-coded cut of such a file need not decode (found by
		// FuzzCut). Rare in practice: declined.
		return wrapf(ErrCannotCut, "arithmetic-coded frame SOF%d", m-0xC0)
	}
	l.n = h.Components
	for i := range l.n {
		ids[i] = seg[6+3*i]
		l.factors[i] = [2]int{int(seg[7+3*i] >> 4), int(seg[7+3*i] & 15)}
	}
	return l.classify(h)
}

// classify sets l's subsampling and iMCU from its factors, or refuses them.
func (l *cutLayout) classify(h Header) error {
	f := l.factors
	if l.n == 1 {
		if f[0] != [2]int{1, 1} {
			return wrapf(ErrCannotCut, "grey JPEG with sampling factors %dx%d", f[0][0], f[0][1])
		}
		l.samp, l.mcuW, l.mcuH = cutSampGray, 8, 8
		return nil
	}
	one := [2]int{1, 1}
	if f[1] != one || f[2] != one || (l.n == 4 && f[3] != f[0]) {
		return wrapf(ErrCannotCut, "chroma sampling factors %v of a %s JPEG are not a standard subsampling", f[:l.n], h.ColorSpace)
	}
	switch f[0] {
	case [2]int{1, 1}:
		l.samp = cutSamp444
	case [2]int{2, 1}:
		l.samp = cutSamp422
	case [2]int{2, 2}:
		l.samp = cutSamp420
	case [2]int{1, 2}:
		l.samp = cutSamp440
	case [2]int{4, 1}:
		l.samp = cutSamp411
	default:
		return wrapf(ErrCannotCut, "luma sampling factors %dx%d over 1x1 chroma are not a standard subsampling", f[0][0], f[0][1])
	}
	l.mcuW, l.mcuH = 8*f[0][0], 8*f[0][1]
	return nil
}

// checkComplete refuses a progressive frame whose scans leave a coefficient
// of some component unsent or short of full precision.
func (l *cutLayout) checkComplete(bits *[4][64]int8, scans int) error {
	for c := range l.n {
		for k, b := range bits[c] {
			if b != 0 {
				if b < 0 {
					return wrapf(ErrCannotCut, "the %d scans of the progressive JPEG never send coefficient %d of component %d", scans, k, c)
				}
				return wrapf(ErrCannotCut, "the %d scans of the progressive JPEG leave coefficient %d of component %d at %d bits short of full precision", scans, k, c, b)
			}
		}
	}
	return nil
}

// cutScanBits records the coefficients a progressive scan header sends, as
// libjpeg's coef_bits does: each coefficient Ss..Se of each of its
// components now has its low Al bits unknown.
func cutScanBits(seg []byte, nf int, ids *[4]byte, bits *[4][64]int8) error {
	if len(seg) < 1 || len(seg) != 4+2*int(seg[0]) {
		return wrapf(ErrCannotCut, "a scan header of %d bytes", len(seg))
	}
	ns := int(seg[0])
	ss, se := int(seg[1+2*ns]), int(seg[2+2*ns])
	al := int8(seg[3+2*ns] & 15)
	if ss > se || se > 63 {
		return wrapf(ErrCannotCut, "a progressive scan of coefficients %d..%d", ss, se)
	}
	for i := range ns {
		c := -1
		for j := range nf {
			if ids[j] == seg[1+2*i] {
				c = j
				break
			}
		}
		if c < 0 {
			return wrapf(ErrCannotCut, "a scan of unknown component id %d", seg[1+2*i])
		}
		for k := ss; k <= se; k++ {
			bits[c][k] = al
		}
	}
	return nil
}

// cutCoefBlocks is the number of 8x8 blocks libjpeg allocates for a w x h
// image of layout l: each component's rounded up to whole iMCUs, as
// parseSOF counts them.
func (l *cutLayout) cutCoefBlocks(w, h int) int64 {
	hmax, vmax := 1, 1
	for i := range l.n {
		hmax, vmax = max(hmax, l.factors[i][0]), max(vmax, l.factors[i][1])
	}
	up := func(a, b int) int { return (a + b - 1) / b }
	var n int64
	for i := range l.n {
		hs, vs := l.factors[i][0], l.factors[i][1]
		bw, bh := up(w*hs, hmax*8), up(h*vs, vmax*8)
		n += int64(up(bw, hs)*hs) * int64(up(bh, vs)*vs)
	}
	return n
}
