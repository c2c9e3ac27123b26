package avatarimage

import (
	"avatarsvc/gpu-fleet/testfiles"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"image"
	"image/color"
	"image/draw"
	"image/gif"
	"image/jpeg"
	"image/png"
	"os"
	"testing"

	xdraw "golang.org/x/image/draw"
)

func decodeFile(t testing.TB, path string) image.Image {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := Decode(f, 0)
	if err != nil {
		t.Fatalf("Decode(%s): %v", path, err)
	}
	return img
}

func astronaut(t testing.TB) image.Image {
	return decodeFile(t, testfiles.Path("images/face-astronaut.png"))
}

func TestPrepareRealFace(t *testing.T) {
	img := astronaut(t)
	for _, size := range []struct{ w, h int }{{512, 512}, {640, 480}, {480, 640}} {
		t.Run(fmt.Sprintf("%dx%d", size.w, size.h), func(t *testing.T) {
			p, err := Prepare(img, size.w, size.h)
			if err != nil {
				t.Fatalf("Prepare: %v", err)
			}
			if got := p.Image.Bounds().Size(); got != image.Pt(size.w, size.h) {
				t.Fatalf("image size: got %v, want %dx%d", got, size.w, size.h)
			}
			frame := p.Image.Bounds()
			if !p.Face.In(frame) {
				t.Errorf("face %v: got outside the frame %v", p.Face, frame)
			}
			// Face centred horizontally, eyes about 40% down.
			eyeX := float64(p.LeftEye.X+p.RightEye.X) / 2
			eyeY := float64(p.LeftEye.Y+p.RightEye.Y) / 2
			if d := eyeX/float64(size.w) - 0.5; d < -0.05 || d > 0.05 {
				t.Errorf("eyes' centre x: got %.0f, want within 5%% of %d", eyeX, size.w/2)
			}
			if r := eyeY / float64(size.h); r < 0.35 || r > 0.45 {
				t.Errorf("eye line: got %.2f of the height, want 0.35-0.45", r)
			}
			// The face box takes a sensible share of the frame.
			short := float64(min(size.w, size.h))
			if r := float64(p.Face.Dx()) / short; r < 0.3 || r > 0.65 {
				t.Errorf("face size: got %.2f of the shorter side, want 0.30-0.65", r)
			}
			// The mouth lies below the eyes, between them horizontally, in
			// the lower half of the face box.
			eyeDist := float64(p.RightEye.X - p.LeftEye.X)
			if eyeDist < 0.2*float64(p.Face.Dx()) {
				t.Fatalf("eyes %v %v: got too close together for face %v", p.LeftEye, p.RightEye, p.Face)
			}
			mc := p.MouthCenter
			if float64(mc.Y)-eyeY < 0.6*eyeDist || float64(mc.Y)-eyeY > 1.3*eyeDist {
				t.Errorf("mouth centre %v: got %.0f px below the eyes, want 0.6-1.3 eye distances (%.0f)", mc, float64(mc.Y)-eyeY, eyeDist)
			}
			if mc.X < p.LeftEye.X || mc.X > p.RightEye.X {
				t.Errorf("mouth centre x %d: got outside the eyes %d..%d", mc.X, p.LeftEye.X, p.RightEye.X)
			}
			if !p.Mouth.In(p.Face.Inset(-p.Face.Dx() / 10)) {
				t.Errorf("mouth %v: got outside face %v", p.Mouth, p.Face)
			}
			if p.MouthLeft.X >= p.MouthRight.X || p.UpperLip.Y >= p.LowerLip.Y {
				t.Errorf("mouth landmarks out of order: %+v", p)
			}
		})
	}
}

