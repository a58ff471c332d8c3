//go:build cgo

package jpeg

// The libjpeg-turbo backend. Each decode and each encode is one cgo call into
// a C function that arms its own setjmp before touching libjpeg, so libjpeg's
// error exits (and the warnings we treat as errors) longjmp only within that
// C call, never across Go frames. Go allocates the output pixels before the
// call, from the pure-Go header parse and the limits; C writes into them and
// keeps no pointer after it returns.

/*
#cgo LDFLAGS: -ljpeg
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <time.h>
#include <jpeglib.h>
#include <jerror.h>

enum {
	SJ_OK = 0,
	SJ_CORRUPT = 1,
	SJ_TRUNCATED = 2,
	SJ_UNSUPPORTED = 3,
	SJ_TOOLARGE = 4,
	SJ_MISMATCH = 5,
	SJ_NOMEM = 6,
	SJ_DEADLINE = 7,
	SJ_SCANS = 8,
	SJ_MEMORY = 9
};

typedef struct {
	struct jpeg_error_mgr pub;
	jmp_buf jb;
	int code;
	char *msg; // JMSG_LENGTH_MAX bytes
} sj_err;

static int sj_classify_error(int code) {
	switch (code) {
	case JERR_IMAGE_TOO_BIG:
	case JERR_OUT_OF_MEMORY:
		return SJ_TOOLARGE;
	case JERR_ARITH_NOTIMPL:
	case JERR_BAD_PRECISION:
	case JERR_CCIR601_NOTIMPL:
	case JERR_COMPONENT_COUNT:
	case JERR_CONVERSION_NOTIMPL:
	case JERR_NOTIMPL:
	case JERR_NOT_COMPILED:
	case JERR_SOF_UNSUPPORTED:
	case JERR_EMPTY_IMAGE:
		return SJ_UNSUPPORTED;
	case JERR_NO_BACKING_STORE:
		// jmemnobs.c's answer when max_memory_to_use cannot hold the
		// whole-image buffers.
		return SJ_MEMORY;
	}
	return SJ_CORRUPT;
}

static void sj_error_exit(j_common_ptr c) {
	sj_err *e = (sj_err *)c->err;
	e->code = sj_classify_error(c->err->msg_code);
	(*c->err->format_message)(c, e->msg);
	longjmp(e->jb, 1);
}

// sj_emit_message ignores trace messages and the warnings that say nothing
// about the pixels; every other warning (premature end of file, corrupt
// entropy data) aborts the call as an error.
static void sj_emit_message(j_common_ptr c, int level) {
	sj_err *e = (sj_err *)c->err;
	if (level >= 0)
		return;
	switch (c->err->msg_code) {
	case JWRN_ADOBE_XFORM:
	case JWRN_JFIF_MAJOR:
	case JWRN_BOGUS_ICC:
		c->err->num_warnings++;
		return;
	}
	e->code = c->err->msg_code == JWRN_JPEG_EOF ? SJ_TRUNCATED : SJ_CORRUPT;
	(*c->err->format_message)(c, e->msg);
	longjmp(e->jb, 1);
}

static void sj_output_message(j_common_ptr c) { (void)c; }

static void sj_init_err(sj_err *e, char *msg) {
	jpeg_std_error(&e->pub);
	e->pub.error_exit = sj_error_exit;
	e->pub.emit_message = sj_emit_message;
	e->pub.output_message = sj_output_message;
	e->code = SJ_OK;
	e->msg = msg;
	msg[0] = 0;
}

typedef struct {
	int code;
	int out_w, out_h; // the scaled image's size as libjpeg computes it
	int x0, w;        // the decoded column window
	int scans;        // SJ_SCANS: the scan number that went over the limit
	int progressive;  // SJ_SCANS, SJ_MEMORY: the frame is progressive
	long long need;   // SJ_MEMORY: the coefficient bytes the file needs
	char msg[JMSG_LENGTH_MAX];
} sj_result;

static long long sj_now_ns(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

// sj_progress is the progress monitor that enforces the scan limit and the
// deadline. libjpeg calls it before absorbing each iMCU row (or marker run)
// of a buffered multi-scan image, and before each output row; aborting from
// it takes the error exit's longjmp like any libjpeg error, and
// jpeg_destroy_decompress then frees everything.
typedef struct {
	struct jpeg_progress_mgr pub;
	int max_scans;      // 0: none
	long long deadline; // sj_now_ns() value; 0: none
	sj_result *res;
} sj_progress_mgr;

static void sj_progress(j_common_ptr c) {
	sj_progress_mgr *p = (sj_progress_mgr *)c->progress;
	sj_err *e = (sj_err *)c->err;
	j_decompress_ptr d = (j_decompress_ptr)c;
	if (p->max_scans > 0 && d->input_scan_number > p->max_scans) {
		e->code = SJ_SCANS;
		p->res->scans = d->input_scan_number;
		p->res->progressive = d->progressive_mode ? 1 : 0;
		longjmp(e->jb, 1);
	}
	if (p->deadline != 0 && sj_now_ns() >= p->deadline) {
		e->code = SJ_DEADLINE;
		snprintf(e->msg, JMSG_LENGTH_MAX, "deadline passed in libjpeg at scan %d, output row %u",
		         d->input_scan_number, d->output_scanline);
		longjmp(e->jb, 1);
	}
}

// sj_coef_bytes is what libjpeg's coefficient controller allocates for a
// buffered image: a JBLOCK (128 bytes) for every block of every component,
// rows and columns rounded up to whole iMCUs (jdcoefct.c).
static long long sj_coef_bytes(j_decompress_ptr d) {
	long long n = 0;
	int ci;
	for (ci = 0; ci < d->num_components; ci++) {
		jpeg_component_info *c = &d->comp_info[ci];
		long long bw = ((long long)c->width_in_blocks + c->h_samp_factor - 1) / c->h_samp_factor * c->h_samp_factor;
		long long bh = ((long long)c->height_in_blocks + c->v_samp_factor - 1) / c->v_samp_factor * c->v_samp_factor;
		n += bw * bh * (long long)sizeof(JBLOCK);
	}
	return n;
}

// Pillow's cmyk2rgb on inverted (Adobe) CMYK: ink = 255 - stored value.
static void sj_cmyk_row(unsigned char *dst, const unsigned char *src, int w) {
	int x;
	for (x = 0; x < w; x++) {
		int nk = src[3];
		int i;
		for (i = 0; i < 3; i++) {
			int t = (255 - src[i]) * nk + 128;
			dst[i] = (unsigned char)(nk - (((t >> 8) + t) >> 8));
		}
		dst += 3;
		src += 4;
	}
}

#if JPEG_LIB_VERSION >= 70
#define SJ_DCT_SIZE(c) ((c)->DCT_h_scaled_size)
#define SJ_MIN_DCT_SIZE(d) ((d)->min_DCT_h_scaled_size)
#else
#define SJ_DCT_SIZE(c) ((c)->DCT_scaled_size)
#define SJ_MIN_DCT_SIZE(d) ((d)->min_DCT_scaled_size)
#endif

// sj_crop_ok reports whether jpeg_crop_scanline gives correct pixels for d.
// NB: libjpeg-turbo 2.1's jpeg_crop_scanline recomputes each component's
// downsampled_width as if its IDCT were scaled like the smallest one's. When
// scaling gives a component a larger DCT size that still leaves it to be
// upsampled (4:1:0, i.e. luma 4x2 over 1x1 chroma, at scales 2/8..7/8), the
// upsampler then fills only part of the window and the rest is garbage.
static int sj_crop_ok(j_decompress_ptr d) {
	int ci;
	for (ci = 0; ci < d->num_components; ci++) {
		jpeg_component_info *c = &d->comp_info[ci];
		int full_h = c->h_samp_factor * SJ_DCT_SIZE(c) == d->max_h_samp_factor * SJ_MIN_DCT_SIZE(d);
		int full_v = c->v_samp_factor * SJ_DCT_SIZE(c) == d->max_v_samp_factor * SJ_MIN_DCT_SIZE(d);
		if (SJ_DCT_SIZE(c) != SJ_MIN_DCT_SIZE(d) && !(full_h && full_v))
			return 0;
	}
	return 1;
}

// sj_decode decodes data at scale num/8 into out: rows [ry, ry+rh) of the
// scaled image, columns [res->x0, res->x0 + res->w), a window that contains
// [rx, rx+rw), has its right edge and starts at most 32 columns left of it
// (32 only where it starts at the image's left edge).
// out holds cap bytes; the rows are packed at stride 3*res->w.
//
// maxscans, maxmem (bytes of whole-image buffers) and timeout_ns (from now)
// are limits; zero means none.
static void sj_decode(const unsigned char *data, size_t len, int num,
                      long long maxpix, int maxscans, long long maxmem, long long timeout_ns,
                      int rx, int ry, int rw, int rh,
                      int finish, unsigned char *out, size_t cap, sj_result *res) {
	struct jpeg_decompress_struct d;
	sj_err err;
	sj_progress_mgr prog;
	JSAMPARRAY tmp = NULL;
	JDIMENSION lx, ex, x0, w;
	int trim_l, trim_r;
	size_t stride;
	int y;

	memset(&d, 0, sizeof d);
	memset(&prog, 0, sizeof prog);
	res->code = SJ_OK;
	res->need = -1;
	d.err = &err.pub;
	sj_init_err(&err, res->msg);
	if (setjmp(err.jb)) {
		res->code = err.code;
		if (err.code == SJ_MEMORY)
			res->progressive = d.progressive_mode ? 1 : 0;
		jpeg_destroy_decompress(&d);
		return;
	}
	jpeg_create_decompress(&d);
	if (maxmem > 0)
		d.mem->max_memory_to_use = (long)maxmem;
	if (maxscans > 0 || timeout_ns > 0) {
		prog.pub.progress_monitor = sj_progress;
		prog.max_scans = maxscans;
		prog.deadline = timeout_ns > 0 ? sj_now_ns() + timeout_ns : 0;
		prog.res = res;
		d.progress = &prog.pub;
	}
	jpeg_mem_src(&d, data, (unsigned long)len);
	jpeg_read_header(&d, TRUE);
	if ((long long)d.image_width * (long long)d.image_height > maxpix) {
		res->code = SJ_TOOLARGE;
		snprintf(res->msg, JMSG_LENGTH_MAX, "%ux%u exceeds %lld pixels",
		         d.image_width, d.image_height, maxpix);
		jpeg_destroy_decompress(&d);
		return;
	}
	// A multi-scan image (jdinput.c's has_multiple_scans) makes
	// jpeg_start_decompress allocate every coefficient of the image. Refuse
	// it here with the numbers; max_memory_to_use stays as the backstop.
	if (maxmem > 0 && (d.progressive_mode || d.comps_in_scan < d.num_components)) {
		long long need = sj_coef_bytes(&d);
		if (need > maxmem) {
			res->code = SJ_MEMORY;
			res->need = need;
			res->progressive = d.progressive_mode ? 1 : 0;
			jpeg_destroy_decompress(&d);
			return;
		}
	}
	d.scale_num = (unsigned int)num;
	d.scale_denom = 8;
	switch (d.jpeg_color_space) {
	case JCS_CMYK:
	case JCS_YCCK:
		d.out_color_space = JCS_CMYK;
		break;
	default:
		d.out_color_space = JCS_RGB;
	}
	jpeg_start_decompress(&d);
	res->out_w = (int)d.output_width;
	res->out_h = (int)d.output_height;
	if (rx < 0 || ry < 0 || rw <= 0 || rh <= 0 ||
	    (JDIMENSION)rx + (JDIMENSION)rw > d.output_width ||
	    (JDIMENSION)ry + (JDIMENSION)rh > d.output_height) {
		res->code = SJ_MISMATCH;
		snprintf(res->msg, JMSG_LENGTH_MAX, "libjpeg's output is %ux%u",
		         d.output_width, d.output_height);
		jpeg_destroy_decompress(&d);
		return;
	}
	// libjpeg upsamples a cropped window's chroma as if the window's edges
	// were the image's, so the outermost column on each side can differ from
	// a full decode wherever chroma is subsampled horizontally ("fancy"
	// h2v1/h2v2 upsampling reads the neighbouring chroma sample). Decode one
	// column more on each side, then drop the extra right column and the
	// window's first column unless that is the image's own edge. Where
	// cropping is broken, decode full rows and copy out the region.
	if (sj_crop_ok(&d)) {
		lx = rx > 0 ? (JDIMENSION)rx - 1 : 0;
		ex = (JDIMENSION)rx + (JDIMENSION)rw;
		if (ex < d.output_width)
			ex++;
		x0 = lx;
		w = ex - lx;
		// NB: jpeg_crop_scanline sets output_width to the window's width.
		if (x0 != 0 || w != d.output_width)
			jpeg_crop_scanline(&d, &x0, &w);
		trim_l = x0 > 0 ? 1 : 0;
		trim_r = ex > (JDIMENSION)rx + (JDIMENSION)rw ? 1 : 0;
	} else {
		x0 = 0;
		w = d.output_width;
		trim_l = rx;
		trim_r = (int)w - rx - rw;
	}
	res->x0 = (int)(x0 + trim_l);
	res->w = (int)(w - trim_l - trim_r);
	stride = (size_t)res->w * 3;
	if (stride * (size_t)rh > cap) {
		res->code = SJ_MISMATCH;
		snprintf(res->msg, JMSG_LENGTH_MAX, "libjpeg's window is %u columns from %u",
		         w, x0);
		jpeg_destroy_decompress(&d);
		return;
	}
	if (d.out_color_space == JCS_CMYK)
		tmp = (*d.mem->alloc_sarray)((j_common_ptr)&d, JPOOL_IMAGE, w * 4, 1);
	else if (trim_l || trim_r)
		tmp = (*d.mem->alloc_sarray)((j_common_ptr)&d, JPOOL_IMAGE, w * 3, 1);
	if (ry > 0 && jpeg_skip_scanlines(&d, (JDIMENSION)ry) != (JDIMENSION)ry) {
		res->code = SJ_CORRUPT;
		snprintf(res->msg, JMSG_LENGTH_MAX, "could not skip %d rows", ry);
		jpeg_destroy_decompress(&d);
		return;
	}
	for (y = 0; y < rh;) {
		JSAMPROW row = out + stride * (size_t)y;
		if (!tmp) {
			if (jpeg_read_scanlines(&d, &row, 1) != 1)
				break;
		} else {
			if (jpeg_read_scanlines(&d, tmp, 1) != 1)
				break;
			if (d.out_color_space == JCS_CMYK)
				sj_cmyk_row(row, tmp[0] + 4 * trim_l, res->w);
			else
				memcpy(row, tmp[0] + 3 * trim_l, stride);
		}
		y++;
	}
	if (y != rh) {
		res->code = SJ_CORRUPT;
		snprintf(res->msg, JMSG_LENGTH_MAX, "libjpeg returned %d of %d rows", y, rh);
		jpeg_destroy_decompress(&d);
		return;
	}
	// Reading to EOI catches truncation and trailing corruption. A partial
	// region stops early and leaves the rest unread, unless finish asks for
	// the rows below it to be entropy-decoded (jpeg_skip_scanlines discards
	// their coefficients without an IDCT), which validates the whole file
	// just as a full decode does.
	//
	// NB: skipping to the very end only moves the row counter (and
	// jpeg_finish_decompress then reads no entropy data), so skip all but the
	// last row and read that one.
	if (finish && d.output_scanline < d.output_height) {
		JDIMENSION rest = d.output_height - d.output_scanline;
		JSAMPARRAY last = (*d.mem->alloc_sarray)((j_common_ptr)&d, JPOOL_IMAGE,
			w * (d.out_color_space == JCS_CMYK ? 4 : 3), 1);
		if (rest > 1 && jpeg_skip_scanlines(&d, rest - 1) != rest - 1) {
			res->code = SJ_CORRUPT;
			snprintf(res->msg, JMSG_LENGTH_MAX, "could not skip %u rows", rest - 1);
			jpeg_destroy_decompress(&d);
			return;
		}
		if (jpeg_read_scanlines(&d, last, 1) != 1) {
			res->code = SJ_CORRUPT;
			snprintf(res->msg, JMSG_LENGTH_MAX, "could not read the last row");
			jpeg_destroy_decompress(&d);
			return;
		}
	}
	if (d.output_scanline == d.output_height)
		jpeg_finish_decompress(&d);
	jpeg_destroy_decompress(&d);
}

enum { SJ_ENC_RGB = 0, SJ_ENC_GRAY = 1, SJ_ENC_CMYK = 2, SJ_ENC_YCCK = 3 };

// sj_encode compresses the w x h RGB image pix. On success *outp is a malloc'd
// buffer of *outlen bytes for the caller to free.
static void sj_encode(const unsigned char *pix, int w, int h, int quality,
                      int progressive, int mode, int hs, int vs, int restart, int arith,
                      int noninterleaved,
                      unsigned char **outp, unsigned long *outlen, sj_result *res) {
	struct jpeg_compress_struct c;
	jpeg_scan_info scans[4];
	sj_err err;
	unsigned char *buf = NULL;
	unsigned long size = 0;
	JSAMPARRAY tmp = NULL;
	size_t stride = (size_t)w * 3;

	memset(&c, 0, sizeof c);
	*outp = NULL;
	*outlen = 0;
	res->code = SJ_OK;
	c.err = &err.pub;
	sj_init_err(&err, res->msg);
	if (setjmp(err.jb)) {
		res->code = err.code;
		jpeg_destroy_compress(&c);
		free(buf);
		return;
	}
	jpeg_create_compress(&c);
	jpeg_mem_dest(&c, &buf, &size);
	c.image_width = (JDIMENSION)w;
	c.image_height = (JDIMENSION)h;
	if (mode == SJ_ENC_CMYK || mode == SJ_ENC_YCCK) {
		c.input_components = 4;
		c.in_color_space = JCS_CMYK;
	} else {
		c.input_components = 3;
		c.in_color_space = JCS_RGB;
	}
	jpeg_set_defaults(&c);
	switch (mode) {
	case SJ_ENC_GRAY:
		jpeg_set_colorspace(&c, JCS_GRAYSCALE);
		break;
	case SJ_ENC_CMYK:
	case SJ_ENC_YCCK:
		jpeg_set_colorspace(&c, mode == SJ_ENC_CMYK ? JCS_CMYK : JCS_YCCK);
		c.comp_info[0].h_samp_factor = c.comp_info[3].h_samp_factor = hs;
		c.comp_info[0].v_samp_factor = c.comp_info[3].v_samp_factor = vs;
		break;
	default:
		c.comp_info[0].h_samp_factor = hs;
		c.comp_info[0].v_samp_factor = vs;
	}
	jpeg_set_quality(&c, quality, TRUE);
	if (progressive) {
		jpeg_simple_progression(&c);
	} else if (noninterleaved) {
		int i;
		for (i = 0; i < c.num_components; i++) {
			scans[i].comps_in_scan = 1;
			scans[i].component_index[0] = i;
			scans[i].Ss = 0;
			scans[i].Se = DCTSIZE2 - 1;
			scans[i].Ah = scans[i].Al = 0;
		}
		c.scan_info = scans;
		c.num_scans = c.num_components;
	}
	c.restart_interval = (unsigned int)restart;
	c.arith_code = arith ? TRUE : FALSE;
	jpeg_start_compress(&c, TRUE);
	if (c.in_color_space == JCS_CMYK)
		tmp = (*c.mem->alloc_sarray)((j_common_ptr)&c, JPOOL_IMAGE, (JDIMENSION)w * 4, 1);
	while (c.next_scanline < c.image_height) {
		JSAMPROW row = (JSAMPROW)(pix + stride * c.next_scanline);
		if (tmp) {
			// Inverted CMYK whose Pillow decode approximates the RGB.
			unsigned char *o = tmp[0];
			int x;
			for (x = 0; x < w; x++) {
				int r = row[3 * x], g = row[3 * x + 1], b = row[3 * x + 2];
				int k = r > g ? r : g;
				if (b > k)
					k = b;
				if (k == 0) {
					o[0] = o[1] = o[2] = 255;
				} else {
					o[0] = (unsigned char)((r * 255 + k / 2) / k);
					o[1] = (unsigned char)((g * 255 + k / 2) / k);
					o[2] = (unsigned char)((b * 255 + k / 2) / k);
				}
				o[3] = (unsigned char)k;
				o += 4;
			}
			row = tmp[0];
		}
		jpeg_write_scanlines(&c, &row, 1);
	}
	jpeg_finish_compress(&c);
	jpeg_destroy_compress(&c);
	*outp = buf;
	*outlen = size;
}
*/
import "C"

