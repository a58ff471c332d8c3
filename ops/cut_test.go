package ops_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/ops/jpeg"
	"github.com/sophon-dl/sophon/ops/synth"
	"github.com/sophon-dl/sophon/ops/wireform"
)

// cgoCut reports whether this build can cut at all: the pure-Go build
// declines every cut.
func cgoCut() bool { return ops.JPEGBackend == "libjpeg-turbo" }

// cutExpect says what the cgo build must do with a case.
type cutExpect int

const (
	cutAny     cutExpect = iota // cut or decline, as the draw makes the cut smaller or not
	cutSome                     // cut for some of the keys tried
	cutDecline                  // decline for every key
)

type cutCase struct {
	name   string
	data   []byte
	expect cutExpect
}

// jpegSegment is one marker of a JPEG: [start, end) covers the marker, its
// segment and, for SOS, the entropy-coded data after it.
type jpegSegment struct {
	marker     byte
	start, end int
}

// jpegSegments lists data's markers after SOI up to and including EOI.
func jpegSegments(t testing.TB, data []byte) []jpegSegment {
	t.Helper()
	var segs []jpegSegment
	p := 2
	for p+1 < len(data) {
		if data[p] != 0xFF {
			t.Fatalf("no marker at offset %d", p)
		}
		m, start := data[p+1], p
		p += 2
		if m == 0xD9 {
			segs = append(segs, jpegSegment{m, start, p})
			return segs
		}
		if m >= 0xD0 && m <= 0xD7 || m == 0x01 {
			segs = append(segs, jpegSegment{m, start, p})
			continue
		}
		p += int(binary.BigEndian.Uint16(data[p:]))
		if m == 0xDA {
			for p+1 < len(data) && (data[p] != 0xFF || data[p+1] == 0 || data[p+1] >= 0xD0 && data[p+1] <= 0xD7) {
				p++
			}
		}
		segs = append(segs, jpegSegment{m, start, p})
	}
	t.Fatalf("no EOI marker")
	return nil
}

// jpegSeg is a marker segment with payload b.
func jpegSeg(m byte, b []byte) []byte {
	return append([]byte{0xFF, m, byte((len(b) + 2) >> 8), byte(len(b) + 2)}, b...)
}

// jpegExif is an APP1 Exif segment with a small TIFF header (orientation 6,
// which the decode ignores, as Pillow's does).
func jpegExif() []byte {
	tiff := []byte("Exif\x00\x00II*\x00\x08\x00\x00\x00\x01\x00\x12\x01\x03\x00\x01\x00\x00\x00\x06\x00\x00\x00\x00\x00\x00\x00")
	return jpegSeg(0xE1, append(tiff, bytes.Repeat([]byte{0x5a}, 2000)...))
}

// jpegAdobe is an Adobe APP14 segment with the given colour transform.
func jpegAdobe(xform byte) []byte {
	return jpegSeg(0xEE, []byte{'A', 'd', 'o', 'b', 'e', 0, 100, 0, 0, 0, 0, xform})
}

// jpegEdit rebuilds data: after SOI, the segments for which keep returns
// true, with insert after SOI.
func jpegEdit(t testing.TB, data []byte, insert []byte, keep func(jpegSegment) bool) []byte {
	out := append([]byte{0xFF, 0xD8}, insert...)
	for _, s := range jpegSegments(t, data) {
		if keep(s) {
			out = append(out, data[s.start:s.end]...)
		}
	}
	return out
}

// jpegRenameComponents gives data's components the ids ids, in the frame
// header and in every scan header.
func jpegRenameComponents(t testing.TB, data []byte, ids []byte) []byte {
	out := bytes.Clone(data)
	old := map[byte]byte{}
	for _, s := range jpegSegments(t, data) {
		switch {
		case s.marker >= 0xC0 && s.marker <= 0xC2:
			for i := range int(out[s.start+9]) {
				old[out[s.start+10+3*i]] = ids[i]
				out[s.start+10+3*i] = ids[i]
			}
		case s.marker == 0xDA:
			for i := range int(out[s.start+4]) {
				out[s.start+5+2*i] = old[out[s.start+5+2*i]]
			}
		}
	}
	return out
}

