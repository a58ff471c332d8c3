//go:build cgo

package jpeg

// The cut's backend: libturbojpeg's lossless transform. Each cut is one cgo
// call into sj_cut, which creates a transformer, transforms, copies the cut
// into the Go buffer it is given and frees everything before returning; C
// keeps no Go pointer. libturbojpeg carries its own copy of libjpeg-turbo
// (it exports only the tj* functions), the same release as the libjpeg the
// decoder links.

/*
#cgo LDFLAGS: -lturbojpeg
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

enum {
	SJC_OK = 0,
	SJC_INIT = 1,     // tjInitTransform failed
	SJC_HEADER = 2,   // tjDecompressHeader3 failed
	SJC_MISMATCH = 3, // the header disagrees with the Go parse
	SJC_NOMEM = 4,    // the output buffer could not be allocated
	SJC_XFORM = 5,    // tjTransform failed (or warned)
	SJC_LARGER = 6,   // the cut does not fit in the caller's buffer
	SJC_MEMORY = 7    // the output buffer would exceed the caller's budget
};

typedef struct {
	int code;
	int w, h, subsamp; // SJC_MISMATCH: what libturbojpeg read
	unsigned long size; // the cut's bytes (also when SJC_LARGER); SJC_MEMORY: the buffer's
	char msg[200]; // libjpeg's JMSG_LENGTH_MAX
} sj_cut_result;

static void sj_cut_msg(sj_cut_result *res, tjhandle t) {
	char *m = tjGetErrorStr2(t);
	size_t n;
	snprintf(res->msg, sizeof res->msg, "%s", m ? m : "unknown error");
	// Some messages end in a newline.
	n = strlen(res->msg);
	while (n > 0 && (res->msg[n - 1] == '\n' || res->msg[n - 1] == '.'))
		res->msg[--n] = 0;
}

// sj_check_coeffs is the transform's custom filter: it fails the cut when
// a coefficient of the cropped region lies outside what a baseline 8-bit
// JPEG can carry (|AC| <= 1023, |DC| <= 1024). Corrupt entropy data can
// decode to such values without a warning; libjpeg's encoder cannot write
// them back exactly, so the cut's pixels would differ from the original's
// (found by FuzzCut). Each block is 64 coefficients, its DC first.
static int sj_check_coeffs(short *coeffs, tjregion arrayRegion, tjregion planeRegion,
                           int componentIndex, int transformIndex, struct tjtransform *transform) {
	long i, n = (long)arrayRegion.w * arrayRegion.h;
	unsigned bad = 0;
	(void)planeRegion;
	(void)componentIndex;
	(void)transformIndex;
	(void)transform;
	// A branch-free pass for |c| <= 1023 (vectorised), then the DC's
	// allowance of 1024 only where it failed.
	for (i = 0; i < n; i++)
		bad |= (unsigned)(coeffs[i] + 1023) > 2046u;
	if (!bad)
		return 0;
	for (i = 0; i < n; i++) {
		int c = coeffs[i], lim = (i & 63) == 0 ? 1024 : 1023;
		if (c > lim || c < -lim)
			return -1;
	}
	return 0;
}

// sj_cut losslessly crops data (len bytes; its width, height and TJSAMP_*
// subsampling as the Go parse read them: ww, wh, wsamp) to the rectangle x,
// y, w, h, whose origin lies on an iMCU boundary. The cut, without any of
// the original's extra markers, is copied into out when it fits in its cap
// bytes. Any libjpeg warning fails the transform, as does a progressive
// file of more than 500 scans. The output buffer is tjBufSize's worst case
// for the cut's size, refused when above maxbuf (0: no bound), and
// libturbojpeg may not grow it: a cut that would need more fails.
static void sj_cut(const unsigned char *data, size_t len, int ww, int wh, int wsamp,
                   int x, int y, int w, int h, long long maxbuf,
                   unsigned char *out, size_t cap, sj_cut_result *res) {
	tjhandle t;
	tjtransform xf;
	unsigned char *buf = NULL;
	unsigned long bufsize, size;
	int iw = 0, ih = 0, isamp = -1, ics = -1;

	memset(res, 0, sizeof *res);
	t = tjInitTransform();
	if (t == NULL) {
		res->code = SJC_INIT;
		snprintf(res->msg, sizeof res->msg, "%s", tjGetErrorStr2(NULL));
		return;
	}
	if (tjDecompressHeader3(t, data, (unsigned long)len, &iw, &ih, &isamp, &ics) != 0) {
		res->code = SJC_HEADER;
		sj_cut_msg(res, t);
		tjDestroy(t);
		return;
	}
	if (iw != ww || ih != wh || isamp != wsamp) {
		res->code = SJC_MISMATCH;
		res->w = iw;
		res->h = ih;
		res->subsamp = isamp;
		tjDestroy(t);
		return;
	}
	bufsize = tjBufSize(w, h, isamp);
	if (bufsize != (unsigned long)-1 && maxbuf > 0 && (long long)bufsize > maxbuf) {
		res->code = SJC_MEMORY;
		res->size = bufsize;
		tjDestroy(t);
		return;
	}
	if (bufsize == (unsigned long)-1 || bufsize > 0x7fffffffUL || (buf = tjAlloc((int)bufsize)) == NULL) {
		res->code = SJC_NOMEM;
		snprintf(res->msg, sizeof res->msg, "cannot allocate %lu bytes for a %dx%d cut", bufsize, w, h);
		tjDestroy(t);
		return;
	}
	memset(&xf, 0, sizeof xf);
	xf.r.x = x;
	xf.r.y = y;
	xf.r.w = w;
	xf.r.h = h;
	xf.op = TJXOP_NONE;
	xf.options = TJXOPT_CROP | TJXOPT_COPYNONE;
	xf.customFilter = sj_check_coeffs;
	size = bufsize;
	if (tjTransform(t, data, (unsigned long)len, 1, &buf, &size, &xf,
	                TJFLAG_NOREALLOC | TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0) {
		res->code = SJC_XFORM;
		sj_cut_msg(res, t);
	} else if (size > cap) {
		res->code = SJC_LARGER;
		res->size = size;
	} else {
		memcpy(out, buf, size);
		res->size = size;
	}
	tjFree(buf);
	tjDestroy(t);
}
*/
import "C"