import (
	"time"
	"unsafe"

	"github.com/sophon-dl/sophon/internal/bytesize"
)

// Backend names the codec in use: "libjpeg-turbo" or "image/jpeg".
const Backend = "libjpeg-turbo"

// Writes444 says whether Encode writes 4:4:4 colour JPEGs.
const Writes444 = true

// resultError maps a C result to a sentinel-wrapping error.
func resultError(res *C.sj_result, what string) error {
	msg := C.GoString(&res.msg[0])
	switch res.code {
	case C.SJ_OK:
		return nil
	case C.SJ_TRUNCATED:
		return wrapf(ErrTruncated, "%s: libjpeg: %s", what, msg)
	case C.SJ_UNSUPPORTED:
		return wrapf(ErrUnsupported, "%s: libjpeg: %s", what, msg)
	case C.SJ_TOOLARGE:
		return wrapf(ErrTooLarge, "%s: libjpeg: %s", what, msg)
	case C.SJ_DEADLINE:
		return wrapf(ErrDeadline, "%s: %s", what, msg)
	case C.SJ_MISMATCH:
		return wrapf(ErrCorrupt, "%s: libjpeg disagrees with the header parse: %s", what, msg)
	}
	return wrapf(ErrCorrupt, "%s: libjpeg: %s", what, msg)
}