// jpegFirstScans keeps data's first n scans and ends it there.
func jpegFirstScans(t testing.TB, data []byte, n int) []byte {
	scans := 0
	out := jpegEdit(t, data, nil, func(s jpegSegment) bool {
		if s.marker == 0xDA {
			scans++
		}
		return scans <= n && s.marker != 0xD9
	})
	return append(out, 0xFF, 0xD9)
}

// cutCases are the files the cut split is tested on: the varied set, every
// subsampling libjpeg writes at odd, tiny and large sizes, grey, CMYK and
// YCCK, progressive and arithmetic coding, restart markers, extra APP
// segments, each colour-space marker, and files the cut must decline.
func cutCases(t testing.TB) []cutCase {
	var cs []cutCase
	for _, c := range synth.Varied(7) {
		cs = append(cs, cutCase{name: "varied/" + c.Name, data: c.Data})
	}
	type enc struct {
		name   string
		w, h   int
		opt    ops.TestEncodeOptions
		expect cutExpect
	}
	o := func(sub int) ops.TestEncodeOptions {
		return ops.TestEncodeOptions{EncodeOptions: ops.EncodeOptions{Subsampling: sub}}
	}
	with := func(opt ops.TestEncodeOptions, f func(*ops.TestEncodeOptions)) ops.TestEncodeOptions {
		f(&opt)
		return opt
	}
	encs := []enc{
		{"420-1023x767", 1023, 767, o(420), cutSome},
		{"422-1023x767", 1023, 767, o(422), cutSome},
		{"444-640x480", 640, 480, o(444), cutSome},
		{"420-17x13", 17, 13, o(420), cutAny},
		{"444-17x13", 17, 13, o(444), cutAny},
		{"420-1x1", 1, 1, o(420), cutDecline},
		{"420-8x8", 8, 8, o(420), cutDecline},
		{"420-16x16", 16, 16, o(420), cutDecline},
		{"444-16x16", 16, 16, o(444), cutAny},
		{"420-95x300", 95, 300, o(420), cutSome},
		{"440-401x299", 401, 299, with(o(0), func(e *ops.TestEncodeOptions) { e.LumaSamp = [2]int{1, 2} }), cutSome},
		{"411-403x297", 403, 297, with(o(0), func(e *ops.TestEncodeOptions) { e.LumaSamp = [2]int{4, 1} }), cutSome},
		{"410-400x300", 400, 300, with(o(0), func(e *ops.TestEncodeOptions) { e.LumaSamp = [2]int{4, 2} }), cutDecline},
		{"gray-517x389", 517, 389, with(o(0), func(e *ops.TestEncodeOptions) { e.Gray = true }), cutSome},
		{"cmyk-333x251", 333, 251, with(o(0), func(e *ops.TestEncodeOptions) { e.CMYK = true }), cutSome},
		{"ycck-333x251", 333, 251, with(o(0), func(e *ops.TestEncodeOptions) { e.CMYK, e.YCCK = true, true }), cutSome},
		{"ycck-420-333x251", 333, 251, with(o(0), func(e *ops.TestEncodeOptions) { e.CMYK, e.YCCK, e.LumaSamp = true, true, [2]int{2, 2} }), cutSome},
		{"progressive-420-517x389", 517, 389, with(o(420), func(e *ops.TestEncodeOptions) { e.Progressive = true }), cutSome},
		{"progressive-444-333x251", 333, 251, with(o(444), func(e *ops.TestEncodeOptions) { e.Progressive = true }), cutSome},
		{"progressive-gray-333x251", 333, 251, with(o(0), func(e *ops.TestEncodeOptions) { e.Progressive, e.Gray = true, true }), cutSome},
		{"progressive-cmyk-200x150", 200, 150, with(o(0), func(e *ops.TestEncodeOptions) { e.Progressive, e.CMYK = true, true }), cutSome},
		{"restart-1-420-333x251", 333, 251, with(o(420), func(e *ops.TestEncodeOptions) { e.RestartInterval = 1 }), cutSome},
		{"restart-7-422-333x251", 333, 251, with(o(422), func(e *ops.TestEncodeOptions) { e.RestartInterval = 7 }), cutSome},
		{"restart-3-progressive-333x251", 333, 251, with(o(420), func(e *ops.TestEncodeOptions) { e.RestartInterval, e.Progressive = 3, true }), cutSome},
		{"non-interleaved-420-333x251", 333, 251, with(o(420), func(e *ops.TestEncodeOptions) { e.NonInterleaved = true }), cutSome},
		{"non-interleaved-restart-444-257x181", 257, 181, with(o(444), func(e *ops.TestEncodeOptions) { e.NonInterleaved, e.RestartInterval = true, 5 }), cutSome},
		{"arithmetic-420-333x251", 333, 251, with(o(420), func(e *ops.TestEncodeOptions) { e.Arithmetic = true }), cutAny},
		{"arithmetic-progressive-333x251", 333, 251, with(o(420), func(e *ops.TestEncodeOptions) { e.Arithmetic, e.Progressive = true, true }), cutAny},
		{"q30-420-500x375", 500, 375, with(o(420), func(e *ops.TestEncodeOptions) { e.Quality = 30 }), cutSome},
		{"q100-444-300x200", 300, 200, with(o(444), func(e *ops.TestEncodeOptions) { e.Quality = 100 }), cutSome},
	}
	for i, e := range encs {
		data, err := ops.EncodeJPEGTest(synth.Photo(uint64(900+i), e.w, e.h), e.opt)
		if errors.Is(err, ops.ErrUnsupported) {
			continue // an option the pure-Go encoder lacks
		}
		if err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		cs = append(cs, cutCase{name: e.name, data: data, expect: e.expect})
	}
	// Markers: the cut drops APP segments and writes its own JFIF or Adobe
	// marker from the colour space libjpeg read.
	base, err := ops.EncodeJPEGTest(synth.Photo(950, 333, 251), o(444))
	if errors.Is(err, ops.ErrUnsupported) {
		base, err = ops.EncodeJPEGTest(synth.Photo(950, 333, 251), o(420))
	}
	if err != nil {
		t.Fatal(err)
	}
	noJFIF := func(s jpegSegment) bool { return s.marker != 0xE0 }
	all := func(jpegSegment) bool { return true }
	cs = append(cs,
		cutCase{"exif-333x251", jpegEdit(t, base, jpegExif(), all), cutSome},
		cutCase{"adobe-rgb-333x251", jpegEdit(t, base, jpegAdobe(0), noJFIF), cutSome},
		cutCase{"adobe-ycc-333x251", jpegEdit(t, base, jpegAdobe(1), noJFIF), cutSome},
		cutCase{"rgb-ids-333x251", jpegRenameComponents(t, jpegEdit(t, base, nil, noJFIF), []byte("RGB")), cutSome},
		cutCase{"no-markers-333x251", jpegEdit(t, base, nil, noJFIF), cutSome},
	)
	if prog, err := ops.EncodeJPEG(synth.Photo(951, 400, 300), ops.EncodeOptions{Progressive: true}); err == nil {
		for _, n := range []int{1, 5, 9} { // of 10
			cs = append(cs, cutCase{fmt.Sprintf("progressive-first-%d-scans", n), jpegFirstScans(t, prog, n), cutDecline})
		}
		cs = append(cs, cutCase{"progressive-exif", jpegEdit(t, prog, jpegExif(), all), cutSome})
	}
	return cs
}

