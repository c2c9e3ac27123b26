package render

import (
	"image"
	"math"

	"avatarsvc/shared/avatarimage"
)

// mouthRig holds what is fixed per avatar about the mouth and jaw: the lip
// line, the region the warp touches, and the cavity colours.
//
// The model: the lips part along the lip line in a lens shape (zero at the
// corners). Below the line, the lower lip and the whole chin move down with
// the jaw, fading out below the chin; above it the upper lip lifts a little,
// fading out at the nose. Lip rounding pulls the corners in, spreading
// pushes them out. Between the parted lips the mouth cavity is painted.
type mouthRig struct {
	region rect // luma coordinates

	cx, halfW           float32 // mouth centre x and half width
	lineA, lineB, lineC float32 // lip line y = a*(x-cx)^2 + b*(x-cx) + c
	noseY               float32
	chinY               float32
	eyeDist             float32
	maxOpen             float32 // lip parting at full openness, pixels
	upperShare          float32 // how much of the parting the upper lip takes
	jawWidth            float32 // horizontal extent of the chin's motion
	chinFade            float32 // distance below the chin over which the jaw motion fades
	lipBlend            float32 // distance below the lip line over which lens shape turns into jaw shape

	photoTeeth bool // the photo shows teeth, which part with the lips by themselves
	cavity     [3]float32
	throat     [3]float32
	innerLip   [3]float32
	teeth      [3]float32
	tongue     [3]float32

	grid gridMap // per-frame scratch
}

// gridStep is the spacing, in pixels, at which the smooth parts of the
// mouth warp are evaluated exactly; pixels in between interpolate.
const gridStep = 6

func newMouthRig(av *avatarimage.Prepared, base *Frame) *mouthRig {
	p := func(pt image.Point) (float32, float32) { return float32(pt.X), float32(pt.Y) }
	lx, ly := p(av.MouthLeft)
	rx, ry := p(av.MouthRight)
	mx, my := p(av.MouthCenter)
	_, noseY := p(av.Nose)
	le, re := av.LeftEye, av.RightEye
	eyeDist := float32(math.Hypot(float64(re.X-le.X), float64(re.Y-le.Y)))

	m := &mouthRig{
		cx:      (lx + rx) / 2,
		halfW:   max((rx-lx)/2, 0.2*eyeDist),
		eyeDist: eyeDist,
	}
	// The lips part at the crease of closed lips, the darkest row near the
	// landmark; in a smile that shows teeth, below the upper teeth, so the
	// teeth stay with the upper jaw and the opening shows beneath them.
	m.photoTeeth = showsTeeth(base, int(mx), my, float32(av.LowerLip.Y))
	if m.photoTeeth {
		my = teethBottom(base, int(mx), (my+float32(av.LowerLip.Y))/2, float32(av.LowerLip.Y))
	} else {
		my = darkestRow(base, int(mx), my-0.05*eyeDist, my+0.2*eyeDist)
	}
	m.noseY = min(noseY, my-0.15*eyeDist)
	// Parabola through the corners and the middle of the lip line.
	m.lineA, m.lineB, m.lineC = fitParabola(lx-m.cx, ly, mx-m.cx, my, rx-m.cx, ry)
	lowerLip := float32(av.LowerLip.Y)
	// The chin sits about 0.8 eye distances below the lips on most faces;
	// never less than just under the lower lip.
	m.chinY = max(my+0.8*eyeDist, lowerLip+0.3*eyeDist)
	m.maxOpen = 0.27 * eyeDist
	m.upperShare = 0.25
	m.jawWidth = 0.75 * eyeDist
	m.chinFade = 0.8 * eyeDist
	m.lipBlend = 0.45 * eyeDist

	m.region = rect{
		x0: int(m.cx - 1.2*eyeDist), x1: int(m.cx+1.2*eyeDist) + 1,
		y0: int(m.noseY) - 1, y1: int(m.chinY+m.chinFade+m.maxOpen) + 2,
	}.clip(base.Width, base.Height)
	m.grid = newGridMap(m.region)

	yuv := func(r, g, b uint8) [3]float32 {
		y, u, v := rgbToYUV(r, g, b)
		return [3]float32{float32(y), float32(u), float32(v)}
	}
	m.cavity = yuv(70, 24, 28)
	m.throat = yuv(26, 8, 10)
	m.innerLip = yuv(120, 52, 56)
	m.teeth = yuv(226, 220, 208)
	m.tongue = yuv(165, 74, 80)
	return m
}

