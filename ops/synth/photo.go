package synth

import (
	"math/bits"

	"github.com/sophon-dl/sophon/ops"
)

// PhotoOptions tune [PhotoWith].
type PhotoOptions struct {
	// Detail scales the texture and grain, and with them the encoded size,
	// roughly logarithmically: below 1 the files shrink, above 1 they grow,
	// ever more slowly. Zero means 1; negative means no texture at all
	// (smooth shapes and gradients only). Values above 64 count as 64.
	Detail float64
}

// Photo renders a deterministic photo-like w x h image from seed: a sky and
// ground gradient with a wavy horizon, soft-edged ellipses, polygons and bars
// filled with gradients, and fractal value-noise texture and grain. The same
// seed gives the same pixels on every platform: all pixel maths is integer.
func Photo(seed uint64, w, h int) *ops.Image {
	return PhotoWith(seed, w, h, PhotoOptions{})
}

// PhotoWith is [Photo] with options.
func PhotoWith(seed uint64, w, h int, opt PhotoOptions) *ops.Image {
	img := ops.NewImage(w, h)
	if w <= 0 || h <= 0 {
		return img
	}
	s := newScene(seed, w, h, detailQ10(opt.Detail))
	s.render(img)
	return img
}

// detailQ10 converts a Detail to Q10 fixed point: one multiply and a
// conversion, exact and so the same on every platform.
func detailQ10(d float64) int64 {
	switch {
	case d == 0:
		return 1 << 10
	case !(d > 0): // negative or NaN
		return 0
	case d > 64:
		d = 64
	}
	return int64(d * 1024)
}

// texture weights the noise fields for one region; the weights are
// in 1/256 grey levels per unit (Q12 one) of field.
type texture struct {
	low  [3]int64 // broad illumination and tint, per channel
	midA [3]int64 // isotropic texture
	midB [3]int64 // horizontally streaked texture
	hi   [3]int64 // grain, per channel
	pat  [3]int64 // two-tone patches: a steep function of the mid fields
}

// at is the texture's offset, in 1/256 levels, of channel c at column x.
func (t *texture) at(f *fields, x, c int) int64 {
	return (f.low.row[x]*t.low[c] + f.midA.row[x]*t.midA[c] + f.midB.row[x]*t.midB[c] +
		f.hi.row[x]*t.hi[c] + f.pat[x]*t.pat[c]) >> 12
}

type fields struct {
	low, midA, midB, hi *field
	pat                 []int64
}

func (f *fields) eval(y int) {
	f.low.eval(y)
	f.midA.eval(y)
	f.midB.eval(y)
	f.hi.eval(y)
	for x, v := range f.midA.row {
		f.pat[x] = clamp((v+f.midB.row[x]/2)*patSteep, -one, one)
	}
}

const (
	kindEllipse = iota
	kindPolygon
)

// halfPlane is an inside half-plane of a convex polygon: the signed distance
// (1/16 px) of pixel centre p is (p16 - a16) . n >> 16, with n a Q16 unit
// normal pointing inwards.
type halfPlane struct {
	ax, ay int64
	nx, ny int64
}

type shape struct {
	kind           int
	x0, x1, y0, y1 int // bounding box, clipped to the image

	cx, cy int64 // centre, 1/16 px

	// Ellipse: (ux, uy) is the Q16 unit major axis; kx, ky are 2^28 over
	// the radii in 1/16 px; edge scales (1 - q) into alpha; shade brightens
	// (or darkens) towards the centre, in 1/256 levels.
	ux, uy, kx, ky, edge, shade int64

	// Polygon: the half-planes and 2^24 over the soft edge width (1/16 px).
	planes  []halfPlane
	softInv int64

	// Fill: colour a + d * t, t = clamp(0.5 + (p - c) . g) in Q16, with g
	// per pixel.
	col, dcol [3]int64
	gx, gy    int64
	opacity   int64 // 0..256
	tex       texture
}