// coefMemory is what libjpeg allocates for h's whole-image coefficient
// buffers: a JBLOCK, 128 bytes, for every block of a multi-scan image.
func coefMemory(h Header) int64 {
	if !h.multiScan {
		return 0
	}
	return h.coefBlocks * 128
}

// decode decodes region of the image scaled by num/8. h has passed the
// limits; region lies inside the scaled image.
func decode(data []byte, h Header, num int, region Rect, finish bool, lim DecodeLimits) (*Image, Rect, error) {
	// libjpeg moves the window's left edge down to a multiple of the iMCU
	// width, at most 8 (the scaled DCT size) times 4 (the largest sampling
	// factor) minus 1 columns; sj_decode asks for one column more and drops
	// it, unless that column is the image's first. So the window starts at
	// most 32 columns left of the region: from column 0 when the region
	// starts at column 32 of an image whose iMCU is 32 columns wide (4:1:1,
	// 4:1:0).
	sw, _ := ScaledSize(h.W, h.H, num)
	maxW := min(region.W+min(region.X, 8*4), sw)
	if err := lim.checkAlloc(maxW, region.H); err != nil {
		return nil, Rect{}, err
	}
	var timeout time.Duration
	if !lim.Deadline.IsZero() {
		if timeout = time.Until(lim.Deadline); timeout <= 0 {
			return nil, Rect{}, checkDeadline(lim.Deadline, "decode jpeg")
		}
	}
	pix := make([]uint8, maxW*region.H*channels)
	var res C.sj_result
	C.sj_decode((*C.uchar)(unsafe.Pointer(&data[0])), C.size_t(len(data)), C.int(num),
		C.longlong(lim.PixelLimit()), C.int(max(lim.MaxScans, 0)), C.longlong(max(lim.MaxMemory, 0)),
		C.longlong(timeout.Nanoseconds()),
		C.int(region.X), C.int(region.Y), C.int(region.W), C.int(region.H),
		C.int(cBool(finish)), (*C.uchar)(unsafe.Pointer(&pix[0])), C.size_t(len(pix)), &res)
	switch res.code {
	case C.SJ_SCANS:
		return nil, Rect{}, wrapf(ErrTooLarge, "decode jpeg: %s JPEG has more than %d scans", scanKind(res.progressive != 0), lim.MaxScans)
	case C.SJ_MEMORY:
		kind := scanKind(res.progressive != 0)
		if res.need >= 0 {
			return nil, Rect{}, wrapf(ErrTooLarge, "decode jpeg: %s JPEG of %dx%d needs %s of coefficient buffers, above the %s memory limit",
				kind, h.W, h.H, bytesize.Format(int64(res.need)), bytesize.Format(lim.MaxMemory))
		}
		return nil, Rect{}, wrapf(ErrTooLarge, "decode jpeg: %dx%d %s JPEG needs more than the %s memory limit: libjpeg: %s",
			h.W, h.H, kind, bytesize.Format(lim.MaxMemory), C.GoString(&res.msg[0]))
	}
	if err := resultError(&res, "decode jpeg"); err != nil {
		return nil, Rect{}, err
	}
	w := int(res.w)
	img := &Image{W: w, H: region.H, Pix: pix[:w*region.H*channels]}
	return img, Rect{X: int(res.x0), Y: region.Y, W: w, H: region.H}, nil
}