// darkestRow returns the row between y0 and y1 where luma around column x
// is lowest.
func darkestRow(f *Frame, x int, y0, y1 float32) float32 {
	best, bestY := math.MaxInt, (y0+y1)/2
	for y := int(y0); y <= int(y1); y++ {
		if y < 1 || y >= f.Height-1 || x < 2 || x >= f.Width-2 {
			continue
		}
		sum := 0
		for dy := -1; dy <= 1; dy++ {
			for dx := -2; dx <= 2; dx++ {
				sum += int(f.Y[(y+dy)*f.Width+x+dx])
			}
		}
		if sum < best {
			best, bestY = sum, float32(y)
		}
	}
	return bestY
}

// rowLuma averages luma over five pixels of row y around column x.
func rowLuma(f *Frame, x, y int) int {
	y = max(0, min(y, f.Height-1))
	sum := 0
	for dx := -2; dx <= 2; dx++ {
		sum += int(f.Y[y*f.Width+max(0, min(x+dx, f.Width-1))])
	}
	return sum / 5
}

// showsTeeth reports whether bright, unsaturated pixels (teeth rather than
// lips or skin) lie in the middle of the mouth between the lip line and the
// bottom of the lower lip.
func showsTeeth(f *Frame, x int, y0, y1 float32) bool {
	rows := 0
	for y := int(y0); y <= int(y1); y++ {
		if y < 0 || y >= f.Height {
			continue
		}
		v := f.V[(y/2)*(f.Width/2)+max(0, min(x, f.Width-1))/2]
		if rowLuma(f, x, y) > 190 && v < 141 {
			rows++
		}
	}
	return rows >= 3
}

// teethBottom returns the row between y0 and y1 where luma falls most
// steeply going down: the lower edge of the upper teeth.
func teethBottom(f *Frame, x int, y0, y1 float32) float32 {
	best, bestY := math.MinInt, (y0+y1)/2
	for y := int(y0); y <= int(y1); y++ {
		if d := rowLuma(f, x, y-1) - rowLuma(f, x, y+1); d > best {
			best, bestY = d, float32(y)
		}
	}
	return bestY
}

func fitParabola(x0, y0, x1, y1, x2, y2 float32) (a, b, c float32) {
	// Lagrange form, expanded. Falls back to a straight line when the
	// points are too close together horizontally.
	d0 := (x0 - x1) * (x0 - x2)
	d1 := (x1 - x0) * (x1 - x2)
	d2 := (x2 - x0) * (x2 - x1)
	if abs32(d0) < 1e-3 || abs32(d1) < 1e-3 || abs32(d2) < 1e-3 {
		return 0, (y2 - y0) / max(x2-x0, 1), (y0 + y2) / 2
	}
	a = y0/d0 + y1/d1 + y2/d2
	b = -(y0*(x1+x2)/d0 + y1*(x0+x2)/d1 + y2*(x0+x1)/d2)
	c = y0*x1*x2/d0 + y1*x0*x2/d1 + y2*x0*x1/d2
	return a, b, c
}

func abs32(v float32) float32 {
	if v < 0 {
		return -v
	}
	return v
}

func (m *mouthRig) lineY(x float32) float32 {
	d := x - m.cx
	return (m.lineA*d+m.lineB)*d + m.lineC
}

// lens is the parting profile across the mouth: 1 in the middle, 0 at and
// beyond the corners.
func (m *mouthRig) lens(x float32) float32 {
	u := (x - m.cx) / m.halfW
	t := 1 - u*u
	if t <= 0 {
		return 0
	}
	// A little fuller than an ellipse, like parted lips.
	return float32(math.Pow(float64(t), 0.6))
}

// jaw is the chin's horizontal motion profile.
func (m *mouthRig) jaw(x float32) float32 {
	u := (x - m.cx) / m.jawWidth
	return float32(math.Exp(float64(-u * u * 1.6)))
}

// mouthPose is the per-frame mouth shape.
type mouthPose struct {
	open   float32 // 0..1
	spread float32 // -1 (rounded) .. 1 (spread)
}

func (p mouthPose) still() bool { return p.open < 0.004 && abs32(p.spread) < 0.01 }

