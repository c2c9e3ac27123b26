package tts

import (
	"context"
	"errors"
	"math"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"avatarsvc/shared/voices"
)

const sentence = "The quick brown fox jumps over the lazy dog near the river bank."

func seconds(pcm []int16) float64 { return float64(len(pcm)) / SampleRate }

func rms(pcm []int16) float64 {
	if len(pcm) == 0 {
		return 0
	}
	var s float64
	for _, v := range pcm {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(len(pcm)))
}

// voicedFraction is the share of 20 ms frames louder than -30 dBFS.
func voicedFraction(pcm []int16) float64 {
	const frame = SampleRate / 50
	n, loud := 0, 0
	for i := 0; i+frame <= len(pcm); i += frame {
		n++
		if rms(pcm[i:i+frame]) > 1000 {
			loud++
		}
	}
	if n == 0 {
		return 0
	}
	return float64(loud) / float64(n)
}

// medianPitch estimates the fundamental frequency of the voiced 40 ms
// frames by autocorrelation, in Hz (0 when nothing is voiced).
func medianPitch(pcm []int16) float64 {
	const frame, minLag, maxLag = SampleRate / 25, SampleRate / 400, SampleRate / 60
	var f0s []float64
	for i := 0; i+frame+maxLag <= len(pcm); i += frame / 2 {
		x := pcm[i : i+frame+maxLag]
		if rms(x[:frame]) < 1000 {
			continue
		}
		best, bestLag := 0.0, 0
		for lag := minLag; lag <= maxLag; lag++ {
			var num, e0, e1 float64
			for k := 0; k < frame; k++ {
				a, b := float64(x[k]), float64(x[k+lag])
				num += a * b
				e0 += a * a
				e1 += b * b
			}
			if c := num / math.Sqrt(e0*e1+1); c > best {
				best, bestLag = c, lag
			}
		}
		if best > 0.6 {
			f0s = append(f0s, float64(SampleRate)/float64(bestLag))
		}
	}
	if len(f0s) == 0 {
		return 0
	}
	sort.Float64s(f0s)
	return f0s[len(f0s)/2]
}

func TestEveryVoiceSpeaks(t *testing.T) {
	for _, v := range voices.All() {
		t.Run(v.ID, func(t *testing.T) {
			pcm, err := SynthesizeAll(context.Background(), "hello world", v.ID)
			if err != nil {
				t.Fatalf("SynthesizeAll: %v", err)
			}
			if got := seconds(pcm); got < 0.4 || got > 3 {
				t.Errorf("duration of \"hello world\": got %.2f s, want 0.4 to 3 s", got)
			}
			if got := rms(pcm); got < 500 {
				t.Errorf("RMS: got %.0f, want over 500 (speech, not silence)", got)
			}
			if got := voicedFraction(pcm); got < 0.3 {
				t.Errorf("share of frames louder than -30 dBFS: got %.2f, want at least 0.3", got)
			}
		})
	}
}

func TestFemaleVariantsArePitchedUp(t *testing.T) {
	n := 0
	for _, v := range voices.All() {
		base, variant, ok := strings.Cut(v.ID, "+")
		if !ok || !strings.HasPrefix(variant, "f") {
			continue
		}
		n++
		t.Run(v.ID, func(t *testing.T) {
			ctx := context.Background()
			low, err := SynthesizeAll(ctx, sentence, base)
			if err != nil {
				t.Fatal(err)
			}
			high, err := SynthesizeAll(ctx, sentence, v.ID)
			if err != nil {
				t.Fatal(err)
			}
			f0, f1 := medianPitch(low), medianPitch(high)
			t.Logf("median pitch: %s %.0f Hz, %s %.0f Hz", base, f0, v.ID, f1)
			if f0 == 0 || f1 < 1.3*f0 {
				t.Errorf("median pitch of %s: got %.0f Hz, want over 1.3 x %s's %.0f Hz", v.ID, f1, base, f0)
			}
		})
	}
	if n == 0 {
		t.Fatal("the catalogue has no female variant to check")
	}
}

func TestUnknownVoice(t *testing.T) {
	tests := []struct{ name, id string }{
		{"not espeak", "klingon"},
		{"wrong case", "EN-US"},
		{"espeak language code, not a voice name", "en-gb"},
		{"variant not in the catalogue", "en-us+nosuch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			err := Synthesize(context.Background(), "hello", tc.id, func([]int16) error { called = true; return nil })
			if !errors.Is(err, ErrUnknownVoice) {
				t.Fatalf("Synthesize with voice %q: got error %v, want ErrUnknownVoice", tc.id, err)
			}
			if !strings.Contains(err.Error(), tc.id) {
				t.Errorf("error %q does not name the voice %q", err, tc.id)
			}
			if called {
				t.Error("emit was called for an unknown voice")
			}
		})
	}
}

