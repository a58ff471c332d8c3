package jpeg

import (
	"errors"
	"testing"
)

// checkSummary: a parsed header's Summary says what the header says and
// survives its binary form.
func checkSummary(t *testing.T, h Header) {
	t.Helper()
	s := h.Summary()
	if h.W > 0xFFFF || h.H > 0xFFFF {
		if s.Known() {
			t.Fatalf("Summary of a %dx%d header is known", h.W, h.H)
		}
		return
	}
	mw, mh := s.MCU()
	if !s.Known() || s.Width() != h.W || s.Height() != h.H || s.Components() != h.Components || s.Progressive() != h.Progressive || mw != h.MCUW || mh != h.MCUH {
		t.Fatalf("Summary %v of header %+v", s, h)
	}
	b, _ := s.AppendBinary(nil)
	if got, err := ParseSummary(b); err != nil || got != s {
		t.Fatalf("ParseSummary(% x) = %v, %v, want %v", b, got, err, s)
	}
}

// checkSummaryHeader: the header a summary rebuilds says what h says and
// needs no more coefficient buffers than h, exactly as many where h is
// sampled as Summary.Header assumes (usual).
func checkSummaryHeader(t *testing.T, name string, h Header, usual bool) {
	t.Helper()
	got := h.Summary().Header()
	if got.W != h.W || got.H != h.H || got.Components != h.Components || got.Progressive != h.Progressive || got.MCUW != h.MCUW || got.MCUH != h.MCUH {
		t.Fatalf("%s: Summary().Header() = %+v, want the fields of %+v", name, got, h)
	}
	if got.coefBlocks > h.coefBlocks || usual && got.coefBlocks != h.coefBlocks {
		t.Errorf("%s: rebuilt header has %d coefficient blocks, the file's %d (usual sampling: %v)", name, got.coefBlocks, h.coefBlocks, usual)
	}
	if got.multiScan != h.Progressive {
		t.Errorf("%s: rebuilt multiScan %v for progressive %v", name, got.multiScan, h.Progressive)
	}
}

// TestReadHeaderSummary: the headers of JPEGs of each kind, and their
// summaries.
func TestReadHeaderSummary(t *testing.T) {
	seg := func(m byte, payload ...byte) []byte {
		return append([]byte{0xFF, m, byte((len(payload) + 2) >> 8), byte(len(payload) + 2)}, payload...)
	}
	sof := func(m byte, w, h int, comps ...byte) []byte {
		p := []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(len(comps) / 2)}
		for i := 0; i < len(comps); i += 2 {
			p = append(p, comps[i], comps[i+1], 0)
		}
		return seg(m, p...)
	}
	file := func(frame []byte) []byte {
		b := append([]byte{0xFF, 0xD8}, frame...)
		return append(b, seg(0xDA, 1, 1, 0, 0, 63, 0)...)
	}
	tests := []struct {
		name       string
		data       []byte
		want       string
		comps, mcu int
	}{
		{"420", file(sof(0xC0, 500, 375, 1, 0x22, 2, 0x11, 3, 0x11)), "500x375 3c mcu 16x16", 3, 16},
		{"422", file(sof(0xC0, 17, 9, 1, 0x21, 2, 0x11, 3, 0x11)), "17x9 3c mcu 16x8", 3, 16},
		{"444 progressive", file(sof(0xC2, 65535, 1, 1, 0x11, 2, 0x11, 3, 0x11)), "65535x1 3c mcu 8x8 progressive", 3, 8},
		{"grey 2x2", file(sof(0xC0, 64, 48, 1, 0x22)), "64x48 1c mcu 8x8", 1, 8},
		{"cmyk 4x4", file(sof(0xC1, 64, 48, 1, 0x44, 2, 0x11, 3, 0x11, 4, 0x44)), "64x48 4c mcu 32x32", 4, 32},
	}
	for _, tt := range tests {
		h, err := ReadHeader(tt.data)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		checkSummary(t, h)
		checkSummaryHeader(t, tt.name, h, tt.name != "cmyk 4x4")
		if got := h.Summary().String(); got != tt.want || h.MCUW != tt.mcu {
			t.Errorf("%s: got %s (MCU %dx%d), want %s", tt.name, got, h.MCUW, h.MCUH, tt.want)
		}
	}
	if s := (Header{W: 70000, H: 10, Components: 3, MCUW: 8, MCUH: 8}).Summary(); s.Known() {
		t.Errorf("a 70000-pixel-wide header: got %v, want unknown", s)
	}
	if s := (Header{}).Summary(); s.Known() || s.Components() != 0 || s.String() != "unknown" {
		t.Errorf("the zero header: got %v, want unknown", s)
	}
}

// TestParseSummary: every flags byte is accepted or refused as the binary
// form says.
func TestParseSummary(t *testing.T) {
	for f := range 256 {
		for _, wh := range [][2]byte{{0, 0}, {0, 1}, {1, 0}, {3, 7}} {
			b := []byte{0, wh[0], 0, wh[1], byte(f)}
			s, err := ParseSummary(b)
			known := f&0x80 != 0
			valid := (!known && f == 0 && wh == [2]byte{}) || (known && wh[0] != 0 && wh[1] != 0 && f>>4&3 != 3)
			if (err == nil) != valid {
				t.Fatalf("ParseSummary(% x) = %v, %v; valid %v", b, s, err, valid)
			}
			if err != nil {
				if !errors.Is(err, ErrSummary) {
					t.Fatalf("ParseSummary(% x): %v does not wrap ErrSummary", b, err)
				}
				continue
			}
			if got, _ := s.AppendBinary(nil); string(got) != string(b) {
				t.Fatalf("ParseSummary(% x) re-encodes to % x", b, got)
			}
		}
	}
	if _, err := ParseSummary([]byte{1, 2, 3, 4}); !errors.Is(err, ErrSummary) {
		t.Errorf("4 bytes: %v, want ErrSummary", err)
	}
}

// TestSummaryHeaderLimits: a header rebuilt from a summary is refused by
// the limits that refuse the file: a 65535x65535 header bomb by its
// pixels, a large progressive frame by its coefficient buffers, and a
// normal photograph by neither.
func TestSummaryHeaderLimits(t *testing.T) {
	tests := []struct {
		name string
		h    Header
		lim  DecodeLimits
		bad  bool
	}{
		{"bomb", HeaderOf(65535, 65535, 3, false, 16, 16), DecodeLimits{}, true},
		{"bomb under a server cap", HeaderOf(8192, 4097, 3, false, 16, 16), DecodeLimits{MaxPixels: 32 << 20}, true},
		{"progressive memory", HeaderOf(8000, 8000, 3, true, 16, 16), DecodeLimits{MaxMemory: 128 << 20}, true},
		{"baseline memory", HeaderOf(8000, 8000, 3, false, 16, 16), DecodeLimits{MaxMemory: 128 << 20}, false},
		{"photo", HeaderOf(2048, 1536, 3, true, 16, 16), DecodeLimits{MaxPixels: 32 << 20, MaxMemory: 128 << 20}, false},
	}
	for _, tt := range tests {
		err := tt.lim.Check(tt.h)
		if got := errors.Is(err, ErrTooLarge); got != tt.bad {
			t.Errorf("%s: Check = %v, want refused %v", tt.name, err, tt.bad)
		}
	}
}
