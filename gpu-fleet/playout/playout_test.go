package playout_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/playout"
)

// tone returns n samples of a constant non-zero value, so a test can tell
// utterance audio from the silence Next pads with.
func tone(n int, v int16) []int16 {
	pcm := make([]int16, n)
	for i := range pcm {
		pcm[i] = v
	}
	return pcm
}

type frameResult struct {
	speaking    bool
	interrupted bool
	events      []playout.Event
	nonZero     int
	arrivals    int
}

func next(b *playout.Buffer) frameResult {
	dst := make([]int16, playout.FrameSamples)
	for i := range dst {
		dst[i] = -1 // Next must overwrite every sample
	}
	f := b.Next(dst)
	r := frameResult{speaking: f.Speaking, interrupted: f.Interrupted, events: slices.Clone(f.Events), arrivals: len(f.ChunkArrivals)}
	for _, s := range dst {
		if s == -1 {
			panic("Next left a sample unwritten")
		}
		if s != 0 {
			r.nonZero++
		}
	}
	return r
}

func TestFrameSamples(t *testing.T) {
	if got, want := playout.FrameSamples, 640; got != want {
		t.Fatalf("FrameSamples: got %d, want %d", got, want)
	}
}

func TestIdleFramesAreSilent(t *testing.T) {
	b := playout.New(0)
	for i := range 3 {
		r := next(b)
		if r.speaking || r.nonZero != 0 || len(r.events) != 0 {
			t.Fatalf("idle frame %d: got speaking=%v nonZero=%d events=%v, want silent and no events",
				i, r.speaking, r.nonZero, r.events)
		}
	}
}

func TestUtteranceEventsComeWithFirstAndLastFrame(t *testing.T) {
	b := playout.New(0)
	// 2.5 frames of audio: the third frame is half audio, half padding.
	id, err := b.Push(tone(2*playout.FrameSamples+320, 7), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := b.End(); !ok {
		t.Fatal("End: got false, want true with an open utterance")
	}

	f1 := next(b)
	if want := []playout.Event{{Type: playout.SpeechStarted, UtteranceID: id}}; !slices.Equal(f1.events, want) {
		t.Fatalf("frame 1 events: got %v, want %v", f1.events, want)
	}
	if f1.nonZero != playout.FrameSamples {
		t.Fatalf("frame 1 audio: got %d non-zero samples, want %d", f1.nonZero, playout.FrameSamples)
	}
	f2 := next(b)
	if len(f2.events) != 0 {
		t.Fatalf("frame 2 events: got %v, want none", f2.events)
	}
	f3 := next(b)
	want := []playout.Event{{Type: playout.SpeechFinished, UtteranceID: id, PlayedSamples: 2*playout.FrameSamples + 320}}
	if !slices.Equal(f3.events, want) {
		t.Fatalf("frame 3 events: got %v, want %v", f3.events, want)
	}
	if f3.nonZero != 320 {
		t.Fatalf("frame 3 audio: got %d non-zero samples, want 320 then padding", f3.nonZero)
	}
	if got := f3.events[0].Played(); got != 100*time.Millisecond {
		t.Fatalf("Played: got %v, want 100ms", got)
	}
	f4 := next(b)
	if f4.speaking || len(f4.events) != 0 || f4.nonZero != 0 {
		t.Fatalf("frame 4: got %+v, want silent with no events", f4)
	}
}

func TestOpenUtteranceDoesNotFinishWhenItRunsDry(t *testing.T) {
	b := playout.New(0)
	id, _ := b.Push(tone(playout.FrameSamples, 3), time.Now())
	next(b) // started
	for i := range 5 {
		if r := next(b); len(r.events) != 0 || r.nonZero != 0 {
			t.Fatalf("dry frame %d: got events %v nonZero %d, want silence and no events", i, r.events, r.nonZero)
		}
	}
	// More audio continues the same utterance.
	id2, _ := b.Push(tone(100, 3), time.Now())
	if id2 != id {
		t.Fatalf("utterance id after underrun: got %d, want %d", id2, id)
	}
	next(b)
	b.End()
	// The last audio frame was already sent; finished comes with the next frame.
	r := next(b)
	want := []playout.Event{{Type: playout.SpeechFinished, UtteranceID: id, PlayedSamples: playout.FrameSamples + 100}}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events after End of a drained utterance: got %v, want %v", r.events, want)
	}
}

