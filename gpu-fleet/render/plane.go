package render

// plane is one 8-bit image plane.
type plane struct {
	pix  []byte
	w, h int // stride is w
}

func planesOf(f *Frame) [3]plane {
	return [3]plane{
		{pix: f.Y, w: f.Width, h: f.Height},
		{pix: f.U, w: f.Width / 2, h: f.Height / 2},
		{pix: f.V, w: f.Width / 2, h: f.Height / 2},
	}
}

// bilinear samples p at (x, y) in its own pixel coordinates (pixel centres
// at integers), clamping at the edges.
func (p plane) bilinear(x, y float32) float32 {
	return float32(p.fixed(int32(x*256), int32(y*256))) * (1.0 / 65536)
}

// fixed samples p at (x/256, y/256) and returns the value times 65536.
func (p plane) fixed(x, y int32) int32 {
	x = max(0, min(x, int32(p.w-1)*256-1))
	y = max(0, min(y, int32(p.h-1)*256-1))
	fx, fy := x&255, y&255
	i := int(y>>8)*p.w + int(x>>8)
	q := p.pix[i : i+p.w+2]
	a := int32(q[0])<<8 + fx*(int32(q[1])-int32(q[0]))
	b := int32(q[p.w])<<8 + fx*(int32(q[p.w+1])-int32(q[p.w]))
	return a<<8 + fy*(b-a)
}

func clampF(v, lo, hi float32) float32 {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

func smoothstep(t float32) float32 {
	if t <= 0 {
		return 0
	}
	if t >= 1 {
		return 1
	}
	return t * t * (3 - 2*t)
}

func toByte(v float32) byte {
	if v <= 0 {
		return 0
	}
	if v >= 255 {
		return 255
	}
	return byte(v + 0.5)
}

// rect is a region of a plane, [x0, x1) x [y0, y1).
type rect struct{ x0, y0, x1, y1 int }

func (r rect) clip(w, h int) rect {
	return rect{max(r.x0, 0), max(r.y0, 0), min(r.x1, w), min(r.y1, h)}
}

// half returns the chroma-plane region covering a luma region.
func (r rect) half() rect { return rect{r.x0 / 2, r.y0 / 2, (r.x1 + 1) / 2, (r.y1 + 1) / 2} }

// copyRect copies a region between planes of the same size.
func copyRect(dst, src plane, r rect) {
	for y := r.y0; y < r.y1; y++ {
		copy(dst.pix[y*dst.w+r.x0:y*dst.w+r.x1], src.pix[y*src.w+r.x0:y*src.w+r.x1])
	}
}

// warpSample says where an output pixel takes its colour from: the source
// point (luma coordinates), blended with a painted colour by alpha.
type warpSample struct {
	sx, sy float32
	alpha  float32    // 0: the source only, 1: the painted colour only
	paint  [3]float32 // Y, U, V
}

// warpRegion redraws region r (luma coordinates) of all three planes of dst
// from src, asking at for each output pixel where to sample.
func warpRegion(dst, src [3]plane, r rect, at func(x, y float32, s *warpSample)) {
	var s warpSample
	for y := r.y0; y < r.y1; y++ {
		row := dst[0].pix[y*dst[0].w:]
		for x := r.x0; x < r.x1; x++ {
			s.alpha = 0
			at(float32(x), float32(y), &s)
			v := src[0].bilinear(s.sx, s.sy)
			if s.alpha > 0 {
				v += s.alpha * (s.paint[0] - v)
			}
			row[x] = toByte(v)
		}
	}
	c := r.half()
	for cy := c.y0; cy < c.y1; cy++ {
		for cx := c.x0; cx < c.x1; cx++ {
			s.alpha = 0
			// A chroma pixel's centre in luma coordinates.
			at(float32(2*cx)+0.5, float32(2*cy)+0.5, &s)
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
