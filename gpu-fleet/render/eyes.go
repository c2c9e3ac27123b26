package render

import (
	"image"
	"math"
)

// eyeRig closes one eye by sliding the upper eyelid down: the skin between
// the brow and the lid is stretched over the eye, with a lash line at its
// edge. The eye itself is not redrawn, only covered.
type eyeRig struct {
	region     rect
	x, y       float32 // pupil
	halfW      float32 // half the eye's width
	openH      float32 // how far the upper lid sits above the pupil
	lowerH     float32 // how far the lower lid sits below it
	stretchTop float32 // rows above this do not move
}

func newEyeRig(pupil image.Point, eyeDist float32, w, h int) *eyeRig {
	e := &eyeRig{
		x:     float32(pupil.X),
		y:     float32(pupil.Y),
		halfW: 0.27 * eyeDist,
		openH: 0.11 * eyeDist,
	}
	e.lowerH = 0.09 * eyeDist
	e.stretchTop = e.y - 0.30*eyeDist
	e.region = rect{
		x0: int(e.x - e.halfW - 1), x1: int(e.x+e.halfW) + 2,
		y0: int(e.stretchTop) - 1, y1: int(e.y+e.lowerH) + 3,
	}.clip(w, h)
	return e
}

// profile is the eye opening's shape across the eye: 1 at the pupil, 0 at
// the corners.
func (e *eyeRig) profile(x float32) float32 {
	u := (x - e.x) / e.halfW
	t := 1 - u*u
	if t <= 0 {
		return 0
	}
	return float32(math.Sqrt(float64(t)))
}

// sampler returns the per-pixel mapping for an eye closed by amount (0..1).
func (e *eyeRig) sampler(closed float32) func(x, y float32, s *warpSample) {
	return func(x, y float32, s *warpSample) {
		s.sx, s.sy = x, y
		p := e.profile(x)
		if p == 0 {
			return
		}
		lid := e.y - e.openH*p              // upper lid at rest
		low := e.y + e.lowerH*p             // lower lid
		edge := lid + closed*(low-lid)*1.05 // lid edge now, slightly past the lower lid when shut
		if y > edge+1 || y < e.stretchTop {
			return
		}
		// Stretch [stretchTop, lid] of the source over [stretchTop, edge].
		span := max(edge-e.stretchTop, 1)
		t := (y - e.stretchTop) / span
		s.sy = e.stretchTop + t*(lid-e.stretchTop)
		if y > edge {
			// Blend the last row into the eye below it.
			s.sy = y
		}
		// Lashes: a soft dark line along the lid edge, stronger when shut.
		if d := edge - y; d > -1 && d < 2.5 {
			s.alpha = (1 - abs32(d-0.7)/1.8) * 0.8 * closed * p
			if s.alpha < 0 {
				s.alpha = 0
			}
			s.paint = [3]float32{45, 128, 130}
		}
	}
}
