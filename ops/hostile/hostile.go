// Package hostile generates a deterministic corpus of hostile JPEG files
// for tests of decoders and of servers that decode what clients send:
// empty and foreign inputs, truncations, corrupt entropy data, bad markers,
// impossible and enormous frame headers, decompression and scan bombs,
// unsupported codings, and abuse of restart markers and segments. Each
// [Case] says which ops sentinel error a decode-led pipeline run under
// [ops.DefaultLimits] must return (nil: it decodes).
//
// The files are assembled byte by byte (no encoder), so the corpus is the
// same in every build, cgo or not, and small (well under 5 MB in all).
package hostile

import (
	"bytes"

	"github.com/sophon-dl/sophon/ops"
)

// Case is one file of the corpus.
type Case struct {
	// Name is unique in the corpus, e.g. "truncated/mid-entropy".
	Name string
	// Category groups cases by the kind of attack, e.g. "truncated".
	Category string
	Data     []byte
	// Want is the ops sentinel (ops.ErrTooLarge, ...) that a decode under
	// ops.DefaultLimits returns with the libjpeg-turbo backend, nil when
	// the file decodes.
	Want error
}

// Corpus returns every case, in a fixed order, freshly built (the caller
// may modify the bytes).
func Corpus() []Case {
	var cs []Case
	add := func(category, name string, want error, data []byte) {
		cs = append(cs, Case{Name: category + "/" + name, Category: category, Data: data, Want: want})
	}
	base := baseline(64, 48, ycc)
	// Offsets into base: where its scan header and entropy data start.
	sosAt := bytes.Index(base, []byte{0xFF, mSOS})
	dataAt := sosAt + 2 + (int(base[sosAt+2])<<8 | int(base[sosAt+3]))
	sofAt := bytes.Index(base, []byte{0xFF, mSOF0})
	dhtAt := bytes.Index(base, []byte{0xFF, mDHT})
	head := func() []byte { return bytes.Clone(base[:dataAt]) } // through SOS

	// Valid controls: the corpus must not refuse what is fine.
	add("valid", "baseline-ycc-64x48", nil, bytes.Clone(base))
	add("valid", "baseline-grey-1x1", nil, baseline(1, 1, grey))
	add("valid", "baseline-420-33x17", nil, baseline(33, 17, ycc20))
	add("valid", "data-after-eoi", nil, cat(base, []byte("trailing garbage after EOI")))

	add("empty", "zero-bytes", ops.ErrEmpty, []byte{})

	add("not-jpeg", "png", ops.ErrNotJPEG, []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x10\x00\x00\x00\x10\x08\x02\x00\x00\x00"))
	add("not-jpeg", "gif", ops.ErrNotJPEG, []byte("GIF89a\x10\x00\x10\x00\x80\x00\x00\xff\xff\xff\x00\x00\x00,"))
	add("not-jpeg", "text", ops.ErrNotJPEG, []byte("<html><body>not an image</body></html>\n"))
	add("not-jpeg", "eoi-first", ops.ErrNotJPEG, []byte{0xFF, mEOI, 0xFF, mSOI})
	add("not-jpeg", "zero-bytes-kilobyte", ops.ErrNotJPEG, make([]byte, 1024))

	add("truncated", "one-byte", ops.ErrTruncated, []byte{0xFF})
	add("truncated", "soi-only", ops.ErrTruncated, soi())
	add("truncated", "inside-app0", ops.ErrTruncated, bytes.Clone(base[:10]))
	add("truncated", "inside-dht", ops.ErrTruncated, bytes.Clone(base[:dhtAt+9]))
	add("truncated", "after-sof", ops.ErrTruncated, bytes.Clone(base[:sosAt]))
	add("truncated", "after-sos", ops.ErrTruncated, head())
	add("truncated", "mid-entropy", ops.ErrTruncated, bytes.Clone(base[:dataAt+(len(base)-2-dataAt)/2]))
	add("truncated", "no-eoi", ops.ErrTruncated, bytes.Clone(base[:len(base)-2]))

	// Entropy data the tables cannot decode: the DC table has only the
	// code "0", so a one bit is invalid.
	add("corrupt-huffman", "all-ones", ops.ErrCorrupt, cat(head(), bytes.Repeat([]byte{0xFE}, 64), eoi()))
	add("corrupt-huffman", "stuffed-ff", ops.ErrCorrupt, cat(head(), bytes.Repeat([]byte{0xFF, 0x00}, 64), eoi()))
	add("corrupt-huffman", "dc-symbol-16", ops.ErrCorrupt, replace(base, dht(),
		segment(mDHT, cat([]byte{0x00, 1}, make([]byte, 15), []byte{16}, []byte{0x10, 1}, make([]byte, 15), []byte{0}))))
	add("corrupt-huffman", "oversubscribed-table", ops.ErrCorrupt, replace(base, dht(),
		segment(mDHT, cat([]byte{0x00, 3}, make([]byte, 15), []byte{0, 1, 2}, []byte{0x10, 1}, make([]byte, 15), []byte{0}))))

	add("bad-marker", "junk-before-marker", ops.ErrCorrupt, cat(soi(), []byte{0x12, 0x34}, base[2:]))
	add("bad-marker", "second-soi", ops.ErrCorrupt, cat(soi(), base))
	add("bad-marker", "eoi-before-scan", ops.ErrCorrupt, cat(base[:sofAt], eoi()))
	add("bad-marker", "ff00-in-header", ops.ErrCorrupt, cat(soi(), []byte{0xFF, 0x00}, base[2:]))
	add("bad-marker", "sos-before-sof", ops.ErrCorrupt, cat(soi(), sos(ycc, 0, 63, 0, 0), base[2:]))
	add("bad-marker", "marker-inside-entropy", ops.ErrCorrupt, cat(base[:dataAt+2], []byte{0xFF, 0xC4}, base[dataAt+2:]))

	add("sof-dimensions", "width-0", ops.ErrCorrupt, baseline(0, 16, ycc))
	add("sof-dimensions", "height-0-dnl", ops.ErrUnsupported, baseline(16, 0, ycc))
	add("sof-dimensions", "65535x1", ops.ErrTooLarge, header(mSOF0, 8, 65535, 1, ycc))
	add("sof-dimensions", "sampling-0x0", ops.ErrCorrupt, header(mSOF0, 8, 16, 16, []comp{{1, 0, 0}, {2, 1, 1}, {3, 1, 1}}))
	add("sof-dimensions", "sampling-5x1", ops.ErrCorrupt, header(mSOF0, 8, 16, 16, []comp{{1, 5, 1}, {2, 1, 1}, {3, 1, 1}}))

	// Frame headers that declare far more pixels than the file holds.
	add("header-bomb", "65000x65000-in-1k", ops.ErrTooLarge, cat(header(mSOF0, 8, 65000, 65000, ycc), make([]byte, 1024-len(header(mSOF0, 8, 65000, 65000, ycc)))))
	add("header-bomb", "65500x65500-grey", ops.ErrTooLarge, header(mSOF0, 8, 65500, 65500, grey))
	add("header-bomb", "32768x32768-progressive", ops.ErrTooLarge, header(mSOF2, 8, 32768, 32768, ycc))
	add("header-bomb", "20000x20000-cmyk", ops.ErrTooLarge, header(mSOF0, 8, 20000, 20000, cmyk))

	// The server's cap is 32 Mi pixels = 8192x4096.
	add("pixel-cap", "8193x4096", ops.ErrTooLarge, header(mSOF0, 8, 8193, 4096, grey))
	add("pixel-cap", "4096x8193", ops.ErrTooLarge, header(mSOF0, 8, 4096, 8193, grey))
	add("pixel-cap", "8192x4096-16-bytes", ops.ErrCorrupt, header(mSOF0, 8, 8192, 4096, grey))

	add("progressive-scans", "64-scans", nil, Progressive(64, 64, ops.DefaultMaxScans))
	add("progressive-scans", "65-scans", ops.ErrTooLarge, Progressive(64, 64, ops.DefaultMaxScans+1))
	add("progressive-scans", "2080-scans", ops.ErrTooLarge, Progressive(512, 512, 2080))
	add("progressive-scans", "20000-scans-1024x1024", ops.ErrTooLarge, Progressive(1024, 1024, 20000))

	// Within the pixel cap, but a buffered image needs 128 bytes of
	// coefficients per block: 6000x5000 4:4:4 needs 180 MB.
	add("coefficient-memory", "progressive-6000x5000-444", ops.ErrTooLarge, header(mSOF2, 8, 6000, 5000, ycc))
	add("coefficient-memory", "progressive-5000x5000-cmyk", ops.ErrTooLarge, cat(soi(), adobe(0), header(mSOF2, 8, 5000, 5000, cmyk)[2:]))
	add("coefficient-memory", "non-interleaved-6000x5000", ops.ErrTooLarge,
		cat(soi(), dqt(), dht(), sof(mSOF0, 8, 6000, 5000, ycc), sos(ycc[:1], 0, 63, 0, 0), make([]byte, 64), eoi()))

	// libjpeg's arithmetic decoder reads zeros past the end of a scan's
	// data without a warning, so a scan can be its 10-byte header alone.
	add("arithmetic", "sof9-no-data", nil, cat(soi(), dqt(), sof(mSOF9, 8, 64, 48, ycc), sos(ycc, 0, 63, 0, 0), eoi()))
	add("arithmetic", "sof10-64-scans", nil, arithProgressive(64, 64, ops.DefaultMaxScans))
	add("arithmetic", "sof10-65-scans", ops.ErrTooLarge, arithProgressive(64, 64, ops.DefaultMaxScans+1))
	add("arithmetic", "sof10-50000-scans-1024x1024", ops.ErrTooLarge, arithProgressive(1024, 1024, 50000))
	add("arithmetic", "sof9-extraneous-bytes", ops.ErrCorrupt, cat(soi(), dqt(), sof(mSOF9, 8, 64, 48, ycc), sos(ycc, 0, 63, 0, 0), make([]byte, 64), eoi()))
	add("arithmetic", "sof9-bad-dac", ops.ErrCorrupt, cat(soi(), dqt(), segment(mDAC, []byte{0x00, 0x0F}), sof(mSOF9, 8, 64, 48, ycc), sos(ycc, 0, 63, 0, 0), make([]byte, 64), eoi()))
	add("arithmetic", "sof10-progressive-header-bomb", ops.ErrTooLarge, header(mSOF10, 8, 65000, 65000, ycc))

	add("precision", "12-bit", ops.ErrUnsupported, header(mSOF0, 12, 64, 48, ycc))
	add("precision", "16-bit", ops.ErrUnsupported, header(mSOF0, 16, 64, 48, ycc))
	add("precision", "0-bit", ops.ErrUnsupported, header(mSOF0, 0, 64, 48, ycc))

	add("lossless", "sof3", ops.ErrUnsupported, header(mSOF3, 8, 64, 48, ycc))
	add("lossless", "sof5-hierarchical", ops.ErrUnsupported, header(mSOF5, 8, 64, 48, ycc))

	add("cmyk", "adobe-cmyk", nil, baseline(32, 32, cmyk, adobe(0)))
	add("cmyk", "adobe-ycck", nil, baseline(32, 32, cmyk, adobe(2)))
	add("cmyk", "cmyk-no-adobe", nil, baseline(32, 32, cmyk))

	add("components", "2-components", ops.ErrUnsupported, header(mSOF0, 8, 16, 16, ycc[:2]))
	add("components", "5-components", ops.ErrUnsupported, header(mSOF0, 8, 16, 16, append(cmyk[:4:4], comp{5, 1, 1})))
	add("components", "255-components", ops.ErrUnsupported, header(mSOF0, 8, 16, 16, manyComps(255)))
	add("components", "0-components", ops.ErrUnsupported, header(mSOF0, 8, 16, 16, nil))
	add("components", "sos-unknown-id", ops.ErrCorrupt, cat(soi(), dqt(), dht(), sof(mSOF0, 8, 16, 16, ycc), sos([]comp{{9, 1, 1}, {2, 1, 1}, {3, 1, 1}}, 0, 63, 0, 0), baselineData(16, 16, ycc, 0), eoi()))

	// Restart markers: every MCU (legal), missing, out of order.
	restart := func(data []byte) []byte {
		return cat(soi(), jfif(), dqt(), dht(), dri(1), sof(mSOF0, 8, 256, 256, ycc), sos(ycc, 0, 63, 0, 0), data, eoi())
	}
	every := baselineData(256, 256, ycc, 1)
	add("restart", "rst-every-mcu", nil, restart(every))
	add("restart", "rst-missing", ops.ErrCorrupt, restart(baselineData(256, 256, ycc, 0)))
	add("restart", "rst-out-of-order", ops.ErrCorrupt, restart(bytes.Replace(every, []byte{0xFF, mRST0 + 1}, []byte{0xFF, mRST0 + 5}, 1)))
	add("restart", "dri-bad-length", ops.ErrCorrupt, cat(soi(), segment(mDRI, []byte{0, 1, 0}), base[2:]))

	// Oversized and empty segments.
	big := make([]byte, 65533)
	for i := range big {
		big[i] = byte(i * 7)
	}
	add("segments", "eight-64k-app1", nil, baseline(64, 48, ycc, bytes.Repeat(segment(mAPP1, big), 8)))
	add("segments", "64k-com", nil, baseline(64, 48, ycc, segment(mCOM, big)))
	add("segments", "app-longer-than-file", ops.ErrTruncated, cat(soi(), []byte{0xFF, mAPP1, 0xFF, 0xF0}, make([]byte, 100)))
	add("segments", "zero-length-app0", ops.ErrCorrupt, cat(soi(), []byte{0xFF, mAPP0, 0, 0}, base[2:]))
	add("segments", "empty-app0", nil, cat(soi(), []byte{0xFF, mAPP0, 0, 2}, base[2:]))
	add("segments", "empty-dqt", ops.ErrCorrupt, cat(soi(), dht(), segment(mDQT, nil), sof(mSOF0, 8, 16, 16, ycc), sos(ycc, 0, 63, 0, 0), baselineData(16, 16, ycc, 0), eoi()))
	add("segments", "dqt-index-9", ops.ErrCorrupt, replace(base, dqt(), segment(mDQT, append([]byte{0x09}, dqt()[5:]...))))
	add("segments", "dht-index-9", ops.ErrCorrupt, replace(base, dht(), segment(mDHT, append([]byte{0x09}, dht()[5:]...))))
	return cs
}

// header is a frame with the flat image's tables and scan header but only
// a few bytes of entropy data: a header-only bomb when w x h is large.
func header(m, precision byte, w, h int, comps []comp) []byte {
	scan := comps
	if len(scan) > 4 {
		scan = scan[:4]
	}
	var se byte = 63
	if m == mSOF2 || m == mSOF10 {
		se = 0 // a progressive scan codes DC first
	}
	return cat(soi(), jfif(), dqt(), dht(), sof(m, precision, w, h, comps), sos(scan, 0, se, 0, 0), make([]byte, 16), eoi())
}

// arithProgressive is an arithmetic-coded progressive grey image of the
// given number of scans, none with any data.
func arithProgressive(w, h, scans int) []byte {
	b := cat(soi(), dqt(), sof(mSOF10, 8, w, h, grey), sos(grey, 0, 0, 0, 0))
	ac := sos(grey, 1, 63, 0, 0)
	for i := 1; i < scans; i++ {
		b = append(b, ac...)
	}
	return append(b, eoi()...)
}

func manyComps(n int) []comp {
	cs := make([]comp, n)
	for i := range cs {
		cs[i] = comp{byte(i + 1), 1, 1}
	}
	return cs
}

// replace returns b with the first old replaced by new.
func replace(b, old, new []byte) []byte {
	if !bytes.Contains(b, old) {
		panic("hostile: replace: segment not found")
	}
	return bytes.Replace(b, old, new, 1)
}
