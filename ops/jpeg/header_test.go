package jpeg

import "testing"

func TestScansOver(t *testing.T) {
	seg := func(m byte, n int) []byte {
		return append([]byte{0xFF, m, byte((n + 2) >> 8), byte(n + 2)}, make([]byte, n)...)
	}
	scan := func(data ...byte) []byte { return append(seg(0xDA, 8), data...) }
	var file []byte
	file = append(file, 0xFF, 0xD8)
	file = append(file, seg(0xC2, 11)...)
	for range 3 {
		// Entropy data with a stuffed 0xFF, a restart marker and fill bytes.
		file = append(file, scan(1, 0xFF, 0x00, 2, 0xFF, 0xD3, 4, 0xFF)...)
	}
	file = append(file, 0xFF, 0xD9)
	file = append(file, scan()...) // after EOI: not counted
	for max, want := range []bool{true, true, true, false, false} {
		if got := scansOver(file, max); got != want {
			t.Errorf("scansOver(3 scans, %d): got %v, want %v", max, got, want)
		}
	}
}
