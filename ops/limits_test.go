package ops_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sophon-dl/sophon/ops"
	"github.com/sophon-dl/sophon/ops/hostile"
	"github.com/sophon-dl/sophon/ops/synth"
)

func buildSpec(t *testing.T, yaml string) *ops.Pipeline {
	t.Helper()
	s, err := ops.ParseSpec([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Build()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func needLibjpeg(t *testing.T) {
	t.Helper()
	if ops.JPEGBackend != "libjpeg-turbo" {
		t.Skipf("the %s backend cannot bound its memory nor stop mid-decode", ops.JPEGBackend)
	}
}

func corpusCase(t *testing.T, name string) []byte {
	t.Helper()
	for _, c := range hostile.Corpus() {
		if c.Name == name {
			return c.Data
		}
	}
	t.Fatalf("no hostile case %q", name)
	return nil
}

// bytesPerRun runs f runs times and returns the bytes it allocated per run.
func bytesPerRun(runs int, f func()) uint64 {
	f()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// wantErr checks that err is a *SampleError for sample that wraps want and
// mentions every part.
func wantErr(t *testing.T, err error, sample uint64, want error, parts ...string) {
	t.Helper()
	var se *ops.SampleError
	if !errors.Is(err, want) || !errors.As(err, &se) || se.Sample != sample {
		t.Fatalf("got %v, want a sample %d error wrapping %v", err, sample, want)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

func TestRunLimitedRefusesBeforeAllocating(t *testing.T) {
	small := ops.Encoded(hostile.Baseline(64, 16, 3))
	atCap := ops.Encoded(corpusCase(t, "pixel-cap/8192x4096-16-bytes"))
	cases := []struct {
		name, spec string
		in         ops.Encoded
		parts      []string
		// libjpeg: only libjpeg buffers a non-interleaved baseline image.
		libjpeg bool
	}{
		{"resize-32768x32768", "{name: bomb, ops: [{op: decode}, {op: resize, size: [32768, 32768]}, {op: to_tensor}]}", small,
			[]string{"op resize", "resize output 32768x32768x3 = 3 GiB above the 128 MiB limit"}, false},
		{"resize-short-32768", "{name: bomb, ops: [{op: decode}, {op: resize, size: [32768]}]}", small,
			[]string{"op resize", "resize output 131072x32768x3"}, false},
		{"center-crop-32768", "{name: bomb, ops: [{op: decode}, {op: center_crop, size: [32768, 32768]}]}", small,
			[]string{"op center_crop", "32768x32768x3"}, false},
		{"rrc-32768", "{name: bomb, ops: [{op: decode_random_resized_crop, size: [32768, 32768]}]}", small,
			[]string{"op decode_random_resized_crop", "32768x32768x3"}, false},
		// The decode fits (96 MiB) but its tensor (384 MiB) does not: the
		// run is refused before the decode allocates.
		{"to-tensor-of-cap", "{name: bomb, ops: [{op: decode}, {op: to_tensor}, {op: normalize, mean: [0, 0, 0], std: [1, 1, 1]}]}", atCap,
			[]string{"op to_tensor", "to_tensor output 3x4096x8192 float32 = 384 MiB above the 128 MiB limit"}, false},
		// Refused from the frame header, before the decode's pixel buffer.
		{"header-bomb", "{name: bomb, ops: [{op: decode}, {op: random_resized_crop, size: [8, 8]}]}",
			ops.Encoded(corpusCase(t, "header-bomb/65000x65000-in-1k")),
			[]string{"op decode", "65000x65000 is 4225000000 pixels, limit 33554432"}, false},
		{"coefficient-bomb", "{name: bomb, ops: [{op: decode}, {op: random_resized_crop, size: [8, 8]}]}",
			ops.Encoded(corpusCase(t, "coefficient-memory/non-interleaved-6000x5000")),
			[]string{"op decode", "multi-scan JPEG of 6000x5000 needs 180.0 MB of coefficient buffers, above the 128 MiB memory limit"}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.libjpeg {
				needLibjpeg(t)
			}
			p := buildSpec(t, c.spec)
			var err error
			n := bytesPerRun(10, func() {
				_, err = p.RunLimited(ops.Key{Sample: 42}, c.in, 0, p.Len(), ops.DefaultLimits())
			})
			wantErr(t, err, 42, ops.ErrTooLarge, c.parts...)
			t.Logf("%v; %d bytes allocated per run", err, n)
			if n > 1<<20 {
				t.Errorf("refusing allocated %d bytes per run, want < 1 MiB", n)
			}
		})
	}
}

func TestRunLimitedMaxPixels(t *testing.T) {
	overCap := corpusCase(t, "pixel-cap/8193x4096")
	// A spec cannot raise the server's cap...
	raise := buildSpec(t, "{name: raise, ops: [{op: decode, max_pixels: 1000000000}, {op: resize, size: [8, 8]}]}")
	_, err := raise.RunLimited(ops.Key{Sample: 3}, ops.Encoded(overCap), 0, raise.Len(), ops.DefaultLimits())
	wantErr(t, err, 3, ops.ErrTooLarge, "8193x4096 is 33558528 pixels, limit 33554432")
	// (which is what refused it: the spec's own cap lets the header pass.)
	if _, err := raise.Run(ops.Key{Sample: 3}, ops.Encoded(overCap), 0, raise.Len()); errors.Is(err, ops.ErrTooLarge) {
		t.Fatalf("unlimited run: got %v, want the header to pass a 1e9-pixel cap", err)
	}
	// ...but can lower it, fused with a crop or not.
	for _, spec := range []string{
		"{name: lower, ops: [{op: decode, max_pixels: 100}, {op: resize, size: [8, 8]}]}",
		"{name: lower, ops: [{op: decode, max_pixels: 100}, {op: random_resized_crop, size: [8, 8]}]}",
		"{name: lower, ops: [{op: decode_random_resized_crop, size: [8, 8], max_pixels: 100}]}",
	} {
		p := buildSpec(t, spec)
		_, err := p.RunLimited(ops.Key{Sample: 4}, ops.Encoded(hostile.Baseline(16, 16, 3)), 0, p.Len(), ops.DefaultLimits())
		wantErr(t, err, 4, ops.ErrTooLarge, "16x16 is 256 pixels, limit 100")
	}
}

func TestRunLimitedScans(t *testing.T) {
	ok := ops.Encoded(hostile.Progressive(64, 64, ops.DefaultMaxScans))
	over := ops.Encoded(hostile.Progressive(64, 64, ops.DefaultMaxScans+1))
	for _, name := range testedPresets() {
		t.Run(name, func(t *testing.T) {
			p, err := ops.Preset(name)
			if err != nil {
				t.Fatal(err)
			}
			key := ops.Key{Seed: 9, Sample: 5}
			want, err := p.Run(key, ok, 0, p.Len())
			if err != nil {
				t.Fatal(err)
			}
			got, err := p.RunLimited(key, ok, 0, p.Len(), ops.DefaultLimits())
			if err != nil || !bytes.Equal(valueBytes(got), valueBytes(want)) {
				t.Fatalf("64 scans: got %v, want Run's output", err)
			}
			_, err = p.RunLimited(key, over, 0, p.Len(), ops.DefaultLimits())
			wantErr(t, err, 5, ops.ErrTooLarge, "progressive JPEG has more than 64 scans")
		})
	}
}

func TestDecodeLimitsMemory(t *testing.T) {
	needLibjpeg(t)
	// 64x64 grey has 64 blocks: 8 KiB of coefficients.
	data := hostile.Progressive(64, 64, 3)
	if _, err := ops.DecodeJPEG(data, ops.DecodeLimits{MaxMemory: 8 << 10 / 2}); !errors.Is(err, ops.ErrTooLarge) ||
		!strings.Contains(err.Error(), "progressive JPEG of 64x64 needs 8 KiB of coefficient buffers, above the 4 KiB memory limit") {
		t.Errorf("coefficients above the limit: got %v", err)
	}
	// Exactly the coefficients passes the check before libjpeg, whose own
	// max_memory_to_use also counts its other allocations and refuses.
	if _, err := ops.DecodeJPEG(data, ops.DecodeLimits{MaxMemory: 8 << 10}); !errors.Is(err, ops.ErrTooLarge) ||
		!strings.Contains(err.Error(), "memory limit") {
		t.Errorf("libjpeg's own limit: got %v", err)
	}
	if _, err := ops.DecodeJPEG(data, ops.DecodeLimits{MaxMemory: 1 << 20}); err != nil {
		t.Errorf("within the limit: got %v", err)
	}
}

func TestRunLimitedDeadline(t *testing.T) {
	p, err := ops.Preset("imagenet-train")
	if err != nil {
		t.Fatal(err)
	}
	in := ops.Encoded(hostile.Baseline(64, 64, 3))
	lim := ops.DefaultLimits()
	lim.Deadline = time.Now().Add(-time.Millisecond)
	_, err = p.RunLimited(ops.Key{Sample: 6}, in, 0, p.Len(), lim)
	wantErr(t, err, 6, ops.ErrDeadline, "op decode", "deadline passed")
	if errors.Is(err, ops.ErrTooLarge) {
		t.Errorf("%v wraps ErrTooLarge too", err)
	}
	// From a split, the deadline is checked before the first op run there.
	img, err := p.Run(ops.Key{Sample: 6}, in, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.RunLimited(ops.Key{Sample: 6}, img, 2, p.Len(), lim)
	wantErr(t, err, 6, ops.ErrDeadline, "op random_horizontal_flip")

	t.Run("inside-libjpeg", func(t *testing.T) {
		needLibjpeg(t)
		// 20000 scans of 1024x1024: without limits, its decode would run far
		// past any per-request deadline.
		bomb := ops.Encoded(hostile.Progressive(1024, 1024, 20000))
		lim := ops.DefaultLimits()
		lim.MaxScans = 0
		start := time.Now()
		lim.Deadline = start.Add(50 * time.Millisecond)
		_, err := p.RunLimited(ops.Key{Sample: 7}, bomb, 0, p.Len(), lim)
		d := time.Since(start)
		wantErr(t, err, 7, ops.ErrDeadline, "op decode", "in libjpeg at scan")
		t.Logf("%v after %v", err, d)
		if d > time.Second {
			t.Errorf("deadline 50ms fired after %v, want < 1s", d)
		}
	})
}

// TestRunLimitedSameBytes checks that limits only refuse: whatever passes
// them gives Run's bytes, whole or split at every point.
func TestRunLimitedSameBytes(t *testing.T) {
	type input struct {
		name string
		data []byte
	}
	var ins []input
	for i, opt := range []synth.Options{{}, {Progressive: true}, {Gray: true}, {CMYK: true}, {Subsampling: 444}} {
		data, err := synth.JPEG(uint64(i), 97+13*i, 83+7*i, opt)
		if errors.Is(err, ops.ErrUnsupported) {
			continue // an option the pure-Go encoder cannot write
		}
		if err != nil {
			t.Fatal(err)
		}
		ins = append(ins, input{fmt.Sprintf("%+v", opt), data})
	}
	lim := ops.DefaultLimits()
	lim.Deadline = time.Now().Add(time.Hour)
	for _, name := range testedPresets() {
		p, err := ops.Preset(name)
		if err != nil {
			t.Fatal(err)
		}
		for s, in := range ins {
			key := ops.Key{Seed: 11, Epoch: 2, Sample: uint64(s)}
			want, err := p.Run(key, ops.Encoded(in.data), 0, p.Len())
			if err != nil {
				t.Fatalf("%s %s: %v", name, in.name, err)
			}
			for k := 0; k <= p.Len(); k++ {
				mid, err := p.RunLimited(key, ops.Encoded(in.data), 0, k, lim)
				if err != nil {
					t.Fatalf("%s %s [0:%d]: %v", name, in.name, k, err)
				}
				got, err := p.RunLimited(key, mid, k, p.Len(), lim)
				if err != nil {
					t.Fatalf("%s %s [%d:]: %v", name, in.name, k, err)
				}
				if !bytes.Equal(valueBytes(got), valueBytes(want)) {
					t.Errorf("%s %s split at %d: RunLimited differs from Run", name, in.name, k)
				}
			}
		}
	}
}

// TestRunLimitedMaxResultBytes: MaxResultBytes bounds only the run's last
// op, before anything is allocated: a 5000x5000 resize fits the op limit
// but not a 64 MiB result, while a run that ends at the decode, or goes on
// to a small crop, passes.
func TestRunLimitedMaxResultBytes(t *testing.T) {
	small := ops.Encoded(hostile.Baseline(64, 16, 3))
	p := buildSpec(t, "{name: wide, ops: [{op: decode}, {op: resize, size: [5000, 5000]}, {op: center_crop, size: [8, 8]}]}")
	lim := ops.DefaultLimits()
	lim.MaxResultBytes = 64 << 20
	var err error
	n := bytesPerRun(10, func() { _, err = p.RunLimited(ops.Key{Sample: 42}, small, 0, 2, lim) })
	wantErr(t, err, 42, ops.ErrTooLarge, "op resize", "resize output 5000x5000x3 = 75.0 MB above the 64 MiB limit")
	if n > 1<<20 {
		t.Errorf("refusing allocated %d bytes per run, want < 1 MiB", n)
	}
	for _, to := range []int{1, 3} {
		if _, err := p.RunLimited(ops.Key{Sample: 42}, small, 0, to, lim); err != nil {
			t.Errorf("ops [0:%d]: %v", to, err)
		}
	}
}
