package hostile

// A tiny JPEG writer: enough of the format to assemble valid and hostile
// files byte by byte, without an encoder, so that the corpus is the same in
// every build. Every image it codes is flat mid-grey: each block has DC 0
// and no AC coefficients, coded with one-symbol Huffman tables, so the
// entropy data of any size of image is a run of zero bits.

// Markers.
const (
	mSOF0  = 0xC0
	mSOF2  = 0xC2
	mSOF3  = 0xC3
	mDHT   = 0xC4
	mSOF5  = 0xC5
	mSOF9  = 0xC9
	mSOF10 = 0xCA
	mDAC   = 0xCC
	mRST0  = 0xD0
	mSOI   = 0xD8
	mEOI   = 0xD9
	mSOS   = 0xDA
	mDQT   = 0xDB
	mDRI   = 0xDD
	mAPP0  = 0xE0
	mAPP1  = 0xE1
	mAPP14 = 0xEE
	mCOM   = 0xFE
)

// comp is one frame component: its id and sampling factors.
type comp struct {
	id     byte
	hs, vs int
}

var (
	grey  = []comp{{1, 1, 1}}
	ycc   = []comp{{1, 1, 1}, {2, 1, 1}, {3, 1, 1}}
	ycc20 = []comp{{1, 2, 2}, {2, 1, 1}, {3, 1, 1}}
	cmyk  = []comp{{1, 1, 1}, {2, 1, 1}, {3, 1, 1}, {4, 1, 1}}
)

func segment(m byte, payload []byte) []byte {
	n := len(payload) + 2
	return append([]byte{0xFF, m, byte(n >> 8), byte(n)}, payload...)
}

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func soi() []byte { return []byte{0xFF, mSOI} }
func eoi() []byte { return []byte{0xFF, mEOI} }