func TestPrepareRejects(t *testing.T) {
	face := astronaut(t)
	fb := face.Bounds()

	twoFaces := image.NewRGBA(image.Rect(0, 0, 2*fb.Dx(), fb.Dy()))
	draw.Draw(twoFaces, fb, face, fb.Min, draw.Src)
	draw.Draw(twoFaces, fb.Add(image.Pt(fb.Dx(), 0)), face, fb.Min, draw.Src)

	// The photo at a third of its size on a plain canvas: a face of about 37 px.
	small := image.NewRGBA(image.Rect(0, 0, 1024, 1024))
	draw.Draw(small, small.Bounds(), image.NewUniform(color.RGBA{200, 200, 200, 255}), image.Point{}, draw.Src)
	xdraw.CatmullRom.Scale(small, image.Rect(400, 400, 400+fb.Dx()/3, 400+fb.Dy()/3), face, fb, draw.Src, nil)

	tests := []struct {
		name string
		img  image.Image
		want error
	}{
		{"no face", decodeFile(t, testfiles.Path("images/noface-hubble.jpg")), ErrNoFace},
		{"two faces", twoFaces, ErrManyFaces},
		{"face too small", small, ErrFaceTooSmall},
		{"blank", image.NewGray(image.Rect(0, 0, 300, 300)), ErrNoFace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Prepare(tt.img, 512, 512)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Prepare: got %v, want %v", err, tt.want)
			}
		})
	}
}

func TestPrepareRejectsOddSize(t *testing.T) {
	if _, err := Prepare(astronaut(t), 511, 512); err == nil {
		t.Fatal("Prepare(511x512): got nil error, want one")
	}
}

// pngHeaderOnly returns a PNG signature and IHDR chunk declaring w x h, with
// no pixel data: what a decompression-bomb upload starts with.
func pngHeaderOnly(w, h uint32) []byte {
	var b bytes.Buffer
	b.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], w)
	binary.BigEndian.PutUint32(ihdr[4:], h)
	ihdr[8], ihdr[9] = 8, 6 // 8-bit RGBA
	chunk := append([]byte("IHDR"), ihdr...)
	binary.Write(&b, binary.BigEndian, uint32(len(ihdr)))
	b.Write(chunk)
	binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(chunk))
	return b.Bytes()
}

func TestDecode(t *testing.T) {
	face := astronaut(t)
	encoded := func(enc func(*bytes.Buffer) error) []byte {
		var b bytes.Buffer
		if err := enc(&b); err != nil {
			t.Fatal(err)
		}
		return b.Bytes()
	}
	pngBytes := encoded(func(b *bytes.Buffer) error { return png.Encode(b, face) })
	jpegBytes := encoded(func(b *bytes.Buffer) error { return jpeg.Encode(b, face, nil) })
	gifBytes := encoded(func(b *bytes.Buffer) error { return gif.Encode(b, face, nil) })
	webpBytes, err := os.ReadFile("testdata/blue-purple-pink.lossy.webp")
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name     string
		data     []byte
		maxBytes int64
		want     error // nil: decodes
	}{
		{"png", pngBytes, 0, nil},
		{"jpeg", jpegBytes, 0, nil},
		{"gif", gifBytes, 0, nil},
		{"webp", webpBytes, 0, nil},
		{"truncated png", pngBytes[:len(pngBytes)/2], 0, ErrCorruptImage},
		{"truncated header", pngBytes[:20], 0, ErrCorruptImage},
		{"huge declared size", pngHeaderOnly(100000, 100000), 0, ErrTooLarge},
		{"too wide", pngHeaderOnly(MaxDimension+1, 16), 0, ErrTooLarge},
		{"over the byte limit", pngBytes, int64(len(pngBytes) - 1), ErrTooLarge},
		{"not an image", []byte("%PDF-1.4 not a picture at all"), 0, ErrUnsupportedFormat},
		{"empty", nil, 0, ErrUnsupportedFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			img, err := Decode(bytes.NewReader(tt.data), tt.maxBytes)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Decode: got %v, want no error", err)
				}
				if img.Bounds().Empty() {
					t.Fatalf("Decode: got an empty image")
				}
				return
			}
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode: got %v, want %v", err, tt.want)
			}
		})
	}
}

func BenchmarkPrepare(b *testing.B) {
	img := astronaut(b)
	for i := 0; i < b.N; i++ {
		if _, err := Prepare(img, 512, 512); err != nil {
			b.Fatal(err)
		}
	}
}
