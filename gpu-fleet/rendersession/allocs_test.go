package rendersession

import (
	"testing"
	"time"

	"avatarsvc/gpu-fleet/encode/opus"
	"avatarsvc/gpu-fleet/encode/vp8"
	"avatarsvc/gpu-fleet/playout"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/roomtest"
)

type discard struct{}

func (discard) WriteVideo([]byte, time.Time) error { return nil }
func (discard) WriteAudio([]byte, time.Time) error { return nil }
func (discard) KeyframeRequested() bool            { return false }

// TestStepAllocations counts heap allocations per frame with the real CPU
// renderer, VP8 and Opus encoders, speaking and silent: garbage per frame
// times 25 fps times many sessions is what drives GC pauses and late frames.
func TestStepAllocations(t *testing.T) {
	av := roomtest.Face(t, render.Square)
	video, err := vp8.NewEncoder(vp8.Config{Width: 512, Height: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer video.Close()
	audio, err := opus.NewEncoder(OpusInputRate, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer audio.Close()
	buf := playout.New(0)
	p, err := NewPipeline(PipelineConfig{Buffer: buf, Renderer: render.NewCPURenderer(av), Video: video, Audio: audio, Publisher: discard{}})
	if err != nil {
		t.Fatal(err)
	}
	tone := make([]int16, 16000*60)
	for i := range tone {
		tone[i] = int16(8000 * ((i / 20) % 2)) // a loud buzz: the mouth moves
	}
	now := time.Now()
	step := func() {
		now = now.Add(FrameDuration)
		if err := p.Step(now); err != nil {
			t.Fatal(err)
		}
	}
	for range 50 { // warm up: buffers reach their steady sizes
		step()
	}
	silent := testing.AllocsPerRun(100, step)
	if _, err := buf.Push(tone, time.Now()); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		step()
	}
	speaking := testing.AllocsPerRun(100, step)
	t.Logf("heap allocations per frame: silent %.1f, speaking %.1f", silent, speaking)
	// The pipeline, encoders and renderer reuse their buffers.
	for name, got := range map[string]float64{"silent": silent, "speaking": speaking} {
		if got > 0 {
			t.Errorf("%s frame: got %.1f allocations, want 0", name, got)
		}
	}
}