func jfif() []byte {
	return segment(mAPP0, []byte{'J', 'F', 'I', 'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0})
}

// adobe is an APP14 Adobe marker with the given colour transform.
func adobe(xform byte) []byte {
	return segment(mAPP14, []byte{'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, xform})
}

// dqt is quantisation table 0, all ones.
func dqt() []byte {
	p := make([]byte, 65)
	for i := 1; i < 65; i++ {
		p[i] = 1
	}
	return segment(mDQT, p)
}

// dht holds the two tables every scan uses: DC table 0 codes only category
// 0 ("0"); AC table 0 codes EOB ("0") and EOB14 ("10", progressive EOB
// runs of 16384..32767 blocks).
func dht() []byte {
	dc := append([]byte{0x00, 1}, make([]byte, 15)...)
	dc = append(dc, 0x00)
	ac := append([]byte{0x10, 1, 1}, make([]byte, 14)...)
	ac = append(ac, 0x00, 0xE0)
	return segment(mDHT, append(dc, ac...))
}

func sof(m byte, precision byte, w, h int, comps []comp) []byte {
	p := []byte{precision, byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(len(comps))}
	for _, c := range comps {
		p = append(p, c.id, byte(c.hs<<4|c.vs), 0)
	}
	return segment(m, p)
}

// sos starts a scan of the given components (tables 0) with spectral
// selection ss..se and successive approximation ah, al.
func sos(comps []comp, ss, se, ah, al byte) []byte {
	p := []byte{byte(len(comps))}
	for _, c := range comps {
		p = append(p, c.id, 0x00)
	}
	return segment(mSOS, append(p, ss, se, ah<<4|al))
}

func dri(n int) []byte { return segment(mDRI, []byte{byte(n >> 8), byte(n)}) }

// bits writes entropy-coded data: MSB first, 0xFF stuffed with 0x00, the
// last byte padded with ones.
type bits struct {
	b    []byte
	acc  uint32
	nacc uint
}

func (w *bits) put(v uint32, n uint) {
	for i := int(n) - 1; i >= 0; i-- {
		w.acc = w.acc<<1 | (v>>uint(i))&1
		w.nacc++
		if w.nacc == 8 {
			w.b = append(w.b, byte(w.acc))
			if byte(w.acc) == 0xFF {
				w.b = append(w.b, 0)
			}
			w.acc, w.nacc = 0, 0
		}
	}
}

// zeros writes n zero bits, a byte at a time where it can.
func (w *bits) zeros(n int) {
	for n > 0 && w.nacc != 0 {
		w.put(0, 1)
		n--
	}
	for ; n >= 8; n -= 8 {
		w.b = append(w.b, 0)
	}
	w.put(0, uint(n))
}

func (w *bits) flush() []byte {
	if w.nacc > 0 {
		w.put(1<<(8-w.nacc)-1, 8-w.nacc)
	}
	b := w.b
	*w = bits{}
	return b
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// mcus returns the number of MCUs of an interleaved scan of comps and the
// blocks in each.
func mcus(w, h int, comps []comp) (n, blocks int) {
	hmax, vmax := 1, 1
	for _, c := range comps {
		hmax, vmax = max(hmax, c.hs), max(vmax, c.vs)
	}
	if len(comps) == 1 {
		// A non-interleaved scan codes the component's own blocks.
		c := comps[0]
		return ceilDiv(ceilDiv(w*c.hs, hmax), 8) * ceilDiv(ceilDiv(h*c.vs, vmax), 8), 1
	}
	for _, c := range comps {
		blocks += c.hs * c.vs
	}
	return ceilDiv(w, 8*hmax) * ceilDiv(h, 8*vmax), blocks
}

// baselineData is the entropy data of a flat baseline image: two zero bits
// (DC category 0, EOB) per block, with a restart marker every interval
// MCUs when interval > 0.
func baselineData(w, h int, comps []comp, interval int) []byte {
	n, blocks := mcus(w, h, comps)
	var out []byte
	var bw bits
	if interval <= 0 {
		bw.zeros(2 * blocks * n)
		return bw.flush()
	}
	for i := 0; i < n; i += interval {
		bw.zeros(2 * blocks * min(interval, n-i))
		out = append(out, bw.flush()...)
		if i+interval < n {
			out = append(out, 0xFF, byte(mRST0+(i/interval)%8))
		}
	}
	return out
}

// baseline is a valid flat w x h baseline JPEG.
func baseline(w, h int, comps []comp, extra ...[]byte) []byte {
	return cat(soi(), jfif(), cat(extra...), dqt(), dht(), sof(mSOF0, 8, w, h, comps),
		sos(comps, 0, 63, 0, 0), baselineData(w, h, comps, 0), eoi())
}

// Baseline returns a valid baseline JPEG of a flat grey w x h image with
// the given number of components (1, 3 or 4, all sampled 1x1).
func Baseline(w, h, components int) []byte {
	switch components {
	case 3:
		return baseline(w, h, ycc)
	case 4:
		return baseline(w, h, cmyk, adobe(0))
	}
	return baseline(w, h, grey)
}

// acFirst is the data of a first AC scan of n blocks that are all EOB: EOB14
// runs (16384..32767 blocks), then single EOBs.
func acFirst(n int) []byte {
	var bw bits
	for n >= 1<<14 {
		run := min(n, 1<<15-1)
		bw.put(0b10, 2)
		bw.put(uint32(run-1<<14), 14)
		n -= run
	}
	bw.zeros(n)
	return bw.flush()
}

// Progressive returns a valid progressive JPEG of a flat grey w x h image
// with the given number of scans (at least 1): a DC scan, then scans-1
// identical first AC scans, each a single EOB run over the whole image
// (legal: each has Ah equal to the previous Al, 0). It is the scan bomb of
// a security review: a few bytes a scan, each making the decoder visit
// every block.
func Progressive(w, h, scans int) []byte {
	n, _ := mcus(w, h, grey)
	var bw bits
	bw.zeros(n)
	b := cat(soi(), jfif(), dqt(), dht(), sof(mSOF2, 8, w, h, grey), sos(grey, 0, 0, 0, 0), bw.flush())
	ac := cat(sos(grey, 1, 63, 0, 0), acFirst(n))
	for i := 1; i < scans; i++ {
		b = append(b, ac...)
	}
	return append(b, eoi()...)
}

// HeaderBomb returns a header-only baseline JPEG of a colour (4:2:0)
// w x h frame: the flat image's tables, its scan header and 16 bytes of
// entropy data, about 700 bytes whatever w x h declares. At 65535x65535 it
// is the header bomb that a planner must not price as the 4.3 G-pixel
// decode it claims.
func HeaderBomb(w, h int) []byte { return header(mSOF0, 8, w, h, ycc20) }
