// Package render draws the avatar's video frames. A Renderer turns 40 ms of
// speech into one I420 frame; the CPU backend here animates a still photo,
// and a GPU model backend can take its place behind the same interface.
package render

import (
	"fmt"
	"image"
)

// Frame is one I420 picture: a full-size luma plane with stride Width and two
// quarter-size chroma planes with stride Width/2. Colours are BT.601 limited
// range, which is what VP8 decoders in browsers assume.
type Frame struct {
	Width, Height int
	Y, U, V       []byte
}

// NewFrame allocates a frame. Width and height must be even.
func NewFrame(w, h int) *Frame {
	if w <= 0 || h <= 0 || w%2 != 0 || h%2 != 0 {
		panic(fmt.Sprintf("render: NewFrame(%d, %d): sizes must be positive and even", w, h))
	}
	return &Frame{
		Width:  w,
		Height: h,
		Y:      make([]byte, w*h),
		U:      make([]byte, w*h/4),
		V:      make([]byte, w*h/4),
	}
}

// CopyFrom makes f a copy of src, which must have the same size.
func (f *Frame) CopyFrom(src *Frame) {
	copy(f.Y, src.Y)
	copy(f.U, src.U)
	copy(f.V, src.V)
}

// ToRGBA converts the frame to RGBA, for contact sheets and tests.
func (f *Frame) ToRGBA() *image.RGBA {
	img := image.NewRGBA(image.Rect(0, 0, f.Width, f.Height))
	cw := f.Width / 2
	for y := 0; y < f.Height; y++ {
		row := img.Pix[y*img.Stride:]
		for x := 0; x < f.Width; x++ {
			c := (y/2)*cw + x/2
			r, g, b := yuvToRGB(f.Y[y*f.Width+x], f.U[c], f.V[c])
			row[4*x], row[4*x+1], row[4*x+2], row[4*x+3] = r, g, b, 255
		}
	}
	return img
}

// FromRGBA fills f from an RGBA image of the same size, averaging each 2x2
// block for chroma.
func (f *Frame) FromRGBA(img *image.RGBA) {
	RGBAToI420(img, f)
}

// RGBAToI420 converts img (which must be dst's size) into dst.
func RGBAToI420(img *image.RGBA, dst *Frame) {
	w, h := dst.Width, dst.Height
	pix, stride := img.Pix, img.Stride
	for y := 0; y < h; y++ {
		row := pix[y*stride : y*stride+4*w]
		out := dst.Y[y*w : y*w+w]
		for x := range out {
			r, g, b := int32(row[4*x]), int32(row[4*x+1]), int32(row[4*x+2])
			out[x] = uint8((66*r + 129*g + 25*b + 128 + 16<<8) >> 8)
		}
	}
	cw := w / 2
	for cy := 0; cy < h/2; cy++ {
		r0 := pix[2*cy*stride:]
		r1 := pix[(2*cy+1)*stride:]
		for cx := 0; cx < cw; cx++ {
			i := 8 * cx
			r := int32(r0[i]) + int32(r0[i+4]) + int32(r1[i]) + int32(r1[i+4])
			g := int32(r0[i+1]) + int32(r0[i+5]) + int32(r1[i+1]) + int32(r1[i+5])
			b := int32(r0[i+2]) + int32(r0[i+6]) + int32(r1[i+2]) + int32(r1[i+6])
			// Sums of four pixels: shift by 2 more than the usual 8 bits.
			dst.U[cy*cw+cx] = uint8((-38*r - 74*g + 112*b + 512 + 128<<10) >> 10)
			dst.V[cy*cw+cx] = uint8((112*r - 94*g - 18*b + 512 + 128<<10) >> 10)
		}
	}
}

// rgbToYUV converts one colour to BT.601 limited range.
func rgbToYUV(r, g, b uint8) (y, u, v uint8) {
	ri, gi, bi := int32(r), int32(g), int32(b)
	y = uint8((66*ri + 129*gi + 25*bi + 128 + 16<<8) >> 8)
	u = uint8((-38*ri - 74*gi + 112*bi + 128 + 128<<8) >> 8)
	v = uint8((112*ri - 94*gi - 18*bi + 128 + 128<<8) >> 8)
	return y, u, v
}

func yuvToRGB(y, u, v uint8) (r, g, b uint8) {
	c := 298 * (int32(y) - 16)
	d := int32(u) - 128
	e := int32(v) - 128
	return clampByte((c + 409*e + 128) >> 8),
		clampByte((c - 100*d - 208*e + 128) >> 8),
		clampByte((c + 516*d + 128) >> 8)
}

func clampByte(v int32) uint8 {
	if v < 0 {
		return 0
	}
	if v > 255 {
		return 255
	}
	return uint8(v)
}