// cutKey is the key of a case's sample in an epoch.
func cutKey(name string, epoch uint64) ops.Key {
	h := fnv.New64a()
	h.Write([]byte(name))
	return ops.Key{Seed: 42, Epoch: epoch, Sample: h.Sum64() % 1000003}
}

// cutErrClass is the sentinel an error wraps.
func cutErrClass(err error) error {
	for _, s := range []error{ops.ErrEmpty, ops.ErrNotJPEG, ops.ErrTruncated, ops.ErrCorrupt, ops.ErrTooLarge, ops.ErrUnsupported, ops.ErrDeadline, ops.ErrCannotCut} {
		if errors.Is(err, s) {
			return s
		}
	}
	return err
}

// TestCutForged runs the compute side on cuts a storage agent could not
// have made: each fails with a typed error naming the sample, never with
// wrong pixels.
func TestCutForged(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	small, err := ops.EncodeJPEG(synth.Photo(3, 64, 48), ops.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := ops.Key{Seed: 1, Epoch: 2, Sample: 77}
	for _, tc := range []struct {
		name  string
		in    ops.Value
		to    int
		want  error
		parts []string
	}{
		{"does not cover the box", &ops.CutJPEG{W: 1000, H: 800, X: 0, Y: 0, Data: small}, p.Len(), ops.ErrCorrupt,
			[]string{"op cut", "does not cover the crop box"}},
		{"outside the image", &ops.CutJPEG{W: 100, H: 60, X: 48, Y: 0, Data: small}, p.Len(), ops.ErrCorrupt,
			[]string{"op cut", "lies outside the 100x60 image"}},
		{"not a jpeg", &ops.CutJPEG{W: 100, H: 60, Data: []byte("not a jpeg")}, p.Len(), ops.ErrNotJPEG, []string{"op cut"}},
		{"truncated", &ops.CutJPEG{W: 64, H: 48, Data: small[:len(small)/2]}, p.Len(), ops.ErrTruncated, []string{"op cut"}},
		{"too many pixels", &ops.CutJPEG{W: 1 << 20, H: 1 << 20, Data: small}, p.Len(), ops.ErrTooLarge, []string{"op cut"}},
		{"raw bytes", ops.Encoded(small), p.Len(), ops.ErrKind, []string{"op cut", "split cut takes a cut jpeg, got encoded"}},
		{"nil", (*ops.CutJPEG)(nil), p.Len(), ops.ErrKind, []string{"op cut"}},
		{"to 1", &ops.CutJPEG{W: 64, H: 48, Data: small}, 1, ops.ErrSplit, []string{"ops [cut:1] of 5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := p.Run(key, tc.in, ops.SplitCut, tc.to)
			if v != nil {
				t.Fatalf("got a value with %v", err)
			}
			wantErr(t, err, key.Sample, tc.want, tc.parts...)
		})
	}
	// The whole image as a cut at the origin is a valid cut of itself.
	whole := &ops.CutJPEG{W: 64, H: 48, Data: small}
	got, err := p.Run(key, whole, ops.SplitCut, p.Len())
	if err != nil {
		t.Fatal(err)
	}
	want, err := p.Run(key, ops.Encoded(small), 0, p.Len())
	if err != nil || !bytes.Equal(valueBytes(got), valueBytes(want)) {
		t.Fatalf("the whole file as a cut: got %v, want the whole run's bytes", err)
	}
	// A pipeline without the split refuses both sides.
	val, err := ops.Preset("imagenet-val")
	if err != nil {
		t.Fatal(err)
	}
	if val.CanCut() {
		t.Fatal("imagenet-val has a cut split")
	}
	_, err = val.Cut(key, ops.Encoded(small), ops.Limits{})
	wantErr(t, err, key.Sample, ops.ErrSplit, "has no cut split")
	_, err = val.Run(key, whole, ops.SplitCut, val.Len())
	wantErr(t, err, key.Sample, ops.ErrSplit, "has no cut split")
}

// TestCutLimits checks that Cut refuses what the whole run refuses, with the
// same error, and declines where only the transform would break a limit.
func TestCutLimits(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	key := ops.Key{Seed: 5, Sample: 31}
	photo, err := ops.EncodeJPEG(synth.Photo(4, 1024, 768), ops.EncodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	limit := func(f func(*ops.Limits)) ops.Limits {
		l := ops.DefaultLimits()
		f(&l)
		return l
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		lim     ops.Limits
		want    error // Cut's error
		runFail bool  // the whole run fails with the same error
		parts   []string
	}{
		{"pixels", photo, limit(func(l *ops.Limits) { l.MaxPixels = 1000 }), ops.ErrTooLarge, true, []string{"1024x768 is 786432 pixels, limit 1000"}},
		{"output bytes", photo, limit(func(l *ops.Limits) { l.MaxOutputBytes = 1 << 20 }), ops.ErrTooLarge, true, []string{"decode output 1024x768x3"}},
		{"deadline", photo, limit(func(l *ops.Limits) { l.Deadline = time.Now().Add(-time.Second) }), ops.ErrDeadline, true, []string{"deadline passed"}},
		{"scans", hostile.Progressive(64, 64, ops.DefaultMaxScans+1), ops.DefaultLimits(), ops.ErrCannotCut, false, nil},
		{"progressive memory", hostile.Progressive(256, 256, 3), limit(func(l *ops.Limits) { l.MaxMemory = 64 << 10 }), ops.ErrTooLarge, true, []string{"coefficient buffers, above the 64 KiB memory limit"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Cut(key, ops.Encoded(tc.data), tc.lim)
			wantErr(t, err, key.Sample, tc.want, tc.parts...)
			if tc.name == "scans" && cgoCut() && !strings.Contains(err.Error(), "more than 64 scans") {
				t.Errorf("%v does not give the scan limit", err)
			}
			_, runErr := p.RunLimited(key, ops.Encoded(tc.data), 0, p.Len(), tc.lim)
			if tc.runFail && cutErrClass(runErr) != tc.want {
				t.Errorf("the whole run gives %v, want %v as the cut does", runErr, tc.want)
			}
		})
	}
	t.Run("transform memory", func(t *testing.T) {
		// A baseline decode holds no coefficients, the transform all of
		// them: 1024x768 4:2:0 has 18432 blocks, 2.25 MiB.
		lim := limit(func(l *ops.Limits) { l.MaxMemory = 1 << 20 })
		_, err := p.Cut(key, ops.Encoded(photo), lim)
		wantErr(t, err, key.Sample, ops.ErrCannotCut)
		if cgoCut() && !strings.Contains(err.Error(), "above the 1 MiB memory limit") {
			t.Errorf("%v does not give the memory limit", err)
		}
		if _, err := p.RunLimited(key, ops.Encoded(photo), 0, p.Len(), lim); err != nil {
			t.Errorf("the whole run: %v", err)
		}
	})
	t.Run("transform output buffer", func(t *testing.T) {
		if !cgoCut() {
			t.Skipf("the %s build does not cut", ops.JPEGBackend)
		}
		// Between the coefficients and the coefficients plus the cut's
		// worst-case output buffer, the cut declines for the buffer.
		var sawBuffer bool
		for m := int64(2 << 20); m <= 16<<20; m += 128 << 10 {
			_, err := p.Cut(key, ops.Encoded(photo), limit(func(l *ops.Limits) { l.MaxMemory = m }))
			if err == nil {
				if !sawBuffer {
					t.Fatalf("cut at a %d-byte limit without first declining for the output buffer", m)
				}
				return
			}
			wantErr(t, err, key.Sample, ops.ErrCannotCut)
			sawBuffer = sawBuffer || strings.Contains(err.Error(), "of output buffer, above the")
		}
		t.Fatal("no cut within a 16 MiB memory limit")
	})
	t.Run("compute side", func(t *testing.T) {
		if !cgoCut() {
			t.Skipf("the %s build does not cut", ops.JPEGBackend)
		}
		cut, err := p.Cut(key, ops.Encoded(photo), ops.DefaultLimits())
		if err != nil {
			t.Fatal(err)
		}
		_, err = p.RunLimited(key, cut, ops.SplitCut, p.Len(), limit(func(l *ops.Limits) { l.MaxOutputBytes = 1 << 20 }))
		wantErr(t, err, key.Sample, ops.ErrTooLarge, "op cut", "decode output 1024x768x3")
		_, err = p.RunLimited(key, cut, ops.SplitCut, p.Len(), limit(func(l *ops.Limits) { l.MaxPixels = 1000 }))
		wantErr(t, err, key.Sample, ops.ErrTooLarge, "op cut")
		_, err = p.RunLimited(key, cut, ops.SplitCut, p.Len(), limit(func(l *ops.Limits) { l.Deadline = time.Now().Add(-time.Second) }))
		wantErr(t, err, key.Sample, ops.ErrDeadline, "op cut")
	})
}

// TestCutHostile runs the hostile corpus through Cut under DefaultLimits:
// every file is cut or refused with a typed error, quickly; a refusal other
// than ErrCannotCut is the whole run's own, and a cut gives the whole run's
// bytes.
func TestCutHostile(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	var cuts int
	for i, c := range hostile.Corpus() {
		key := ops.Key{Seed: 3, Epoch: 1, Sample: uint64(i)}
		start := time.Now()
		_, cerr := p.Cut(key, ops.Encoded(c.Data), ops.DefaultLimits())
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: Cut took %v", c.Name, d)
		}
		if cerr != nil && cutErrClass(cerr) == cerr {
			t.Errorf("%s: untyped error %v", c.Name, cerr)
		}
		cut, declined, err := checkCut(p, key, c.Data, wireform.CodecZstd, ops.DefaultLimits())
		if err != nil {
			t.Errorf("%s: %v", c.Name, err)
			continue
		}
		if cut != nil {
			cuts++
		}
		if declined != nil && !errors.Is(declined, ops.ErrCannotCut) && !errors.Is(declined, c.Want) {
			t.Errorf("%s: Cut gives %v, the corpus expects %v", c.Name, declined, c.Want)
		}
	}
	t.Logf("%d of %d hostile files cut", cuts, len(hostile.Corpus()))
}

// TestCutConcurrent cuts the same samples from several goroutines in
// scrambled order: each cut must equal the one made alone.
func TestCutConcurrent(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := synth.JPEG(8, 400, 300, synth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	cutBytes := func(i int) []byte {
		cut, err := p.Cut(ops.Key{Seed: 2, Sample: uint64(i)}, ops.Encoded(raw), ops.Limits{})
		if errors.Is(err, ops.ErrCannotCut) {
			return nil
		}
		if err != nil {
			t.Error(err)
			return nil
		}
		w, err := wireform.Encode(cut, wireform.CodecNone)
		if err != nil {
			t.Error(err)
		}
		return w
	}
	want := make([][]byte, n)
	for i := range want {
		want[i] = cutBytes(i)
	}
	got := make([][]byte, n)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := n - 1 - w; i >= 0; i -= 4 {
				got[i] = cutBytes(i)
			}
		})
	}
	wg.Wait()
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("sample %d: the concurrent cut differs from the sequential one", i)
		}
	}
}

