package rendersession

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/playout"
	"avatarsvc/gpu-fleet/render"
)

// recorder is the fakes' shared log of what happened, in order.
type recorder struct {
	mu  sync.Mutex
	ops []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ops = append(r.ops, fmt.Sprintf(format, args...))
}

func (r *recorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ops := r.ops
	r.ops = nil
	return ops
}

// fakeRenderer records how loud each frame's audio was, which is what a
// real renderer turns into mouth opening.
type fakeRenderer struct {
	peaks  []int
	resets []int // frame numbers before which ResetMouth was called
	stall  func(frame int)
}

func (f *fakeRenderer) ResetMouth() { f.resets = append(f.resets, len(f.peaks)) }

func (f *fakeRenderer) Size() (int, int) { return 64, 48 }
func (f *fakeRenderer) Render(pcm []int16, dst *render.Frame) error {
	if len(pcm) != playout.FrameSamples {
		return fmt.Errorf("render got %d samples, want %d", len(pcm), playout.FrameSamples)
	}
	peak := 0
	for _, s := range pcm {
		peak = max(peak, int(s), -int(s))
	}
	f.peaks = append(f.peaks, peak)
	if f.stall != nil {
		f.stall(len(f.peaks))
	}
	dst.Y[0] = byte(peak)
	return nil
}

type fakeVideo struct{ forced int }

func (f *fakeVideo) Encode(fr *render.Frame, force bool) ([]byte, bool, error) {
	if force {
		f.forced++
	}
	return []byte{fr.Y[0]}, force, nil
}

type fakeAudio struct{}

func (fakeAudio) Encode(pcm []int16) ([]byte, error) {
	if len(pcm) != AudioPacketSamples {
		return nil, fmt.Errorf("opus got %d samples, want %d", len(pcm), AudioPacketSamples)
	}
	return []byte{1}, nil
}

type fakePublisher struct {
	rec      *recorder
	t0       time.Time
	keyframe bool
}

func (f *fakePublisher) WriteVideo(_ []byte, at time.Time) error {
	f.rec.add("video@%v", at.Sub(f.t0))
	return nil
}
func (f *fakePublisher) WriteAudio(_ []byte, at time.Time) error {
	f.rec.add("audio@%v", at.Sub(f.t0))
	return nil
}
func (f *fakePublisher) KeyframeRequested() bool {
	k := f.keyframe
	f.keyframe = false
	return k
}

type fakeSink struct{ rec *recorder }

func (f fakeSink) Emit(ev playout.Event) {
	f.rec.add("%v#%d played=%d interrupted=%v", ev.Type, ev.UtteranceID, ev.PlayedSamples, ev.Interrupted)
}