func TestUtterancesDoNotShareFrames(t *testing.T) {
	b := playout.New(0)
	a, _ := b.Push(tone(100, 1), time.Now())
	b.End()
	c, _ := b.Push(tone(100, 2), time.Now())
	b.End()
	if a == c {
		t.Fatalf("utterance ids: got %d twice, want distinct", a)
	}
	r1 := next(b)
	want1 := []playout.Event{
		{Type: playout.SpeechStarted, UtteranceID: a},
		{Type: playout.SpeechFinished, UtteranceID: a, PlayedSamples: 100},
	}
	if !slices.Equal(r1.events, want1) || r1.nonZero != 100 {
		t.Fatalf("frame 1: got events %v nonZero %d, want %v and 100", r1.events, r1.nonZero, want1)
	}
	r2 := next(b)
	want2 := []playout.Event{
		{Type: playout.SpeechStarted, UtteranceID: c},
		{Type: playout.SpeechFinished, UtteranceID: c, PlayedSamples: 100},
	}
	if !slices.Equal(r2.events, want2) {
		t.Fatalf("frame 2: got events %v, want %v", r2.events, want2)
	}
}

func TestInterruptRestsTheNextFrame(t *testing.T) {
	b := playout.New(0)
	id, _ := b.Push(tone(10*playout.FrameSamples, 9), time.Now())
	b.End()
	queued, _ := b.Push(tone(playout.FrameSamples, 9), time.Now())
	next(b)
	next(b)

	if got, want := b.Interrupt(), 9*playout.FrameSamples; got != want {
		t.Fatalf("Interrupt dropped: got %d, want %d", got, want)
	}
	r := next(b)
	if r.speaking || r.nonZero != 0 || !r.interrupted {
		t.Fatalf("frame after interrupt: got speaking=%v nonZero=%d interrupted=%v, want silence marked interrupted",
			r.speaking, r.nonZero, r.interrupted)
	}
	if next(b).interrupted {
		t.Fatal("second frame after interrupt: got interrupted, want only the first marked")
	}
	want := []playout.Event{{Type: playout.SpeechFinished, UtteranceID: id, PlayedSamples: 2 * playout.FrameSamples, Interrupted: true}}
	if !slices.Equal(r.events, want) {
		t.Fatalf("events after interrupt: got %v, want %v (utterance %d never started, so no event)", r.events, want, queued)
	}
	if got := b.Buffered(); got != 0 {
		t.Fatalf("Buffered after interrupt: got %d, want 0", got)
	}
	// New audio after an interrupt opens a fresh utterance.
	fresh, _ := b.Push(tone(10, 1), time.Now())
	if fresh == id || fresh == queued {
		t.Fatalf("utterance after interrupt: got reused id %d", fresh)
	}
}

func TestEndWithoutOpenUtterance(t *testing.T) {
	b := playout.New(0)
	if _, ok := b.End(); ok {
		t.Fatal("End on empty buffer: got true, want false")
	}
	b.Push(tone(10, 1), time.Now())
	b.End()
	if _, ok := b.End(); ok {
		t.Fatal("second End: got true, want false")
	}
}

func TestPushIsBounded(t *testing.T) {
	b := playout.New(2 * playout.FrameSamples)
	if _, err := b.Push(tone(2*playout.FrameSamples, 1), time.Now()); err != nil {
		t.Fatalf("Push up to the bound: got %v, want nil", err)
	}
	_, err := b.Push(tone(1, 1), time.Now())
	if !errors.Is(err, playout.ErrBufferFull) {
		t.Fatalf("Push over the bound: got %v, want ErrBufferFull", err)
	}
	next(b)
	if _, err := b.Push(tone(playout.FrameSamples, 1), time.Now()); err != nil {
		t.Fatalf("Push after a frame drained: got %v, want nil", err)
	}
}

func TestChunkArrivalsMarkTheFrameShowingTheChunk(t *testing.T) {
	b := playout.New(0)
	t0 := time.Unix(100, 0)
	// chunk A: 1.5 frames, chunk B starts mid frame 2, chunk C starts frame 3
	b.Push(tone(960, 1), t0)
	b.Push(tone(320, 1), t0.Add(time.Millisecond))
	b.Push(tone(640, 1), t0.Add(2*time.Millisecond))
	for i, want := range []int{1, 1, 1, 0} {
		if got := next(b).arrivals; got != want {
			t.Fatalf("frame %d chunk arrivals: got %d, want %d", i+1, got, want)
		}
	}
}

func TestConcurrentProducers(t *testing.T) {
	b := playout.New(0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 200 {
			b.Push(tone(160, 1), time.Now())
			if b.Buffered() > 4000 {
				b.Interrupt()
			}
		}
		b.End()
	}()
	for range 300 {
		next(b)
	}
	<-done
}
