package render

import "encoding/binary"

// headMotion is the small global motion of one frame, as an output ->
// source map: row y of the output shows source row srcY(y), shifted
// sideways by dx(y). A sideways shift growing with height reads as the head
// tilting; for the quarter-degree angles used the vertical part of a real
// rotation is under a tenth of a pixel, so it is left out. What remains is
// constant along each row, which makes the resampling a cheap blend of two
// source rows with fixed weights.
type headMotion struct {
	// srcY(y) = scaleY*y + offY
	scaleY, offY float64
	// dx(y) = shiftX + tilt*y
	shiftX, tilt float64
}

func (m headMotion) srcY(y float64) float64 { return m.scaleY*y + m.offY }
func (m headMotion) dx(y float64) float64   { return m.shiftX + m.tilt*y }

// half rescales the map for a plane subsampled by 2, whose pixel centres sit
// at luma (2x+0.5, 2y+0.5).
func (m headMotion) half() headMotion {
	// srcY_c = (srcY_l(2y+0.5) - 0.5)/2; dx_c = dx_l(2y+0.5)/2
	return headMotion{
		scaleY: m.scaleY,
		offY:   (m.scaleY*0.5 + m.offY - 0.5) / 2,
		shiftX: (m.shiftX + m.tilt*0.5) / 2,
		tilt:   m.tilt,
	}
}

// warpRows resamples src into dst through m: bilinear, with weights in 1/256
// that are constant along a row; samples outside repeat the edge. scratch
// is a row buffer the caller keeps, so a frame allocates nothing.
func warpRows(dst, src plane, m headMotion, scratch *[]byte) {
	w := src.w
	if cap(*scratch) < w+1 {
		*scratch = make([]byte, w+1)
	}
	tmp := (*scratch)[:w+1]
	for y := 0; y < dst.h; y++ {
		sy := m.srcY(float64(y))
		sy = max(0, min(sy, float64(src.h-1)))
		y0 := int(sy)
		y1 := min(y0+1, src.h-1)
		wy := int32((sy - float64(y0)) * 256)
		r0 := src.pix[y0*w : y0*w+w]
		r1 := src.pix[y1*w : y1*w+w]

		sx := m.dx(float64(y))
		ix := int(sx)
		if sx < 0 {
			ix-- // floor
		}
		wx := int32((sx - float64(ix)) * 256)
		out := dst.pix[y*dst.w : y*dst.w+dst.w]
		// Output columns whose two source columns are both inside.
		lo := max(0, -ix)
		hi := min(dst.w, w-1-ix)
		if lo > hi {
			lo, hi = 0, 0
		}
		for x := 0; x < lo; x++ {
			out[x] = blend(r0, r1, clampIndex(x+ix, w), clampIndex(x+ix+1, w), wx, wy)
		}
		// The hot part, in two passes: blend the two source rows, then
		// neighbouring columns of that blend, eight pixels at a time.
		if hi > lo {
			n := hi - lo
			lerpBytes(tmp[:n+1], r0[lo+ix:hi+ix+1], r1[lo+ix:hi+ix+1], uint64(wy))
			lerpBytes(out[lo:hi], tmp[:n], tmp[1:n+1], uint64(wx))
		}
		for x := max(hi, lo); x < dst.w; x++ {
			out[x] = blend(r0, r1, clampIndex(x+ix, w), clampIndex(x+ix+1, w), wx, wy)
		}
	}
}

func clampIndex(i, n int) int { return max(0, min(i, n-1)) }

func blend(r0, r1 []byte, i, j int, wx, wy int32) byte {
	t := int32(r0[i])<<8 + wx*(int32(r0[j])-int32(r0[i]))
	b := int32(r1[i])<<8 + wx*(int32(r1[j])-int32(r1[i]))
	return byte((t<<8 + wy*(b-t) + 1<<15) >> 16)
}

// lerpBytes sets dst[i] = (a[i]*(256-t) + b[i]*t + 128) / 256 for t in
// [0, 256). It works on eight bytes per step as four 16-bit lanes of even
// and four of odd bytes in a uint64: each lane's sum stays below 65536, so
// no lane carries into the next.
func lerpBytes(dst, a, b []byte, t uint64) {
	const mask = 0x00ff00ff00ff00ff
	const round = 0x0080008000800080
	s := 256 - t
	n := len(dst)
	a, b = a[:n], b[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		x := binary.LittleEndian.Uint64(a[i:])
		y := binary.LittleEndian.Uint64(b[i:])
		even := ((x&mask)*s + (y&mask)*t + round) >> 8 & mask
		odd := ((x>>8&mask)*s + (y>>8&mask)*t + round) >> 8 & mask
		binary.LittleEndian.PutUint64(dst[i:], even|odd<<8)
	}
	for ; i < n; i++ {
		dst[i] = byte((uint64(a[i])*s + uint64(b[i])*t + 128) >> 8)
	}
}