type fixture struct {
	t0       time.Time
	now      time.Time
	rec      *recorder
	buffer   *playout.Buffer
	renderer *fakeRenderer
	video    *fakeVideo
	pub      *fakePublisher
	p        *Pipeline
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t0: time.Unix(1000, 0), rec: &recorder{}, buffer: playout.New(0), renderer: &fakeRenderer{}, video: &fakeVideo{}}
	f.now = f.t0
	f.pub = &fakePublisher{rec: f.rec, t0: f.t0}
	p, err := NewPipeline(PipelineConfig{
		Buffer: f.buffer, Renderer: f.renderer, Video: f.video, Audio: fakeAudio{},
		Publisher: f.pub, Events: fakeSink{rec: f.rec},
		Now: func() time.Time { return f.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.p = p
	return f
}

// step produces frame n, on time.
func (f *fixture) step(t *testing.T, n int) {
	t.Helper()
	at := f.t0.Add(time.Duration(n) * FrameDuration)
	f.now = at
	if err := f.p.Step(at); err != nil {
		t.Fatal(err)
	}
}

func speech(n int) []int16 {
	pcm := make([]int16, n)
	for i := range pcm {
		pcm[i] = int16(8000 * ((i/20)%2*2 - 1)) // a loud 400 Hz square wave
	}
	return pcm
}

func TestIdleFramesCarryVideoAndTwoAudioPackets(t *testing.T) {
	f := newFixture(t)
	for n := range 3 {
		f.step(t, n)
	}
	want := []string{
		"video@0s", "audio@0s", "audio@20ms",
		"video@40ms", "audio@40ms", "audio@60ms",
		"video@80ms", "audio@80ms", "audio@100ms",
	}
	if got := f.rec.take(); !slices.Equal(got, want) {
		t.Fatalf("writes: got %v, want %v", got, want)
	}
	if got := f.p.Stats().Frames; got != 3 {
		t.Fatalf("Frames: got %d, want 3", got)
	}
}

func TestSpeechEventsComeAfterTheirFrameIsWritten(t *testing.T) {
	f := newFixture(t)
	f.buffer.Push(speech(2*playout.FrameSamples+100), f.t0)
	f.buffer.End()

	f.step(t, 0)
	want0 := []string{"video@0s", "audio@0s", "audio@20ms", "speech_started#1 played=0 interrupted=false"}
	if got := f.rec.take(); !slices.Equal(got, want0) {
		t.Fatalf("frame 0: got %v, want %v", got, want0)
	}
	f.step(t, 1)
	want1 := []string{"video@40ms", "audio@40ms", "audio@60ms"}
	if got := f.rec.take(); !slices.Equal(got, want1) {
		t.Fatalf("frame 1: got %v, want %v", got, want1)
	}
	f.step(t, 2)
	want2 := []string{"video@80ms", "audio@80ms", "audio@100ms", "speech_finished#1 played=1380 interrupted=false"}
	if got := f.rec.take(); !slices.Equal(got, want2) {
		t.Fatalf("frame 2 (last audio): got %v, want %v", got, want2)
	}
	if got := f.p.Stats().SpeakingFrames; got != 3 {
		t.Fatalf("SpeakingFrames: got %d, want 3", got)
	}
}

func TestInterruptRestsTheMouthWithinOneFrame(t *testing.T) {
	f := newFixture(t)
	f.buffer.Push(speech(25*playout.FrameSamples), f.t0)
	f.buffer.End()
	f.step(t, 0)
	f.step(t, 1)
	f.rec.take()

	f.buffer.Interrupt()
	f.step(t, 2)

	if got := f.renderer.peaks; got[0] == 0 || got[1] == 0 {
		t.Fatalf("renderer audio before interrupt: got peaks %v, want speech", got)
	}
	if got := f.renderer.peaks[2]; got != 0 {
		t.Fatalf("renderer audio in the frame after interrupt: got peak %d, want 0 (rest)", got)
	}
	if want := []int{2}; !slices.Equal(f.renderer.resets, want) {
		t.Fatalf("ResetMouth before frames: got %v, want %v", f.renderer.resets, want)
	}
	want := []string{"video@80ms", "audio@80ms", "audio@100ms",
		fmt.Sprintf("speech_finished#1 played=%d interrupted=true", 2*playout.FrameSamples)}
	if got := f.rec.take(); !slices.Equal(got, want) {
		t.Fatalf("frame after interrupt: got %v, want %v", got, want)
	}
}

func TestAudioFollowsTheFrameThatShowsIt(t *testing.T) {
	// The renderer and the Opus encoder see the same audio in the same
	// tick: a loud frame's packets are loud, a quiet frame's are quiet.
	f := newFixture(t)
	var loud []bool
	f.p.cfg.Audio = audioFunc(func(pcm []int16) ([]byte, error) {
		peak := 0
		for _, s := range pcm[100:] { // skip the resampler's ~1 ms delay
			peak = max(peak, int(s), -int(s))
		}
		loud = append(loud, peak > 1000)
		return []byte{1}, nil
	})
	f.step(t, 0)
	f.buffer.Push(speech(playout.FrameSamples), f.t0)
	f.buffer.End()
	f.step(t, 1)
	f.step(t, 2)
	want := []bool{false, false, true, true, false, false}
	if !slices.Equal(loud, want) {
		t.Fatalf("loud audio packets: got %v, want %v", loud, want)
	}
}

type audioFunc func([]int16) ([]byte, error)

func (f audioFunc) Encode(pcm []int16) ([]byte, error) { return f(pcm) }

func TestLateFramesAreCounted(t *testing.T) {
	f := newFixture(t)
	at := f.t0
	f.now = at.Add(5 * time.Millisecond)
	f.p.Step(at)
	at = at.Add(FrameDuration)
	f.now = at.Add(30 * time.Millisecond)
	f.p.Step(at)
	s := f.p.Stats()
	if s.LateFrames != 1 || s.MaxLateness != 30*time.Millisecond {
		t.Fatalf("late frames: got %d (max %v), want 1 (max 30ms)", s.LateFrames, s.MaxLateness)
	}
}

func TestLatencyIsMeasuredFromChunkArrival(t *testing.T) {
	f := newFixture(t)
	f.buffer.Push(speech(320), f.t0.Add(-15*time.Millisecond))
	f.step(t, 0)
	got := f.p.Latencies()
	if want := []time.Duration{15 * time.Millisecond}; !slices.Equal(got, want) {
		t.Fatalf("latencies: got %v, want %v", got, want)
	}
}

func TestKeyframeRequestIsForwarded(t *testing.T) {
	f := newFixture(t)
	f.pub.keyframe = true
	f.step(t, 0)
	f.step(t, 1)
	if f.video.forced != 1 {
		t.Fatalf("forced keyframes: got %d, want 1", f.video.forced)
	}
	if got := f.p.Stats().Keyframes; got != 1 {
		t.Fatalf("Stats.Keyframes: got %d, want 1", got)
	}
}

func TestRunSkipsAheadAfterAStall(t *testing.T) {
	rec := &recorder{}
	stalled := make(chan struct{})
	renderer := &fakeRenderer{stall: func(frame int) {
		if frame == 3 {
			time.Sleep(DefaultMaxBacklog + 200*time.Millisecond)
			close(stalled)
		}
	}}
	p, err := NewPipeline(PipelineConfig{
		Buffer: playout.New(0), Renderer: renderer, Video: &fakeVideo{}, Audio: fakeAudio{},
		Publisher: &fakePublisher{rec: rec},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	<-stalled
	// Let the clock produce the frame after the stall, then stop.
	for p.Stats().Frames < 5 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: got %v, want nil after cancel", err)
	}
	s := p.Stats()
	if s.Resyncs != 1 {
		t.Fatalf("Resyncs: got %d, want 1", s.Resyncs)
	}
	if s.LateFrames == 0 {
		t.Fatal("LateFrames: got 0, want the stalled frame counted")
	}
}
