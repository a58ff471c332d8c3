package synth

import "math"

// All pixel maths is integer. Float multiply-adds may be fused into FMA
// instructions on some architectures (and on amd64 with GOAMD64=v3), which
// would let the same seed give different pixels on different machines.

// one is 1.0 in the Q12 fixed point of noise values and field weights.
const one = 1 << 12

// mix is splitmix64's finaliser: a fast, well-distributed 64-bit hash.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// lattice is the value-noise lattice value at (i, j) for key, uniform in
// [-one, one].
func lattice(key uint64, i, j int) int64 {
	h := mix(key ^ uint64(i)*0x9e3779b97f4a7c15 ^ uint64(j)*0xc2b2ae3d27d4eb4f)
	return int64(h>>51) - one
}

// maxCellLog bounds the octaves' cell sizes: cells are at most
// 2^maxCellLog px.
const maxCellLog = 11

// smooth[k][f] is smoothstep(f / 2^k) in Q16, for f in [0, 2^k].
var smooth = func() [maxCellLog + 1][]int64 {
	var t [maxCellLog + 1][]int64
	for k := range t {
		s := int64(1) << k
		t[k] = make([]int64, s+1)
		for f := range s + 1 {
			x := (f << 16) / s
			t[k][f] = (x * x >> 16) * (3<<16 - 2*x) >> 16
		}
	}
	return t
}()

// octave is one band of value noise: cells 2^kx by 2^ky pixels, scaled by
// amp (Q12).
type octave struct {
	kx, ky uint
	amp    int64
	key    uint64
}

// field is a sum of octaves, evaluated one row at a time.
type field struct {
	octs []octave
	row  []int64 // the current row's values, Q12 times the amplitudes
	lat  []int64 // scratch: one octave's lattice interpolated to the row
}

func newField(w int, octs []octave) *field {
	return &field{octs: octs, row: make([]int64, w), lat: make([]int64, w+2)}
}

// eval fills f.row with the field's values along row y.
func (f *field) eval(y int) {
	clear(f.row)
	w := len(f.row)
	for _, o := range f.octs {
		if o.amp == 0 {
			continue
		}
		iy := y >> o.ky
		wy := smooth[o.ky][y&(1<<o.ky-1)]
		cols := (w-1)>>o.kx + 2
		for i := range cols {
			a := lattice(o.key, i, iy)
			b := lattice(o.key, i, iy+1)
			f.lat[i] = (a + (b-a)*wy>>16) * o.amp >> 12
		}
		s := 1 << o.kx
		sw := smooth[o.kx]
		for i := range cols - 1 {
			a := f.lat[i]
			d := f.lat[i+1] - a
			x0 := i << o.kx
			n := min(s, w-x0)
			row := f.row[x0 : x0+n]
			for k := range row {
				row[k] += a + d*sw[k]>>16
			}
		}
	}
}

// isqrt is floor(sqrt(n)) for n >= 0. math.Sqrt is correctly rounded on
// every platform; the loops only guard the conversion.
func isqrt(n int64) int64 {
	r := int64(math.Sqrt(float64(n)))
	for r*r > n {
		r--
	}
	for (r+1)*(r+1) <= n {
		r++
	}
	return r
}

// clamp limits v to [lo, hi].
func clamp(v, lo, hi int64) int64 {
	return max(lo, min(v, hi))
}