type scene struct {
	w, h   int
	f      fields
	rowBuf []int64 // w * 3 accumulators, 1/256 levels

	skyTop, skyBot, gndTop, gndBot [3]int64
	skyTilt, gndTilt               [3]int64 // per-column delta, Q16 levels/256
	horizon                        []int64  // per column, 1/16 px
	horizon0                       int64    // mean horizon row, px
	horizonInv                     int64    // 2^24 / horizon softness (1/16 px)
	sky, gnd                       texture
	shapes                         []shape
}

func ri(r *ops.Rand, lo, hi int64) int64 { return lo + int64(r.Intn(int(hi-lo+1))) }

// palette holds natural base colours; shapes jitter around them.
var palette = [][3]int64{
	{60, 90, 40}, {90, 125, 50}, {40, 70, 30}, {120, 140, 70},
	{110, 80, 50}, {150, 110, 70}, {80, 60, 40}, {190, 160, 120},
	{120, 120, 120}, {180, 180, 175}, {60, 60, 65}, {225, 225, 220},
	{200, 150, 120}, {170, 40, 40}, {210, 120, 40}, {220, 190, 60},
	{50, 80, 150}, {100, 60, 120}, {25, 25, 30}, {90, 150, 170},
}

func jitter(r *ops.Rand, c [3]int64, j int64) [3]int64 {
	var o [3]int64
	for i := range c {
		o[i] = clamp(c[i]+ri(r, -j, j), 0, 255) << 8
	}
	return o
}

func newScene(seed uint64, w, h int, detail int64) *scene {
	r := ops.NewRand(seed)
	s := &scene{w: w, h: h, rowBuf: make([]int64, w*3)}
	d := int64(max(w, h))
	// Per-image variation of texture strength, so that sizes spread at a
	// fixed Detail the way photos of one size do.
	detail = detail * ri(r, 80, 125) / 100

	s.buildFields(r, d, detail)
	s.buildBackground(r, d, detail)

	big := 4 + r.Intn(7)
	for range big {
		if r.Intn(3) == 0 {
			s.addPolygon(r, d, detail, false)
		} else {
			s.addEllipse(r, d, d*6/100, d*35/100, detail)
		}
	}
	for range r.Intn(4) {
		s.addPolygon(r, d, detail, true)
	}
	small := r.Intn(25)
	for range small {
		s.addEllipse(r, d, max(1, d/100), max(2, d*4/100), detail)
	}
	return s
}

// buildFields sets up the noise fields. The mid-band octaves are fixed in
// pixels but their amplitudes fall with the image's size, as a photo's fine
// detail does when the same scene is captured at a higher resolution.
func (s *scene) buildFields(r *ops.Rand, d, detail int64) {
	key := func() uint64 { return r.Uint64() }
	// Low: cells about d/4 down to d/32.
	kTop := uint(min(maxCellLog, max(2, bits.Len64(uint64(d))-3)))
	var low []octave
	amp := int64(one * 8 / 15)
	for k := kTop; k+3 >= kTop && k >= 1; k-- {
		low = append(low, octave{kx: k, ky: k, amp: amp, key: key()})
		amp /= 2
	}
	// Mid-band amplitude of an octave of 2^k px cells: proportional to
	// cell/d, so the band looks alike at every resolution, and normalised
	// so that the 2..32 px octaves sum to one at d = 500.
	midAmp := func(k uint) int64 {
		return (int64(1) << k) * 500 * one / (d * 62)
	}
	var midA, midB []octave
	for k := uint(1); k <= 5; k++ {
		midA = append(midA, octave{kx: k, ky: k, amp: midAmp(k), key: key()})
	}
	for k := uint(0); k <= 4; k++ {
		midB = append(midB, octave{kx: k + 2, ky: k, amp: midAmp(k + 1), key: key()})
	}
	// Grain: octaves of about 1, 2 and 4 px at d = 500 that move to
	// coarser cells, smoothly, as d grows, and lose amplitude: a photo's
	// finest detail is softer at higher resolution, so bits per pixel fall.
	l := (log2Q8(d) - log2Q8(grainRef)) * grainShift / 100
	hs := clamp(isqrt(grainRef*one*one/d), 0, one*3/2)
	var hi []octave
	for k := range uint(6) {
		hi = append(hi, octave{kx: k, ky: k, amp: grainProfile(int64(k)<<8-l) * hs >> 12, key: key()})
	}
	w := s.w
	s.f = fields{low: newField(w, low), midA: newField(w, midA), midB: newField(w, midB), hi: newField(w, hi), pat: make([]int64, w)}
}

