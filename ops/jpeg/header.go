package jpeg

// Header is what the SOF/APP markers declare. Only [ReadHeader] makes a
// complete one: the codec's own fields below are unexported.
type Header struct {
	W, H int
	// Components is 1 (grey), 3 (YCbCr or RGB) or 4 (CMYK or YCCK).
	Components int
	// ColorSpace is "gray", "ycbcr", "rgb", "cmyk" or "ycck", decided from
	// the JFIF and Adobe markers and the component ids exactly as libjpeg's
	// jpeg_read_header does.
	ColorSpace string
	// Progressive is set for SOF2 and SOF10 frames.
	Progressive bool
	// MCUW and MCUH are the size in pixels of the frame's minimum coded
	// unit: 8 times the largest horizontal and vertical sampling factors
	// (16x16 for 4:2:0, 16x8 for 4:2:2, 8x8 for 4:4:4), and 8x8 for a
	// one-component frame, whose scan is never interleaved. They say how
	// much chroma a decode must upsample and how finely a lossless cut
	// can move.
	MCUW, MCUH int

	// multiScan is set when libjpeg must buffer the whole image's
	// coefficients: a progressive frame, or a first scan that does not
	// hold every component (jdinput.c's has_multiple_scans).
	multiScan bool
	// coefBlocks is the number of 8x8 blocks of all components, each
	// component's rounded up to whole MCUs as libjpeg's coefficient buffer
	// rounds them.
	coefBlocks int64
}

// ReadHeader parses the markers of a JPEG from SOI up to the first SOS
// (so that APP markers after the frame header count, as in libjpeg) and
// returns what the frame header declares. It is pure Go in both builds and
// allocates nothing in proportion to the image.
//
// It is as strict as the decoder: bytes that are not a marker where one must
// be give ErrCorrupt; data ending before SOS gives ErrTruncated; lossless,
// hierarchical and 12-bit frames, zero height (DNL) and component counts
// other than 1, 3 and 4 give ErrUnsupported.
func ReadHeader(data []byte) (Header, error) {
	var h Header
	switch {
	case len(data) == 0:
		return h, ErrEmpty
	case len(data) == 1 && data[0] == 0xFF:
		return h, wrapf(ErrTruncated, "input ends inside the SOI marker")
	case len(data) < 2 || data[0] != 0xFF || data[1] != 0xD8:
		n := min(len(data), 4)
		return h, wrapf(ErrNotJPEG, "input starts % x, want ff d8", data[:n])
	}
	var st headerMarkers
	p := 2
	for {
		if p >= len(data) {
			return st.h, wrapf(ErrTruncated, "input ends at offset %d, before the SOS marker", p)
		}
		if data[p] != 0xFF {
			return st.h, wrapf(ErrCorrupt, "byte 0x%02x at offset %d where a marker should start", data[p], p)
		}
		for p < len(data) && data[p] == 0xFF {
			p++ // fill bytes
		}
		if p >= len(data) {
			return st.h, wrapf(ErrTruncated, "input ends inside a marker at offset %d", p)
		}
		m := data[p]
		p++
		switch {
		case m == 0xD8:
			return st.h, wrapf(ErrCorrupt, "second SOI marker at offset %d", p-2)
		case m == 0xD9:
			return st.h, wrapf(ErrCorrupt, "EOI marker at offset %d before any scan", p-2)
		case m == 0x01 || (m >= 0xD0 && m <= 0xD7):
			continue // standalone TEM, RSTn
		case m == 0x00:
			return st.h, wrapf(ErrCorrupt, "invalid marker 0xff00 at offset %d", p-2)
		}
		if len(data)-p < 2 {
			return st.h, wrapf(ErrTruncated, "input ends inside the length of marker 0x%02x at offset %d", m, p-2)
		}
		n := int(data[p])<<8 | int(data[p+1])
		if n < 2 {
			return st.h, wrapf(ErrCorrupt, "marker 0x%02x at offset %d has length %d", m, p-2, n)
		}
		if len(data)-p < n {
			return st.h, wrapf(ErrTruncated, "input ends inside marker 0x%02x at offset %d (length %d)", m, p-2, n)
		}
		seg := data[p+2 : p+n]
		p += n
		if done, err := st.segment(m, seg); done || err != nil {
			return st.h, err
		}
	}
}

// headerMarkers is what ReadHeader has gathered from the markers so far.
type headerMarkers struct {
	h             Header
	sawSOF        bool
	jfif, adobe   bool
	adobeXform    byte
	id0, id1, id2 byte
}

// segment takes the payload seg of marker m; done is set at the first SOS,
// when the header is complete.
func (st *headerMarkers) segment(m byte, seg []byte) (done bool, err error) {
	h := &st.h
	switch {
	case m == 0xDA: // SOS
		if !st.sawSOF {
			return false, wrapf(ErrCorrupt, "SOS marker before any SOF marker")
		}
		h.ColorSpace = colorSpace(h.Components, st.jfif, st.adobe, st.adobeXform, st.id0, st.id1, st.id2)
		h.multiScan = h.Progressive || (len(seg) > 0 && int(seg[0]) < h.Components)
		return true, nil
	case m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC: // SOFn
		if st.sawSOF {
			return false, wrapf(ErrCorrupt, "second SOF marker 0x%02x", m)
		}
		st.sawSOF = true
		if err := parseSOF(h, m, seg); err != nil {
			return false, err
		}
		st.id0 = seg[6]
		if h.Components >= 3 {
			st.id1, st.id2 = seg[9], seg[12]
		}
	case m == 0xE0: // APP0: libjpeg's examine_app0 needs 14 bytes
		if len(seg) >= 14 && string(seg[:5]) == "JFIF\x00" {
			st.jfif = true
		}
	case m == 0xEE: // APP14: libjpeg's examine_app14 needs 12 bytes
		if len(seg) >= 12 && string(seg[:5]) == "Adobe" {
			st.adobe = true
			st.adobeXform = seg[11]
		}
	}
	return false, nil
}

