package render

import (
	"avatarsvc/gpu-fleet/testfiles"
	"bytes"
	"fmt"
	"image"
	"math"
	"os"
	"sync"
	"testing"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/shared/avatarimage"
)

var (
	prepared   = map[string]*avatarimage.Prepared{}
	preparedMu sync.Mutex
)

// astronaut returns the test portrait prepared at w x h, once per size.
func astronaut(t testing.TB, w, h int) *avatarimage.Prepared {
	t.Helper()
	preparedMu.Lock()
	defer preparedMu.Unlock()
	key := fmt.Sprint(w, h)
	if p := prepared[key]; p != nil {
		return p
	}
	data, err := os.ReadFile(testfiles.Path("images/face-astronaut.png"))
	if err != nil {
		t.Fatal(err)
	}
	img, err := avatarimage.Decode(bytes.NewReader(data), 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := avatarimage.Prepare(img, w, h)
	if err != nil {
		t.Fatal(err)
	}
	prepared[key] = p
	return p
}

// speechFrames returns the test speech as 16 kHz frames.
func speechFrames(t testing.TB) [][]int16 {
	t.Helper()
	f, err := os.Open(testfiles.Path("audio/speech-16k.wav"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pcm, rate, err := audio.ReadWAV(f)
	if err != nil {
		t.Fatal(err)
	}
	pcm = audio.Resample(pcm, rate, audio.SampleRate)
	var frames [][]int16
	for i := 0; i+audio.FrameSamples <= len(pcm); i += audio.FrameSamples {
		frames = append(frames, pcm[i:i+audio.FrameSamples])
	}
	return frames
}

// meanAbsDiff compares the luma of two frames inside r.
func meanAbsDiff(a, b *Frame, r image.Rectangle) float64 {
	r = r.Intersect(image.Rect(0, 0, a.Width, a.Height))
	var sum, n float64
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			sum += math.Abs(float64(a.Y[y*a.Width+x]) - float64(b.Y[y*b.Width+x]))
			n++
		}
	}
	return sum / n
}

func TestDimensions(t *testing.T) {
	tests := []struct {
		ar      AspectRatio
		w, h    int
		wantErr bool
	}{
		{"1:1", 512, 512, false},
		{"4:3", 640, 480, false},
		{"3:4", 480, 640, false},
		{"16:9", 0, 0, true},
		{"", 0, 0, true},
	}
	for _, tt := range tests {
		t.Run(string(tt.ar), func(t *testing.T) {
			w, h, err := Dimensions(tt.ar)
			if (err != nil) != tt.wantErr {
				t.Fatalf("error: got %v, want error %v", err, tt.wantErr)
			}
			if w != tt.w || h != tt.h {
				t.Fatalf("got %dx%d, want %dx%d", w, h, tt.w, tt.h)
			}
		})
	}
}

func TestMouthMovesWithSpeechAndRestsInSilence(t *testing.T) {
	av := astronaut(t, 512, 512)
	frames := speechFrames(t)
	mouthArea := av.Mouth.Inset(-av.Mouth.Dx() / 4)

	r := NewCPURenderer(av)
	rest := NewFrame(512, 512)
	if err := r.Render(nil, rest); err != nil {
		t.Fatal(err)
	}
	analyzer := audio.NewAnalyzer()
	frame := NewFrame(512, 512)
	var loud, quiet []float64
	for i, pcm := range frames {
		if err := r.Render(pcm, frame); err != nil {
			t.Fatal(err)
		}
		level := analyzer.Analyze(pcm).Level
		diff := meanAbsDiff(frame, rest, mouthArea)
		switch {
		case level > -20:
			loud = append(loud, diff)
			if r.MouthOpenness() < 0.3 {
				t.Errorf("frame %d at %.0f dBFS: got openness %.2f, want >= 0.3", i, level, r.MouthOpenness())
			}
		case level < -90 && i > 1 && analyzer.Analyze(frames[i-1]).Level < -90 && analyzer.Analyze(frames[i-2]).Level < -90:
			// From the third frame (80 ms) of a pause on, the mouth has closed.
			quiet = append(quiet, diff)
			if r.MouthOpenness() > 0.05 {
				t.Errorf("frame %d in a pause: got openness %.2f, want about 0", i, r.MouthOpenness())
			}
		}
	}
	if len(loud) < 10 || len(quiet) < 5 {
		t.Fatalf("test speech: got %d loud and %d quiet frames, want at least 10 and 5", len(loud), len(quiet))
	}
	// The mouth changes visibly when loud; in pauses only the head's small
	// sway moves it.
	if m := median(loud); m < 12 {
		t.Errorf("mouth change on loud frames: got median %.1f luma levels, want >= 12", m)
	}
	if m := median(quiet); m > 4 {
		t.Errorf("mouth change in pauses: got median %.1f luma levels, want <= 4", m)
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[len(s)/2]
}

func TestSilentAvatarBlinksAndKeepsMouthAtRest(t *testing.T) {
	av := astronaut(t, 512, 512)
	r := NewCPURenderer(av)
	eyes := image.Rectangle{Min: av.LeftEye, Max: av.RightEye}.Canon().Inset(-av.Face.Dx() / 10)
	frame, prev := NewFrame(512, 512), NewFrame(512, 512)
	if err := r.Render(nil, prev); err != nil {
		t.Fatal(err)
	}
	// The head's sway changes the eye region slowly; a blink changes it
	// from one frame to the next, in a burst of a few frames.
	blinks := 0
	lastJump := -100
	for i := 1; i < 5*audio.FPS; i++ {
		if err := r.Render(nil, frame); err != nil {
			t.Fatal(err)
		}
		if r.MouthOpenness() != 0 {
			t.Fatalf("frame %d: got mouth openness %.2f in silence, want 0", i, r.MouthOpenness())
		}
		if meanAbsDiff(frame, prev, eyes) > 4 {
			if i-lastJump > 4 {
				blinks++
			}
			lastJump = i
		}
		prev.CopyFrom(frame)
	}
	if blinks < 1 || blinks > 4 {
		t.Fatalf("blinks in 5 s of silence: got %d, want 1-4", blinks)
	}
}

func TestRenderIsDeterministic(t *testing.T) {
	av := astronaut(t, 512, 512)
	frames := speechFrames(t)[:75]
	render := func(seed uint64) []*Frame {
		r := NewCPURendererSeeded(av, seed)
		var out []*Frame
		for i := 0; i < 125; i++ {
			var pcm []int16
			if i < len(frames) {
				pcm = frames[i]
			}
			f := NewFrame(512, 512)
			if err := r.Render(pcm, f); err != nil {
				t.Fatal(err)
			}
			out = append(out, f)
		}
		return out
	}
	a, b, c := render(7), render(7), render(8)
	differs := false
	for i := range a {
		if !bytes.Equal(a[i].Y, b[i].Y) || !bytes.Equal(a[i].U, b[i].U) || !bytes.Equal(a[i].V, b[i].V) {
			t.Fatalf("frame %d: got different pictures from the same seed and audio", i)
		}
		if !bytes.Equal(a[i].Y, c[i].Y) {
			differs = true
		}
	}
	if !differs {
		t.Fatal("seeds 7 and 8: got identical clips, want different idle motion")
	}
}

func TestRenderRejectsWrongFrameSize(t *testing.T) {
	r := NewCPURenderer(astronaut(t, 512, 512))
	if err := r.Render(nil, NewFrame(640, 480)); err == nil {
		t.Fatal("Render into 640x480 with a 512x512 renderer: got nil error, want one")
	}
}

func TestRGBARoundTrip(t *testing.T) {
	src := astronaut(t, 512, 512).Image
	f := NewFrame(512, 512)
	f.FromRGBA(src)
	back := f.ToRGBA()
	var se float64
	for i := 0; i < len(src.Pix); i += 4 {
		for c := 0; c < 3; c++ {
			d := float64(src.Pix[i+c]) - float64(back.Pix[i+c])
			se += d * d
		}
	}
	mse := se / float64(len(src.Pix)/4*3)
	if psnr := 10 * math.Log10(255*255/mse); psnr < 30 {
		t.Fatalf("RGBA -> I420 -> RGBA: got PSNR %.1f dB, want >= 30", psnr)
	}
}

func BenchmarkRender(b *testing.B) {
	for _, ar := range []AspectRatio{Square, Landscape} {
		b.Run(string(ar), func(b *testing.B) {
			w, h, err := Dimensions(ar)
			if err != nil {
				b.Fatal(err)
			}
			r := NewCPURenderer(astronaut(b, w, h))
			frames := speechFrames(b)
			dst := NewFrame(w, h)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := r.Render(frames[i%len(frames)], dst); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkRGBAToI420(b *testing.B) {
	src := astronaut(b, 512, 512).Image
	f := NewFrame(512, 512)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		RGBAToI420(src, f)
	}
}

// TestResetMouthRestsWithinOneFrame: after speech, ResetMouth makes the very
// next (silent) frame show a closed mouth, as an interrupt requires.
func TestResetMouthRestsWithinOneFrame(t *testing.T) {
	frames := speechFrames(t)
	r := NewCPURenderer(astronaut(t, 512, 512))
	frame := NewFrame(512, 512)
	maxOpen := 0.0
	for _, pcm := range frames[:60] {
		if err := r.Render(pcm, frame); err != nil {
			t.Fatal(err)
		}
		maxOpen = max(maxOpen, r.MouthOpenness())
	}
	if maxOpen < 0.3 {
		t.Fatalf("speech opened the mouth to only %.2f", maxOpen)
	}
	// Stop while the mouth is open, as an interrupt would.
	for _, pcm := range frames[60:] {
		if err := r.Render(pcm, frame); err != nil {
			t.Fatal(err)
		}
		if r.MouthOpenness() > 0.3 {
			break
		}
	}
	r.ResetMouth()
	if err := r.Render(nil, frame); err != nil {
		t.Fatal(err)
	}
	if got := r.MouthOpenness(); got != 0 {
		t.Errorf("mouth openness on the first frame after ResetMouth: got %.3f, want 0", got)
	}
}