// mouthWarp is a rig at one pose.
type mouthWarp struct {
	*mouthRig
	lower, upper float32 // lip travel at the middle, pixels
	spreadScale  float32 // horizontal scale of the corners, fraction
}

func (m *mouthRig) at(p mouthPose) mouthWarp {
	part := p.open * m.maxOpen
	return mouthWarp{
		mouthRig:    m,
		lower:       part * (1 - m.upperShare),
		upper:       part * m.upperShare,
		spreadScale: 0.12 * p.spread,
	}
}

// lowerShift is how far the point (x, y) below the lip line moves down.
func (w *mouthWarp) lowerShift(x, y, lens, jaw float32) float32 {
	dy := y - w.lineY(x)
	t := smoothstep(dy / w.lipBlend)
	profile := lens + t*(jaw-lens)
	fade := 1 - smoothstep((y-w.chinY)/w.chinFade)
	return w.lower * profile * fade
}

// upperShift is how far the point (x, y) above the lip line moves up.
func (w *mouthWarp) upperShift(x, y, lens float32) float32 {
	line := w.lineY(x)
	t := smoothstep((line - y) / max(line-w.noseY, 1))
	return w.upper * lens * (1 - t)
}

// unspread undoes the horizontal rounding/spreading around the mouth centre.
func (w *mouthWarp) unspread(x, y float32) float32 {
	if w.spreadScale == 0 {
		return x
	}
	du := (x - w.cx) / (1.4 * w.halfW)
	dv := (y - w.lineY(x)) / (0.5 * w.eyeDist)
	g := float32(math.Exp(float64(-(du*du + dv*dv))))
	return w.cx + (x-w.cx)/(1+w.spreadScale*g)
}

// invertLower finds the source row that lowerShift moves to y.
func (w *mouthWarp) invertLower(x, y, lens float32) float32 {
	jaw := w.jaw(x)
	src := y - w.lower*lens
	for i := 0; i < 4; i++ {
		src = y - w.lowerShift(x, src, lens, jaw)
	}
	return src
}

func (w *mouthWarp) invertUpper(x, y, lens float32) float32 {
	src := y + w.upper*lens
	for i := 0; i < 3; i++ {
		src = y + w.upperShift(x, src, lens)
	}
	return src
}

// gridMap holds the warp's smooth parts sampled every gridStep pixels:
// the source column, and the source row as seen from above the lip line
// (upper lip) and from below it (lower lip and jaw). Both row maps are
// smooth everywhere; the lip line decides which applies.
type gridMap struct {
	r          rect
	cols, rows int
	sx, up, lo []float32
	// per output column of r: the opening's top and bottom edges
	top, bottom []float32
	// the maps blended to the current row
	rowSx, rowUp, rowLo []float32
}

func newGridMap(r rect) gridMap {
	cols := (r.x1-r.x0+gridStep-1)/gridStep + 1
	rows := (r.y1-r.y0+gridStep-1)/gridStep + 1
	return gridMap{
		r: r, cols: cols, rows: rows,
		sx: make([]float32, cols*rows), up: make([]float32, cols*rows), lo: make([]float32, cols*rows),
		top: make([]float32, r.x1-r.x0), bottom: make([]float32, r.x1-r.x0),
		rowSx: make([]float32, cols), rowUp: make([]float32, cols), rowLo: make([]float32, cols),
	}
}

// prepare evaluates the warp exactly at the grid points and the opening's
// edges per column.
func (w *mouthWarp) prepare() *gridMap {
	g := &w.grid
	for j := 0; j < g.rows; j++ {
		y := float32(g.r.y0 + j*gridStep)
		for i := 0; i < g.cols; i++ {
			x := float32(g.r.x0 + i*gridStep)
			sx := w.unspread(x, y)
			lens := w.lens(sx)
			k := j*g.cols + i
			g.sx[k] = sx
			g.up[k] = w.invertUpper(sx, y, lens)
			g.lo[k] = w.invertLower(sx, y, lens)
		}
	}
	for i := range g.top {
		x := float32(g.r.x0 + i)
		sx := w.unspread(x, w.lineY(x))
		lens := w.lens(sx)
		line := w.lineY(sx)
		g.top[i] = line - w.upper*lens
		g.bottom[i] = line + w.lower*lens
	}
	return g
}

