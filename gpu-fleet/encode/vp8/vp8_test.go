package vp8

import (
	"avatarsvc/gpu-fleet/testfiles"
	"bytes"
	"errors"
	"fmt"
	"image"
	"io"
	"math"
	"os"
	"testing"

	"avatarsvc/gpu-fleet/render"
	"avatarsvc/shared/avatarimage"
)

// clip renders n frames of the silent avatar (blinks and sway give the
// encoder real motion to code).
func clip(t testing.TB, w, h, n int) []*render.Frame {
	t.Helper()
	f, err := os.Open(testfiles.Path("images/face-astronaut.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := avatarimage.Decode(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	av, err := avatarimage.Prepare(img, w, h)
	if err != nil {
		t.Fatal(err)
	}
	r := render.NewCPURenderer(av)
	frames := make([]*render.Frame, n)
	for i := range frames {
		frames[i] = render.NewFrame(w, h)
		if err := r.Render(nil, frames[i]); err != nil {
			t.Fatal(err)
		}
	}
	return frames
}

func psnr(a, b []byte) float64 {
	var se float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		se += d * d
	}
	if se == 0 {
		return math.Inf(1)
	}
	return 10 * math.Log10(255*255/(se/float64(len(a))))
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, size := range []image.Point{{512, 512}, {640, 480}} {
		t.Run(fmt.Sprintf("%dx%d", size.X, size.Y), func(t *testing.T) {
			frames := clip(t, size.X, size.Y, 30)
			enc, err := NewEncoder(Config{Width: size.X, Height: size.Y, BitrateKbps: 800})
			if err != nil {
				t.Fatal(err)
			}
			defer enc.Close()
			dec, err := NewDecoder()
			if err != nil {
				t.Fatal(err)
			}
			defer dec.Close()
			for i, f := range frames {
				force := i == 20
				packet, key, err := enc.Encode(f, force)
				if err != nil {
					t.Fatalf("frame %d: Encode: %v", i, err)
				}
				if len(packet) == 0 {
					t.Fatalf("frame %d: got an empty packet, want one packet per frame", i)
				}
				if (i == 0 || force) && !key {
					t.Errorf("frame %d: got a delta frame, want a keyframe", i)
				}
				got, err := dec.Decode(packet)
				if err != nil {
					t.Fatalf("frame %d: Decode: %v", i, err)
				}
				if got.Width != size.X || got.Height != size.Y {
					t.Fatalf("frame %d: decoded %dx%d, want %dx%d", i, got.Width, got.Height, size.X, size.Y)
				}
				// After the first second the rate control has settled.
				if i >= 5 {
					if p := psnr(f.Y, got.Y); p < 32 {
						t.Errorf("frame %d: got luma PSNR %.1f dB, want >= 32", i, p)
					}
					if p := psnr(f.U, got.U); p < 32 {
						t.Errorf("frame %d: got chroma PSNR %.1f dB, want >= 32", i, p)
					}
				}
			}
		})
	}
}

func TestEncoderRejectsBadInput(t *testing.T) {
	if _, err := NewEncoder(Config{Width: 511, Height: 512}); err == nil {
		t.Error("NewEncoder(511x512): got nil error, want one")
	}
	enc, err := NewEncoder(Config{Width: 64, Height: 64})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := enc.Encode(render.NewFrame(32, 32), false); err == nil {
		t.Error("Encode of a 32x32 frame into a 64x64 encoder: got nil error, want one")
	}
	enc.Close()
	enc.Close() // twice is safe
	if _, _, err := enc.Encode(render.NewFrame(64, 64), false); err == nil {
		t.Error("Encode after Close: got nil error, want one")
	}
	dec, err := NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	if _, err := dec.Decode([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}); err == nil {
		t.Error("Decode of garbage: got nil error, want one")
	}
}

func TestIVFRoundTrip(t *testing.T) {
	frames := clip(t, 512, 512, 5)
	enc, err := NewEncoder(Config{Width: 512, Height: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	var buf bytes.Buffer
	w, err := NewIVFWriter(&buf, 512, 512, 25)
	if err != nil {
		t.Fatal(err)
	}
	var packets [][]byte
	for i, f := range frames {
		p, _, err := enc.Encode(f, false)
		if err != nil {
			t.Fatal(err)
		}
		packets = append(packets, append([]byte(nil), p...)) // p is reused by the next Encode
		if err := w.WritePacket(p, int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewIVFReader(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if r.Width != 512 || r.Height != 512 || r.FPS != 25 {
		t.Fatalf("header: got %dx%d at %d fps, want 512x512 at 25", r.Width, r.Height, r.FPS)
	}
	for i := range packets {
		p, pts, err := r.Next()
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		if pts != int64(i) || !bytes.Equal(p, packets[i]) {
			t.Fatalf("packet %d: got pts %d and %d bytes, want pts %d and %d bytes", i, pts, len(p), i, len(packets[i]))
		}
	}
	if _, _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last packet: got %v, want io.EOF", err)
	}
}

func BenchmarkVP8Encode(b *testing.B) {
	for _, bc := range []struct {
		size    image.Point
		cpuUsed int
	}{{image.Point{512, 512}, -6}, {image.Point{640, 480}, -6}, {image.Point{512, 512}, -12}, {image.Point{512, 512}, -16}} {
		size := bc.size
		b.Run(fmt.Sprintf("%dx%d/cpu%d/1thread", size.X, size.Y, bc.cpuUsed), func(b *testing.B) {
			frames := clip(b, size.X, size.Y, 50)
			enc, err := NewEncoder(Config{Width: size.X, Height: size.Y, CPUUsed: bc.cpuUsed, Threads: 1, BitrateKbps: 800})
			if err != nil {
				b.Fatal(err)
			}
			defer enc.Close()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, _, err := enc.Encode(frames[i%len(frames)], false); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