// scansOver reports whether data has more than max SOS markers before
// its EOI (or its end). It walks the marker segments and skips entropy-coded
// data to its next marker without decoding it, in time linear in len(data)
// and with no allocation. Malformed structure ends the count: the decoder
// reports it.
func scansOver(data []byte, max int) bool {
	scans := 0
	p := 2 // after SOI
	for p+1 < len(data) {
		if data[p] != 0xFF {
			return false
		}
		m := data[p+1]
		p += 2
		switch {
		case m == 0xFF:
			p-- // fill byte
			continue
		case m == 0xD9:
			return false
		case m == 0x01 || (m >= 0xD0 && m <= 0xD8):
			continue
		}
		if p+1 >= len(data) {
			return false
		}
		p += int(data[p])<<8 | int(data[p+1])
		if m != 0xDA {
			continue
		}
		if scans++; scans > max {
			return true
		}
		p = skipEntropy(data, p)
	}
	return false
}

// skipEntropy returns the offset, at or after p, of the 0xFF that starts
// the marker ending the entropy-coded data at p: the next 0xFF followed by
// a byte other than 0x00 (a stuffed 0xFF byte) or an RSTn. Without one it
// stops at the last byte of data (or at p, where p is past it).
func skipEntropy(data []byte, p int) int {
	for p+1 < len(data) {
		if data[p] == 0xFF {
			if n := data[p+1]; n != 0x00 && (n < 0xD0 || n > 0xD7) {
				break
			}
		}
		p++
	}
	return p
}

// parseSOF fills h from the payload of SOF marker m.
func parseSOF(h *Header, m byte, seg []byte) error {
	switch m {
	case 0xC3, 0xC5, 0xC6, 0xC7, 0xCB, 0xCD, 0xCE, 0xCF:
		return wrapf(ErrUnsupported, "lossless or hierarchical frame SOF%d", m-0xC0)
	}
	if len(seg) < 6 {
		return wrapf(ErrCorrupt, "SOF%d marker of %d bytes", m-0xC0, len(seg))
	}
	nf := int(seg[5])
	if len(seg) != 6+3*nf {
		return wrapf(ErrCorrupt, "SOF%d marker of %d bytes for %d components", m-0xC0, len(seg), nf)
	}
	if seg[0] != 8 {
		return wrapf(ErrUnsupported, "%d-bit samples", seg[0])
	}
	h.H = int(seg[1])<<8 | int(seg[2])
	h.W = int(seg[3])<<8 | int(seg[4])
	h.Components = nf
	h.Progressive = m == 0xC2 || m == 0xCA
	switch {
	case h.W == 0:
		return wrapf(ErrCorrupt, "frame of width 0")
	case h.H == 0:
		return wrapf(ErrUnsupported, "frame of height 0 (height in a DNL marker)")
	case nf != 1 && nf != 3 && nf != 4:
		return wrapf(ErrUnsupported, "%d colour components", nf)
	}
	hmax, vmax := 1, 1
	for i := range nf {
		hs, vs := int(seg[7+3*i]>>4), int(seg[7+3*i]&15)
		if hs < 1 || hs > 4 || vs < 1 || vs > 4 {
			return wrapf(ErrCorrupt, "component %d has sampling factors %dx%d", i, hs, vs)
		}
		hmax, vmax = max(hmax, hs), max(vmax, vs)
	}
	h.MCUW, h.MCUH = 8*hmax, 8*vmax
	if nf == 1 {
		h.MCUW, h.MCUH = 8, 8
	}
	up := func(a, b int) int { return (a + b - 1) / b }
	for i := range nf {
		hs, vs := int(seg[7+3*i]>>4), int(seg[7+3*i]&15)
		bw, bh := up(h.W*hs, hmax*8), up(h.H*vs, vmax*8)
		h.coefBlocks += int64(up(bw, hs)*hs) * int64(up(bh, vs)*vs)
	}
	return nil
}

// colorSpace is libjpeg's default_decompress_parms guess at the colour
// space of the coded components.
func colorSpace(nf int, jfif, adobe bool, xform, id0, id1, id2 byte) string {
	switch nf {
	case 1:
		return "gray"
	case 3:
		switch {
		case jfif:
			return "ycbcr"
		case adobe:
			if xform == 0 {
				return "rgb"
			}
			return "ycbcr"
		case id0 == 'R' && id1 == 'G' && id2 == 'B':
			return "rgb"
		}
		return "ycbcr"
	default:
		if adobe && xform != 0 {
			return "ycck"
		}
		return "cmyk"
	}
}