// blendRow interpolates the grid vertically at output row y (luma
// coordinates) into one row per map, so that pixels need only a 1-D blend.
func (g *gridMap) blendRow(y float32) {
	fy := clampF((y-float32(g.r.y0))/gridStep, 0, float32(g.rows-1)-0.001)
	j := int(fy)
	ay := fy - float32(j)
	k0, k1 := j*g.cols, (j+1)*g.cols
	for i := 0; i < g.cols; i++ {
		g.rowSx[i] = g.sx[k0+i] + ay*(g.sx[k1+i]-g.sx[k0+i])
		g.rowUp[i] = g.up[k0+i] + ay*(g.up[k1+i]-g.up[k0+i])
		g.rowLo[i] = g.lo[k0+i] + ay*(g.lo[k1+i]-g.lo[k0+i])
	}
}

// draw redraws the mouth region of dst from src at this pose.
func (w *mouthWarp) draw(dst, src [3]plane) {
	g := w.prepare()
	// Rows clear of the opening take one smooth map throughout.
	openTop, openBottom := float32(math.MaxFloat32), float32(-math.MaxFloat32)
	for i := range g.top {
		if g.bottom[i]-g.top[i] > 0.01 {
			openTop = min(openTop, g.top[i])
			openBottom = max(openBottom, g.bottom[i])
		}
	}
	if openTop > openBottom {
		line := w.lineY(w.cx)
		openTop, openBottom = line, line
	}
	var s warpSample
	r := g.r
	for y := r.y0; y < r.y1; y++ {
		fy := float32(y)
		g.blendRow(fy)
		row := dst[0].pix[y*dst[0].w:]
		switch {
		case fy >= openBottom+1:
			g.spanRow(row, src[0], g.rowLo, 0, 1)
		case fy <= openTop-1:
			g.spanRow(row, src[0], g.rowUp, 0, 1)
		default:
			for x := r.x0; x < r.x1; x++ {
				w.sample(g, float32(x), fy, &s)
				v := src[0].bilinear(s.sx, s.sy)
				if s.alpha > 0 {
					v += s.alpha * (s.paint[0] - v)
				}
				row[x] = toByte(v)
			}
		}
	}
	c := r.half().clip(dst[1].w, dst[1].h)
	for cy := c.y0; cy < c.y1; cy++ {
		ly := float32(2*cy) + 0.5
		g.blendRow(ly)
		switch {
		case ly >= openBottom+1.5:
			for i := 1; i < 3; i++ {
				g.spanRow(dst[i].pix[cy*dst[i].w:], src[i], g.rowLo, 0.5, 2)
			}
		case ly <= openTop-1.5:
			for i := 1; i < 3; i++ {
				g.spanRow(dst[i].pix[cy*dst[i].w:], src[i], g.rowUp, 0.5, 2)
			}
		default:
			for cx := c.x0; cx < c.x1; cx++ {
				w.sample(g, float32(2*cx)+0.5, ly, &s)
				sx, sy := (s.sx-0.5)/2, (s.sy-0.5)/2
				for i := 1; i < 3; i++ {
					v := src[i].bilinear(sx, sy)
					if s.alpha > 0 {
						v += s.alpha * (s.paint[i] - v)
					}
					dst[i].pix[cy*dst[i].w+cx] = toByte(v)
				}
			}
		}
	}
}

// spanRow fills one row of the region from the blended row maps (source
// column rowSx and source row rows), for a plane whose pixel x has its
// centre at luma x*sub+off. Between grid points the source moves linearly,
// so it steps in fixed point.
func (g *gridMap) spanRow(out []byte, src plane, rows []float32, off float32, sub int) {
	x0, x1 := g.r.x0, g.r.x1
	if sub == 2 {
		x0, x1 = x0/2, min((x1+1)/2, src.w)
	}
	scale := 256 / float32(sub)
	for x := x0; x < x1; {
		lx := float32(x*sub) + off // luma coordinate of this pixel
		fx := clampF((lx-float32(g.r.x0))/gridStep, 0, float32(g.cols-1)-0.001)
		i := int(fx)
		ax := fx - float32(i)
		// Pixels until the next grid point.
		nextLuma := float32(g.r.x0 + (i+1)*gridStep)
		end := min(x1, int((nextLuma-off)/float32(sub))+1)
		if end <= x {
			end = x + 1
		}
		sxA := g.rowSx[i] + ax*(g.rowSx[i+1]-g.rowSx[i])
		syA := rows[i] + ax*(rows[i+1]-rows[i])
		// Per-pixel step along this grid cell.
		step := float32(sub) / gridStep
		dsx := (g.rowSx[i+1] - g.rowSx[i]) * step
		dsy := (rows[i+1] - rows[i]) * step
		// To this plane's coordinates, in 1/256 pixel.
		xf := int32(((sxA - off) / float32(sub)) * 256)
		yf := int32(((syA - off) / float32(sub)) * 256)
		dxf := int32(dsx * scale)
		dyf := int32(dsy * scale)
		for ; x < end; x++ {
			out[x] = byte((src.fixed(xf, yf) + 1<<15) >> 16)
			xf += dxf
			yf += dyf
		}
	}
}