import (
	"unsafe"

	"github.com/sophon-dl/sophon/internal/bytesize"
)

// Cut cuts data (whose header h is ReadHeader's and has passed lim.Check)
// losslessly to the whole iMCUs that cover want, returning the cut file and
// the rectangle of the original it holds: its origin is want's rounded down
// to the iMCU, its right and bottom edges want's rounded up to the iMCU or
// the image's edges. Refusals wrap ErrCannotCut (the file's layout is one
// the cut does not reproduce exactly, a coefficient of the region lies
// outside a baseline JPEG's range (corrupt data), the transform fails, the cut is no
// smaller than data, or it would break lim's scan or memory bounds, which
// the decode may not share: MaxMemory bounds the transform's coefficients
// and its output buffer together), or ErrDeadline; a want outside the
// image wraps ErrSpec. The pure-Go build declines every cut.
//
// Where data's layout is accepted, the cut's pixels equal the original's
// except near the cut's own edges inside the image, where chroma upsampling
// reads neighbours the cut lacks: a caller that needs exact pixels widens
// want by a margin first (package ops widens it by ops.CutMargin).
//
// NB: every transform failure declines rather than failing the sample: the
// decoder, which is stricter on some files and looser on others, then
// decides the sample's fate exactly as it does without the cut.
func Cut(data []byte, h Header, want Rect, lim DecodeLimits) ([]byte, Rect, error) {
	if want.W <= 0 || want.H <= 0 || want.X < 0 || want.Y < 0 || want.X > h.W-want.W || want.Y > h.H-want.H {
		return nil, Rect{}, wrapf(ErrSpec, "cut %v outside the %dx%d image", want, h.W, h.H)
	}
	// A scan bomb: the decode refuses it at scan MaxScans+1 (or fails on
	// something it meets first), and the transform would read every scan.
	if lim.MaxScans > 0 && h.multiScan && scansOver(data, lim.MaxScans) {
		return nil, Rect{}, wrapf(ErrCannotCut, "the JPEG has more than %d scans, which the decode refuses", lim.MaxScans)
	}
	l, err := readCutLayout(data, h)
	if err != nil {
		return nil, Rect{}, err
	}
	got := Rect{X: want.X / l.mcuW * l.mcuW, Y: want.Y / l.mcuH * l.mcuH}
	got.W = min(h.W, (want.X+want.W+l.mcuW-1)/l.mcuW*l.mcuW) - got.X
	got.H = min(h.H, (want.Y+want.H+l.mcuH-1)/l.mcuH*l.mcuH) - got.Y
	// The transform holds every coefficient of the original, baseline or
	// not, and those of the cut, then encodes into a worst-case buffer
	// (libturbojpeg's tjBufSize, 2 to 6 bytes a pixel of the cut), which
	// the rest of the memory limit must hold.
	coef := 128 * (h.coefBlocks + l.cutCoefBlocks(got.W, got.H))
	var maxBuf int64
	if lim.MaxMemory > 0 {
		if coef >= lim.MaxMemory {
			return nil, Rect{}, wrapf(ErrCannotCut, "cutting the %dx%d JPEG needs %s of coefficient buffers, above the %s memory limit",
				h.W, h.H, bytesize.Format(coef), bytesize.Format(lim.MaxMemory))
		}
		maxBuf = lim.MaxMemory - coef
	}
	if err := checkDeadline(lim.Deadline, "cut jpeg"); err != nil {
		return nil, Rect{}, err
	}
	out := make([]byte, len(data))
	var res C.sj_cut_result
	C.sj_cut((*C.uchar)(unsafe.Pointer(&data[0])), C.size_t(len(data)), C.int(h.W), C.int(h.H), C.int(l.samp),
		C.int(got.X), C.int(got.Y), C.int(got.W), C.int(got.H), C.longlong(maxBuf),
		(*C.uchar)(unsafe.Pointer(&out[0])), C.size_t(len(out)), &res)
	switch res.code {
	case C.SJC_OK:
		// Keep only the cut's bytes, not the buffer sized for the original.
		return append([]byte(nil), out[:res.size]...), got, nil
	case C.SJC_MISMATCH:
		return nil, Rect{}, wrapf(ErrCannotCut, "libturbojpeg reads a %dx%d JPEG of subsampling %d where the header parse reads %dx%d of subsampling %d",
			int(res.w), int(res.h), int(res.subsamp), h.W, h.H, l.samp)
	case C.SJC_MEMORY:
		return nil, Rect{}, wrapf(ErrCannotCut, "cutting the %dx%d JPEG needs %s of coefficient buffers and %s of output buffer, above the %s memory limit",
			h.W, h.H, bytesize.Format(coef), bytesize.Format(int64(res.size)), bytesize.Format(lim.MaxMemory))
	case C.SJC_LARGER:
		return nil, Rect{}, wrapf(ErrCannotCut, "the cut %v is %d bytes, no smaller than the %d-byte file", got, uint64(res.size), len(data))
	}
	return nil, Rect{}, wrapf(ErrCannotCut, "libturbojpeg: %s", C.GoString(&res.msg[0]))
}