func (s *scene) buildBackground(r *ops.Rand, d, detail int64) {
	w, h := int64(s.w), int64(s.h)
	switch r.Intn(4) {
	case 0, 1: // clear sky
		s.skyTop = jitter(r, [3]int64{60, 110, 200}, 30)
		s.skyBot = jitter(r, [3]int64{190, 205, 230}, 20)
	case 2: // overcast
		g := ri(r, 140, 200)
		s.skyTop = jitter(r, [3]int64{g, g, g + 8}, 10)
		s.skyBot = jitter(r, [3]int64{g + 30, g + 30, g + 30}, 10)
	default: // dusk, or an indoor wall
		s.skyTop = jitter(r, [3]int64{70, 70, 120}, 40)
		s.skyBot = jitter(r, [3]int64{230, 170, 110}, 25)
	}
	s.gndTop = jitter(r, palette[r.Intn(8)], 30)
	s.gndBot = jitter(r, palette[r.Intn(12)], 30)
	for c := range 3 {
		s.skyTilt[c] = ri(r, -40, 40) << 16 / max(1, w)
		s.gndTilt[c] = ri(r, -40, 40) << 16 / max(1, w)
	}
	s.horizon0 = h * ri(r, 5, 50) / 100
	// Hills: a 1-D fractal along the horizon.
	s.horizon = make([]int64, w)
	hillAmp := h * 16 * ri(r, 1, 12) / 100
	kTop := uint(min(maxCellLog, max(1, bits.Len64(uint64(d))-3)))
	for n := range 5 {
		k := kTop - uint(min(n, int(kTop)))
		key := r.Uint64()
		cell := int64(1) << k
		for x := range w {
			i := x >> k
			a, b := lattice(key, int(i), 0), lattice(key, int(i)+1, 0)
			v := a + (b-a)*smooth[k][x&(cell-1)]>>16
			s.horizon[x] += v * hillAmp >> (12 + n)
		}
	}
	for x := range s.horizon {
		s.horizon[x] += s.horizon0*16 + 8
	}
	s.horizonInv = (1 << 24) / (16 * ri(r, 1, 6))

	for c := range 3 {
		s.sky.low[c] = ri(r, 10, 35) << 8
	}
	for c := range 3 {
		s.sky.hi[c] = ri(r, 1, 2) << 8 * detail >> 10
	}
	s.gnd = randomTexture(r, detail, s.gndTop, 8)
}

// Texture gains, Q10: how strongly each field marks a textured region.
// Together they set the encoded size of a photo (see the calibration in
// the tests).
const (
	midGain  = 2 << 10
	hiGain   = 64 << 10
	patGain  = 2 << 10
	patSteep = 16
	// grainChroma is how far (percent) a region's grain differs between
	// channels: colour noise, which survives chroma subsampling in part.
	grainChroma = 30
	// grainShift is how far (percent of the octaves by which the image
	// outgrows grainRef) the grain moves to coarser cells.
	grainShift = 80
)

// grainRef is the image size (longer side) at which grain has full
// amplitude.
const grainRef = 500

// grainProfile is the grain amplitude (Q12) of an octave at t (Q8) octaves
// above the finest at d = 500: piecewise linear through 0.25, 0.4, 0.35
// at t = 0, 1, 2, falling to zero at t = -1 and 3.
func grainProfile(t int64) int64 {
	pts := [...]int64{0, one * 25 / 100, one * 40 / 100, one * 35 / 100, 0}
	t += 256 // pts[0] is at t = -1
	if t <= 0 || t >= 4<<8 {
		return 0
	}
	i, f := t>>8, t&255
	return pts[i] + (pts[i+1]-pts[i])*f>>8
}