// Encode compresses img with libjpeg-turbo.
func Encode(img *Image, opt EncodeOptions) ([]byte, error) {
	opt, err := opt.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkEncodeImage(img); err != nil {
		return nil, err
	}
	mode := C.SJ_ENC_RGB
	switch {
	case opt.Gray:
		mode = C.SJ_ENC_GRAY
	case opt.CMYK && opt.YCCK:
		mode = C.SJ_ENC_YCCK
	case opt.CMYK:
		mode = C.SJ_ENC_CMYK
	}
	hs, vs := 2, 2
	switch opt.Subsampling {
	case 422:
		vs = 1
	case 444:
		hs, vs = 1, 1
	}
	if opt.CMYK {
		hs, vs = 1, 1
	}
	if opt.LumaSampling != [2]int{} {
		hs, vs = opt.LumaSampling[0], opt.LumaSampling[1]
	}
	var (
		res  C.sj_result
		out  *C.uchar
		size C.ulong
	)
	C.sj_encode((*C.uchar)(unsafe.Pointer(&img.Pix[0])), C.int(img.W), C.int(img.H),
		C.int(opt.Quality), C.int(cBool(opt.Progressive)), C.int(mode), C.int(hs), C.int(vs),
		C.int(max(opt.RestartInterval, 0)), C.int(cBool(opt.Arithmetic)), C.int(cBool(opt.NonInterleaved)),
		&out, &size, &res)
	if res.code != C.SJ_OK {
		return nil, wrapf(ErrUnsupported, "encode jpeg: libjpeg: %s", C.GoString(&res.msg[0]))
	}
	defer C.free(unsafe.Pointer(out))
	return C.GoBytes(unsafe.Pointer(out), C.int(size)), nil
}

func cBool(b bool) int {
	if b {
		return 1
	}
	return 0
}
