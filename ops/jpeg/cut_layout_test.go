package jpeg

import (
	"errors"
	"strings"
	"testing"
)

// cutTestFile is SOI, a frame header (SOF0, or SOF2 when scans are given)
// of a 64x48 image whose components have the given sampling factors, the
// scan headers (each ns, component indexes, Ss, Se, Ah<<4|Al) with a byte
// of entropy data after each, and EOI unless noEOI.
func cutTestFile(factors [][2]int, scans [][]int, noEOI bool) []byte {
	seg := func(m byte, b []byte) []byte {
		return append([]byte{0xFF, m, byte((len(b) + 2) >> 8), byte(len(b) + 2)}, b...)
	}
	sofM := byte(0xC0)
	if scans != nil {
		sofM = 0xC2
	}
	sof := []byte{8, 0, 48, 0, 64, byte(len(factors))}
	for i, f := range factors {
		sof = append(sof, byte(i+1), byte(f[0]<<4|f[1]), 0)
	}
	out := append([]byte{0xFF, 0xD8}, seg(sofM, sof)...)
	if scans == nil {
		all := []int{len(factors)}
		for i := range factors {
			all = append(all, i)
		}
		scans = [][]int{append(all, 0, 63, 0)}
	}
	for _, s := range scans {
		b := []byte{byte(s[0])}
		for _, c := range s[1 : 1+s[0]] {
			b = append(b, byte(c+1), 0)
		}
		b = append(b, byte(s[1+s[0]]), byte(s[2+s[0]]), byte(s[3+s[0]]))
		out = append(append(out, seg(0xDA, b)...), 0x00)
	}
	if !noEOI {
		out = append(out, 0xFF, 0xD9)
	}
	return out
}

// TestReadCutLayout checks the sampling factors the cut accepts (each with
// its libturbojpeg subsampling and iMCU) and declines, and the progressive
// completeness rule.
func TestReadCutLayout(t *testing.T) {
	one := [2]int{1, 1}
	// A complete progression of three components: DC with Al 1, every AC
	// band at full precision, then the DC refinement.
	complete := [][]int{
		{3, 0, 1, 2, 0, 0, 0x01},
		{1, 0, 1, 5, 0x00}, {1, 0, 6, 63, 0x00},
		{1, 1, 1, 63, 0x00}, {1, 2, 1, 63, 0x00},
		{3, 0, 1, 2, 0, 0, 0x10},
	}
	for _, tc := range []struct {
		name       string
		data       []byte
		samp       int
		mcuW, mcuH int
		decline    string // part of the ErrCannotCut message; "" accepts
	}{
		{"gray", cutTestFile([][2]int{one}, nil, false), cutSampGray, 8, 8, ""},
		{"gray 2x2", cutTestFile([][2]int{{2, 2}}, nil, false), 0, 0, 0, "grey JPEG with sampling factors 2x2"},
		{"444", cutTestFile([][2]int{one, one, one}, nil, false), cutSamp444, 8, 8, ""},
		{"422", cutTestFile([][2]int{{2, 1}, one, one}, nil, false), cutSamp422, 16, 8, ""},
		{"420", cutTestFile([][2]int{{2, 2}, one, one}, nil, false), cutSamp420, 16, 16, ""},
		{"440", cutTestFile([][2]int{{1, 2}, one, one}, nil, false), cutSamp440, 8, 16, ""},
		{"411", cutTestFile([][2]int{{4, 1}, one, one}, nil, false), cutSamp411, 32, 8, ""},
		{"410", cutTestFile([][2]int{{4, 2}, one, one}, nil, false), 0, 0, 0, "luma sampling factors 4x2"},
		{"h3v1", cutTestFile([][2]int{{3, 1}, one, one}, nil, false), 0, 0, 0, "luma sampling factors 3x1"},
		{"444 written 2x2", cutTestFile([][2]int{{2, 2}, {2, 2}, {2, 2}}, nil, false), 0, 0, 0, "not a standard subsampling"},
		{"subsampled cr", cutTestFile([][2]int{{2, 2}, one, {2, 1}}, nil, false), 0, 0, 0, "not a standard subsampling"},
		{"cmyk", cutTestFile([][2]int{one, one, one, one}, nil, false), cutSamp444, 8, 8, ""},
		{"ycck 420", cutTestFile([][2]int{{2, 2}, one, one, {2, 2}}, nil, false), cutSamp420, 16, 16, ""},
		{"cmyk k 1x1", cutTestFile([][2]int{{2, 2}, one, one, one}, nil, false), 0, 0, 0, "not a standard subsampling"},
		{"progressive", cutTestFile([][2]int{{2, 2}, one, one}, complete, false), cutSamp420, 16, 16, ""},
		{"progressive without dc refinement", cutTestFile([][2]int{{2, 2}, one, one}, complete[:5], false), 0, 0, 0,
			"leave coefficient 0 of component 0 at 1 bits short"},
		{"progressive without cr", cutTestFile([][2]int{{2, 2}, one, one}, append(complete[:4:4], complete[5]), false), 0, 0, 0,
			"never send coefficient 1 of component 2"},
		{"progressive with ac at al 1", cutTestFile([][2]int{one}, [][]int{{1, 0, 0, 0, 0}, {1, 0, 1, 63, 0x01}}, false), 0, 0, 0,
			"leave coefficient 1 of component 0 at 1 bits short"},
		{"progressive refined", cutTestFile([][2]int{one}, [][]int{{1, 0, 0, 0, 0}, {1, 0, 1, 63, 0x01}, {1, 0, 1, 63, 0x10}}, false), cutSampGray, 8, 8, ""},
		{"progressive without eoi", cutTestFile([][2]int{{2, 2}, one, one}, complete, true), 0, 0, 0, "without an EOI marker"},
		{"progressive scan of band 5..3", cutTestFile([][2]int{one}, [][]int{{1, 0, 5, 3, 0}}, false), 0, 0, 0, "coefficients 5..3"},
		{"progressive scan of component 9", cutTestFile([][2]int{one}, [][]int{{1, 8, 0, 0, 0}}, false), 0, 0, 0, "unknown component id 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ReadHeader(tc.data)
			if err != nil {
				t.Fatal(err)
			}
			l, err := readCutLayout(tc.data, h)
			if tc.decline != "" {
				if !errors.Is(err, ErrCannotCut) || !strings.Contains(err.Error(), tc.decline) {
					t.Fatalf("got %v, want ErrCannotCut saying %q", err, tc.decline)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.samp != tc.samp || l.mcuW != tc.mcuW || l.mcuH != tc.mcuH {
				t.Fatalf("got subsampling %d, iMCU %dx%d; want %d, %dx%d", l.samp, l.mcuW, l.mcuH, tc.samp, tc.mcuW, tc.mcuH)
			}
			if got, want := 128*l.cutCoefBlocks(h.W, h.H), 128*h.coefBlocks; got != want {
				t.Errorf("the whole image's coefficients: %d bytes, the header parse counts %d", got, want)
			}
		})
	}
}