// log2Q8 approximates log2(x) in Q8 for x >= 1, linear between powers of
// two: monotone and continuous, which is all the grain needs.
func log2Q8(x int64) int64 {
	n := int64(bits.Len64(uint64(x))) - 1
	return n<<8 + (x<<8>>n - 256)
}

// randomTexture is a region's texture: some regions are smooth, some busy.
// Patches alternate around base (1/256 levels) with another palette colour;
// floor is the least mid-band weight, in levels.
func randomTexture(r *ops.Rand, detail int64, base [3]int64, floor int64) texture {
	var t texture
	g := func(lo, hi, gain int64) int64 { return ri(r, lo, hi) << 8 * gain >> 10 * detail >> 10 }
	for c := range 3 {
		t.low[c] = ri(r, 0, 25) << 8
	}
	ma := g(floor, 35, midGain)
	mb := int64(0)
	if r.Intn(2) == 0 {
		mb = g(0, 30, midGain)
	}
	for c := range 3 {
		t.midA[c] = ma * ri(r, 85, 115) / 100
		t.midB[c] = mb * ri(r, 85, 115) / 100
	}
	hi := g(1, 6, hiGain)
	for c := range 3 {
		t.hi[c] = hi * ri(r, 100-grainChroma, 100+grainChroma) / 100
	}
	if r.Intn(2) == 0 {
		other := palette[r.Intn(len(palette))]
		frac := ri(r, 30, 100) * patGain >> 10 * detail >> 10 // percent
		for c := range 3 {
			t.pat[c] = (other[c]<<8 - base[c]) * frac / 200
		}
	}
	return t
}

// randomFill sets a shape's colours, gradient over extent e (px), opacity
// and texture.
func (sh *shape) randomFill(r *ops.Rand, e, detail int64) {
	sh.col = jitter(r, palette[r.Intn(len(palette))], 30)
	for c := range 3 {
		sh.dcol[c] = ri(r, -60, 60) << 8
	}
	gx, gy := unitVector(r)
	sh.gx = gx / (2 * max(1, e))
	sh.gy = gy / (2 * max(1, e))
	sh.opacity = 256
	if r.Intn(5) == 0 {
		sh.opacity = ri(r, 100, 220)
	}
	sh.tex = randomTexture(r, detail, sh.col, 0)
}

// unitVector is a random direction as a Q16 unit vector.
func unitVector(r *ops.Rand) (int64, int64) {
	for {
		a, b := ri(r, -1000, 1000), ri(r, -1000, 1000)
		l := isqrt(a*a + b*b)
		if l >= 200 && l <= 1000 {
			return a << 16 / l, b << 16 / l
		}
	}
}

// softness is an edge width in 1/16 px: mostly crisp, sometimes out of
// focus.
func softness(r *ops.Rand, d int64) int64 {
	if r.Intn(6) == 0 {
		return 16 * ri(r, 4, max(5, d/40))
	}
	return ri(r, 12, 40)
}

func (s *scene) clipBox(sh *shape, x0, y0, x1, y1 int64) bool {
	sh.x0 = int(clamp(x0, 0, int64(s.w)))
	sh.x1 = int(clamp(x1, 0, int64(s.w)))
	sh.y0 = int(clamp(y0, 0, int64(s.h)))
	sh.y1 = int(clamp(y1, 0, int64(s.h)))
	return sh.x0 < sh.x1 && sh.y0 < sh.y1
}