// TestLoadVoiceChecksVariant covers what the catalogue check cannot: an
// espeak-ng that ignores a variant it does not have, or lacks a voice.
func TestLoadVoiceChecksVariant(t *testing.T) {
	if _, err := nativeRate(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id      string
		wantErr bool
	}{
		{"en-us", false},
		{"en-us+f3", false},
		{"en-us+nosuch", true},
		{"nosuchvoice", true},
		{"en-gb", true},
		{"de", false},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			engine <- struct{}{}
			defer func() { <-engine }()
			err := loadVoice(tc.id)
			if tc.wantErr && !errors.Is(err, ErrUnknownVoice) {
				t.Errorf("loadVoice(%q): got %v, want ErrUnknownVoice", tc.id, err)
			}
			if !tc.wantErr && err != nil {
				t.Errorf("loadVoice(%q): %v", tc.id, err)
			}
		})
	}
}

func TestBlankTextGivesNothing(t *testing.T) {
	for _, text := range []string{"", " ", "\n\t  \r\n", "\x00"} {
		t.Run(strings.ReplaceAll(text, "\x00", "NUL"), func(t *testing.T) {
			calls := 0
			err := Synthesize(context.Background(), text, voices.Default, func([]int16) error { calls++; return nil })
			if err != nil {
				t.Errorf("Synthesize(%q): %v", text, err)
			}
			if calls != 0 {
				t.Errorf("Synthesize(%q): emit called %d times, want 0", text, calls)
			}
		})
	}
}

func TestEmptyVoiceMeansDefault(t *testing.T) {
	if _, err := SynthesizeAll(context.Background(), "good morning", "de"); err != nil {
		t.Fatal(err)
	}
	if _, err := SynthesizeAll(context.Background(), "good morning", ""); err != nil {
		t.Fatal(err)
	}
	engine <- struct{}{}
	got := loadedVoice
	<-engine
	if got != voices.Default {
		t.Errorf("voice loaded for \"\": got %q, want %q", got, voices.Default)
	}
}