// TestCheckHeader: a pipeline that starts with decode refuses from the
// header what its decode refuses under the limits, naming the sample; a
// normal header passes, under Decode and the fused decode-and-crop op.
func TestCheckHeader(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	lim := ops.DefaultLimits()
	bomb := jpeg.HeaderOf(65535, 65535, 3, false, 16, 16)
	err = p.CheckHeader(7, bomb, lim)
	var se *ops.SampleError
	if !errors.Is(err, ops.ErrTooLarge) || !errors.As(err, &se) || se.Sample != 7 {
		t.Errorf("bomb: got %v, want a TOO_LARGE *SampleError for sample 7", err)
	}
	if err := p.CheckHeader(7, jpeg.HeaderOf(2048, 1536, 3, false, 16, 16), lim); err != nil {
		t.Errorf("photo: got %v, want nil", err)
	}
	// A spec's own max_pixels caps what the server allows.
	small, err := ops.Spec{Name: "small", Ops: []ops.OpSpec{{Op: "decode", MaxPixels: 1000}, {Op: "to_tensor"}}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := small.CheckHeader(1, jpeg.HeaderOf(64, 64, 3, false, 16, 16), lim); !errors.Is(err, ops.ErrTooLarge) {
		t.Errorf("spec max_pixels 1000, 64x64: got %v, want TOO_LARGE", err)
	}
	fused, err := ops.Spec{Name: "fused", Ops: []ops.OpSpec{{Op: "decode_random_resized_crop", Size: []int{224}}, {Op: "to_tensor"}}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	if err := fused.CheckHeader(1, bomb, lim); !errors.Is(err, ops.ErrTooLarge) {
		t.Errorf("decode_random_resized_crop, bomb: got %v, want TOO_LARGE", err)
	}
	if err := fused.CheckHeader(1, jpeg.HeaderOf(2048, 1536, 3, false, 16, 16), lim); err != nil {
		t.Errorf("decode_random_resized_crop, photo: got %v, want nil", err)
	}
}