func (s *scene) addEllipse(r *ops.Rand, d, rmin, rmax int64, detail int64) {
	w, h := int64(s.w), int64(s.h)
	sh := shape{kind: kindEllipse}
	cx, cy := ri(r, 0, w-1), ri(r, h/5, h-1)
	rx := max(1, ri(r, rmin, max(rmin, rmax)))
	ry := max(1, rx*ri(r, 30, 100)/100)
	sh.cx, sh.cy = cx*16+8, cy*16+8
	sh.ux, sh.uy = unitVector(r)
	sh.kx = (1 << 28) / (rx * 16)
	sh.ky = (1 << 28) / (ry * 16)
	soft := softness(r, d)
	// Near the rim q falls by 2/r per pixel inwards, so (1-q) * r/(2 soft)
	// ramps from 0 to 1 across the soft edge; edge holds that in alpha units.
	sh.edge = ry * 16 * 256 / (2 * soft)
	sh.shade = ri(r, -30, 50) << 8
	sh.randomFill(r, rx, detail)
	m := rx + soft/16 + 1
	if s.clipBox(&sh, cx-m, cy-m, cx+m+1, cy+m+1) {
		s.shapes = append(s.shapes, sh)
	}
}

// addPolygon adds the convex hull of random points, or a long thin bar
// (a branch, a pole, a cable).
func (s *scene) addPolygon(r *ops.Rand, d, detail int64, bar bool) {
	w, h := int64(s.w), int64(s.h)
	sh := shape{kind: kindPolygon}
	var pts [][2]int64
	var ext int64
	if bar {
		cx, cy := ri(r, 0, w-1), ri(r, 0, h-1)
		ux, uy := unitVector(r)
		l := ri(r, d/5, d*8/10)
		t := ri(r, 32, max(48, d*16*3/100))
		lx, ly := ux*l*8>>16, uy*l*8>>16 // half length, 1/16 px
		tx, ty := -uy*t>>17, ux*t>>17    // half thickness
		c := [2]int64{cx*16 + 8, cy*16 + 8}
		pts = [][2]int64{
			{c[0] - lx - tx, c[1] - ly - ty}, {c[0] + lx - tx, c[1] + ly - ty},
			{c[0] + lx + tx, c[1] + ly + ty}, {c[0] - lx + tx, c[1] - ly + ty},
		}
		ext = l / 2
	} else {
		cx, cy := ri(r, 0, w-1), ri(r, h/4, h-1)
		rad := ri(r, d*8/100, d*35/100)
		for range 4 + r.Intn(6) {
			pts = append(pts, [2]int64{
				(cx+ri(r, -rad, rad))*16 + 8,
				(cy+ri(r, -rad, rad))*16 + 8,
			})
		}
		pts = convexHull(pts)
		if len(pts) < 3 {
			return
		}
		ext = rad
	}
	var minX, minY, maxX, maxY int64 = 1 << 40, 1 << 40, -1 << 40, -1 << 40
	var sx, sy int64
	for _, p := range pts {
		minX, maxX = min(minX, p[0]), max(maxX, p[0])
		minY, maxY = min(minY, p[1]), max(maxY, p[1])
		sx += p[0]
		sy += p[1]
	}
	sh.cx, sh.cy = sx/int64(len(pts)), sy/int64(len(pts))
	// Counter-clockwise hull (in y-down coordinates, clockwise on screen):
	// the inward normal of edge a->b is (-(b-a).y, (b-a).x) normalised.
	for i, a := range pts {
		b := pts[(i+1)%len(pts)]
		ex, ey := b[0]-a[0], b[1]-a[1]
		l := isqrt(ex*ex + ey*ey)
		if l == 0 {
			continue
		}
		sh.planes = append(sh.planes, halfPlane{ax: a[0], ay: a[1], nx: -ey << 16 / l, ny: ex << 16 / l})
	}
	soft := softness(r, d)
	sh.softInv = (1 << 24) / soft
	sh.randomFill(r, ext, detail)
	m := soft/16 + 1
	if s.clipBox(&sh, minX/16-m, minY/16-m, maxX/16+m+1, maxY/16+m+1) {
		s.shapes = append(s.shapes, sh)
	}
}