// TestOutputIs16kHz checks the output length against what espeak-ng made at
// its own rate: resampling to 16 kHz scales it by 16000/22050.
func TestOutputIs16kHz(t *testing.T) {
	rate, err := nativeRate()
	if err != nil {
		t.Fatal(err)
	}
	if rate != 22050 {
		t.Logf("espeak-ng native rate: %d Hz (Debian's is 22050)", rate)
	}
	var out []int16
	j, err := synthesize(context.Background(), sentence, voices.Default, func(pcm []int16) error {
		out = append(out, pcm...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := (j.native*SampleRate + rate - 1) / rate
	if d := len(out) - want; d < -1 || d > 1 {
		t.Errorf("output samples: got %d, want %d (%d at %d Hz)", len(out), want, j.native, rate)
	}
	if got := seconds(out); got < 2 || got > 6 {
		t.Errorf("duration of a 12-word sentence: got %.2f s, want 2 to 6 s", got)
	}
}

func TestStreamsChunks(t *testing.T) {
	ctx := context.Background()
	var chunks [][]int16
	err := Synthesize(ctx, sentence, voices.Default, func(pcm []int16) error {
		chunks = append(chunks, pcm)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(chunks) < 10 {
		t.Errorf("chunks: got %d, want at least 10 for %q", len(chunks), sentence)
	}
	// A chunk is one espeak buffer (50 ms at 22050 Hz) resampled, plus at
	// most the resampler's held-back lookahead.
	for i, c := range chunks {
		if len(c) == 0 || len(c) > SampleRate*bufferMillis/1000+64 {
			t.Errorf("chunk %d: got %d samples, want 1 to %d", i, len(c), SampleRate*bufferMillis/1000+64)
		}
	}
	all, err := SynthesizeAll(ctx, sentence, voices.Default)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := seconds(slices.Concat(chunks...)), seconds(all); !similar(got, want, 0.03) {
		t.Errorf("streamed chunks: got %.3f s of audio, want %.3f s like SynthesizeAll", got, want)
	}
}

// waitForStop is a chunk hook that holds espeak-ng inside its first callback
// until the synthesis is told to stop, so the test knows the stop happened
// while there was still text to speak.
func waitForStop(t *testing.T) {
	t.Helper()
	testChunkHook = func() {
		for deadline := time.Now().Add(30 * time.Second); !active.stop.Load(); {
			if time.Now().After(deadline) {
				panic("synthesis was never told to stop")
			}
			runtime.Gosched()
		}
	}
	t.Cleanup(func() { testChunkHook = nil })
}

func TestStopsEarly(t *testing.T) {
	errStop := errors.New("listener left")
	long := strings.Repeat(sentence+" ", 20)
	tests := []struct {
		name string
		// emit is given the cancel function of the synthesis's context.
		emit    func(cancel context.CancelFunc) error
		wantErr error
	}{
		{"emit error", func(context.CancelFunc) error { return errStop }, errStop},
		{"context cancelled", func(cancel context.CancelFunc) error { cancel(); return nil }, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			waitForStop(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			j, err := synthesize(ctx, long, voices.Default, func([]int16) error {
				calls++
				return tc.emit(cancel)
			})
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Synthesize: got error %v, want %v", err, tc.wantErr)
			}
			if calls != 1 {
				t.Errorf("emit calls: got %d, want 1", calls)
			}
			// 20 sentences are about a minute; stopping after the first
			// callback leaves one 50 ms buffer.
			if got, max := j.native, 22050*bufferMillis/1000+1; got > max {
				t.Errorf("samples synthesised before stopping: got %d, want at most %d", got, max)
			}
			testChunkHook = nil
			// The engine is free and clean for the next caller.
			got, err := SynthesizeAll(context.Background(), "hello world", voices.Default)
			if err != nil {
				t.Fatalf("SynthesizeAll after stopping: %v", err)
			}
			if d := seconds(got); d < 0.4 || d > 3 {
				t.Errorf("\"hello world\" after stopping: got %.2f s, want 0.4 to 3 s", d)
			}
		})
	}
}

func TestCancelledBeforeStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	calls := 0
	err := Synthesize(ctx, sentence, voices.Default, func([]int16) error { calls++; return nil })
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Synthesize with a cancelled context: got %v, want context.Canceled", err)
	}
	if calls != 0 {
		t.Errorf("emit calls: got %d, want 0", calls)
	}
}

// TestSlowListenerDoesNotHoldEngine: a caller that plays its audio out in
// real time must not block other sessions' synthesis.
func TestSlowListenerDoesNotHoldEngine(t *testing.T) {
	release := make(chan struct{})
	firstChunk := make(chan struct{})
	slowDone := make(chan error, 1)
	go func() {
		var once sync.Once
		slowDone <- Synthesize(context.Background(), sentence, "en", func([]int16) error {
			once.Do(func() { close(firstChunk) })
			<-release
			return nil
		})
	}()
	<-firstChunk
	fast := make(chan error, 1)
	go func() {
		_, err := SynthesizeAll(context.Background(), "hello world", "de")
		fast <- err
	}()
	select {
	case err := <-fast:
		if err != nil {
			t.Errorf("second synthesis: %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Error("a synthesis waited for another caller's emit")
	}
	close(release)
	if err := <-slowDone; err != nil {
		t.Errorf("slow synthesis: %v", err)
	}
}

// similar reports whether got is within a fraction tol of want.
func similar(got, want, tol float64) bool { return math.Abs(got-want) <= tol*math.Abs(want) }

// TestConcurrentSynthesesDoNotMix runs syntheses in several voices at once
// and compares each with the same one run alone. espeak-ng's output is not
// bit-exact from one run to the next (its wave generator carries phase and
// pitch state over), so duration and pitch are compared: a chunk delivered
// to the wrong caller, or a voice switched under a running synthesis, moves
// one or both far more than that.
func TestConcurrentSynthesesDoNotMix(t *testing.T) {
	ctx := context.Background()
	ids := []string{"en-us", "en+f3", "fr", "de", "es-419", "it"}
	type speech struct{ dur, pitch float64 }
	want := map[string]speech{}
	for _, id := range ids {
		pcm, err := SynthesizeAll(ctx, sentence, id)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = speech{seconds(pcm), medianPitch(pcm)}
	}
	var wg sync.WaitGroup
	for _, id := range ids {
		for range 3 {
			wg.Go(func() {
				pcm, err := SynthesizeAll(ctx, sentence, id)
				if err != nil {
					t.Errorf("%s: %v", id, err)
					return
				}
				got, w := speech{seconds(pcm), medianPitch(pcm)}, want[id]
				if !similar(got.dur, w.dur, 0.05) || !similar(got.pitch, w.pitch, 0.1) {
					t.Errorf("%s run concurrently: got %.2f s at %.0f Hz, want %.2f s at %.0f Hz as run alone", id, got.dur, got.pitch, w.dur, w.pitch)
				}
			})
		}
	}
	wg.Wait()
}

// BenchmarkSynthesize reports the latency to the first chunk and how many
// seconds of speech one second of synthesis makes, for a 10-word sentence
// in an already loaded voice.
func BenchmarkSynthesize(b *testing.B) {
	const text = "Thanks for calling, how can I help you with your order today?"
	ctx := context.Background()
	if _, err := SynthesizeAll(ctx, text, voices.Default); err != nil {
		b.Fatal(err)
	}
	var first, total time.Duration
	var audioSec float64
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		gotFirst := false
		err := Synthesize(ctx, text, voices.Default, func(pcm []int16) error {
			if !gotFirst {
				first += time.Since(start)
				gotFirst = true
			}
			audioSec += seconds(pcm)
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(first.Microseconds())/1000/float64(b.N), "ms-first-chunk")
	b.ReportMetric(audioSec/total.Seconds(), "x-realtime")
	b.ReportMetric(audioSec/float64(b.N), "s-audio/op")
}