// sample maps one output pixel of the mouth region, on the row last
// passed to blendRow.
func (w *mouthWarp) sample(g *gridMap, x, y float32, s *warpSample) {
	s.alpha = 0
	fx := clampF((x-float32(g.r.x0))/gridStep, 0, float32(g.cols-1)-0.001)
	i := int(fx)
	ax := fx - float32(i)
	sx := g.rowSx[i] + ax*(g.rowSx[i+1]-g.rowSx[i])
	e := max(0, min(int(x+0.5)-g.r.x0, len(g.top)-1))
	top, bottom := g.top[e], g.bottom[e]
	s.sx = sx
	lower := func() float32 { return g.rowLo[i] + ax*(g.rowLo[i+1]-g.rowLo[i]) }
	upper := func() float32 { return g.rowUp[i] + ax*(g.rowUp[i+1]-g.rowUp[i]) }
	switch {
	case y >= bottom+1:
		s.sy = lower()
	case y <= top-1:
		s.sy = upper()
	default:
		// At or inside the opening: the lip nearer this pixel, then the
		// cavity painted over it with anti-aliased edges.
		if y-top < bottom-y {
			s.sy = upper()
		} else {
			s.sy = lower()
		}
		gap := bottom - top
		if gap < 0.3 {
			return
		}
		edge := min(y-top, bottom-y) + 0.5
		s.alpha = clampF(edge, 0, 1) * clampF(gap/1.5, 0, 1)
		w.paintCavity(sx, y, top, gap, s)
	}
}

// paintCavity colours the inside of the open mouth: a dark throat, the
// inner lips' shadowed rims, a tongue resting low, and upper teeth when the
// photo has none of its own.
func (w *mouthWarp) paintCavity(x, y, top, gap float32, s *warpSample) {
	u := (x - w.cx) / w.halfW
	d := y - top // depth below the upper lip, pixels
	v := d / gap // 0 at the upper lip, 1 at the lower
	uu := min(u*u, 1)
	// The throat is darkest in the middle; towards the corners the cheeks
	// catch a little light.
	c := mix3(w.throat, w.cavity, clampF(uu*1.3+0.15, 0, 1))

	// Tongue: a broad, low ellipse resting on the lower teeth, shown once
	// the mouth is open enough, darker at its back.
	if gap > 3 {
		tu := u / 0.7
		tv := (v - 1.1) / 0.55
		e := tu*tu + tv*tv
		if e < 1 {
			a := clampF((1-e)*3, 0, 1) * clampF((gap-3)/8, 0, 1)
			t := mix3(w.tongue, w.throat, clampF((1-v)*1.2, 0, 0.6))
			c = mix3(c, t, a*0.9)
		}
	}
	if !w.photoTeeth {
		teethH := min(0.4*gap, 0.08*w.eyeDist)
		if d < teethH && abs32(u) < 0.8 {
			// Shaded towards the sides and the biting edge.
			shade := 1 - 0.5*uu/0.64 - 0.2*d/max(teethH, 1)
			a := clampF((teethH-d)*1.2, 0, 1) * clampF((0.8-abs32(u))*10, 0, 1)
			t := w.teeth
			t[0] *= shade
			c = mix3(c, t, a)
		}
	}
	// Inner lips: a soft, shadowed rim along both edges.
	rim := max(clampF(1.5-d, 0, 1), clampF(1.5-(gap-d), 0, 1))
	c = mix3(c, w.innerLip, rim*0.5)
	s.paint = c
}

func mix3(a, b [3]float32, t float32) [3]float32 {
	return [3]float32{a[0] + t*(b[0]-a[0]), a[1] + t*(b[1]-a[1]), a[2] + t*(b[2]-a[2])}
}