// convexHull is Andrew's monotone chain; the result is counter-clockwise in
// a y-up frame, which the half-plane normals above assume.
func convexHull(p [][2]int64) [][2]int64 {
	// Insertion sort: a handful of points.
	for i := 1; i < len(p); i++ {
		for j := i; j > 0 && (p[j][0] < p[j-1][0] || p[j][0] == p[j-1][0] && p[j][1] < p[j-1][1]); j-- {
			p[j], p[j-1] = p[j-1], p[j]
		}
	}
	cross := func(o, a, b [2]int64) int64 {
		return (a[0]-o[0])*(b[1]-o[1]) - (a[1]-o[1])*(b[0]-o[0])
	}
	var hull [][2]int64
	for _, q := range p {
		for len(hull) >= 2 && cross(hull[len(hull)-2], hull[len(hull)-1], q) <= 0 {
			hull = hull[:len(hull)-1]
		}
		hull = append(hull, q)
	}
	lower := len(hull) + 1
	for i := len(p) - 2; i >= 0; i-- {
		for len(hull) >= lower && cross(hull[len(hull)-2], hull[len(hull)-1], p[i]) <= 0 {
			hull = hull[:len(hull)-1]
		}
		hull = append(hull, p[i])
	}
	return hull[:len(hull)-1]
}

func (s *scene) render(img *ops.Image) {
	w := s.w
	for y := range s.h {
		s.f.eval(y)
		s.background(y)
		for i := range s.shapes {
			sh := &s.shapes[i]
			if y >= sh.y0 && y < sh.y1 {
				s.paint(sh, y)
			}
		}
		out := img.Pix[y*w*3 : (y+1)*w*3]
		for i, v := range s.rowBuf {
			out[i] = uint8(clamp((v+128)>>8, 0, 255))
		}
	}
}

func (s *scene) background(y int) {
	h := int64(max(1, s.h-1))
	yy := int64(y)
	h0 := max(1, s.horizon0)
	var sky, gnd [3]int64
	for c := range 3 {
		t := clamp(yy<<16/h0, 0, 1<<16)
		sky[c] = s.skyTop[c] + (s.skyBot[c]-s.skyTop[c])*t>>16
		t = clamp((yy-h0)<<16/max(1, h-h0), 0, 1<<16)
		gnd[c] = s.gndTop[c] + (s.gndBot[c]-s.gndTop[c])*t>>16
	}
	y16 := yy*16 + 8
	f := &s.f
	buf := s.rowBuf
	for x := range s.w {
		a := clamp(((y16-s.horizon[x])*s.horizonInv>>16)+128, 0, 256)
		x64 := int64(x)
		for c := range 3 {
			sv := sky[c] + x64*s.skyTilt[c]>>16 + s.sky.at(f, x, c)
			gv := gnd[c] + x64*s.gndTilt[c]>>16 + s.gnd.at(f, x, c)
			buf[x*3+c] = sv + (gv-sv)*a>>8
		}
	}
}

func (s *scene) paint(sh *shape, y int) {
	f := &s.f
	buf := s.rowBuf
	py := int64(y)*16 + 8 - sh.cy
	for x := sh.x0; x < sh.x1; x++ {
		px := int64(x)*16 + 8 - sh.cx
		var alpha, light int64
		if sh.kind == kindEllipse {
			u := (px*sh.ux + py*sh.uy) >> 16
			v := (py*sh.ux - px*sh.uy) >> 16
			un := u * sh.kx >> 16
			vn := v * sh.ky >> 16
			in := 1<<24 - (un*un + vn*vn)
			if in <= -(1 << 24) {
				continue
			}
			alpha = (in*sh.edge)>>24 + 128
			light = max(0, in) * sh.shade >> 24
		} else {
			dist := int64(1) << 40
			for _, p := range sh.planes {
				dist = min(dist, ((px+sh.cx-p.ax)*p.nx+(py+sh.cy-p.ay)*p.ny)>>16)
			}
			alpha = (dist*sh.softInv)>>16 + 128
		}
		if alpha <= 0 {
			continue
		}
		alpha = min(alpha, 256) * sh.opacity >> 8
		t := clamp(32768+(px*sh.gx+py*sh.gy)>>4, 0, 1<<16)
		for c := range 3 {
			v := sh.col[c] + sh.dcol[c]*t>>16 + light + sh.tex.at(f, x, c)
			o := buf[x*3+c]
			buf[x*3+c] = o + (v-o)*alpha>>8
		}
	}
}
