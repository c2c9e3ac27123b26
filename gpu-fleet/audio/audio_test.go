package audio

import (
	"avatarsvc/gpu-fleet/testfiles"
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"testing"
)

func readSpeech(t testing.TB, rel string) ([]int16, int) {
	t.Helper()
	f, err := os.Open(testfiles.Path(rel))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pcm, rate, err := ReadWAV(f)
	if err != nil {
		t.Fatalf("ReadWAV(%s): %v", rel, err)
	}
	return pcm, rate
}

func sine(freq float64, rate int, seconds float64, amp float64) []int16 {
	out := make([]int16, int(float64(rate)*seconds))
	for i := range out {
		out[i] = int16(amp * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
	}
	return out
}

// measure returns the frequency (from zero crossings) and peak amplitude
// (from RMS) of the middle half of a sine.
func measure(pcm []int16, rate int) (freq, amp float64) {
	mid := pcm[len(pcm)/4 : 3*len(pcm)/4]
	crossings := 0
	var sum float64
	for i, s := range mid {
		sum += float64(s) * float64(s)
		if i > 0 && (mid[i-1] < 0) != (s < 0) {
			crossings++
		}
	}
	seconds := float64(len(mid)) / float64(rate)
	return float64(crossings) / 2 / seconds, math.Sqrt(2 * sum / float64(len(mid)))
}

func TestResampleKeepsSine(t *testing.T) {
	tests := []struct{ from, to int }{
		{48000, 16000}, {16000, 48000}, {44100, 16000}, {8000, 16000}, {22050, 48000}, {16000, 16000},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d-%d", tt.from, tt.to), func(t *testing.T) {
			in := sine(1000, tt.from, 1, 10000)
			out := Resample(in, tt.from, tt.to)
			wantLen := int(math.Ceil(float64(len(in)) * float64(tt.to) / float64(tt.from)))
			if len(out) != wantLen {
				t.Errorf("length: got %d, want %d", len(out), wantLen)
			}
			freq, amp := measure(out, tt.to)
			if math.Abs(freq-1000) > 5 {
				t.Errorf("frequency: got %.1f Hz, want 1000", freq)
			}
			if math.Abs(amp-10000) > 150 {
				t.Errorf("amplitude: got %.0f, want 10000", amp)
			}
		})
	}
}

func TestResampleRemovesAliases(t *testing.T) {
	// 9 kHz is above the 8 kHz Nyquist frequency of 16 kHz audio: it must
	// be filtered out, not fold back to 7 kHz.
	out := Resample(sine(9000, 48000, 1, 10000), 48000, 16000)
	_, amp := measure(out, 16000)
	if amp > 100 {
		t.Fatalf("9 kHz at 48k -> 16k: got amplitude %.0f, want < 100 (filtered out)", amp)
	}
}

func TestResamplerStreamingMatchesOneShot(t *testing.T) {
	pcm, rate := readSpeech(t, "audio/speech-48k.wav")
	want := Resample(pcm, rate, SampleRate)

	r := NewResampler(rate, SampleRate)
	var got []int16
	// Uneven chunk sizes, as a WebSocket delivers them.
	sizes := []int{1, 479, 960, 1234, 7, 4800, 333}
	for i, n := 0, 0; i < len(pcm); n++ {
		end := min(len(pcm), i+sizes[n%len(sizes)])
		got = append(got, r.Process(pcm[i:end])...)
		i = end
	}
	got = append(got, r.Flush()...)
	if len(got) != len(want) {
		t.Fatalf("length: got %d, want %d", len(got), len(want))
	}
	for i := range got {
		if d := int(got[i]) - int(want[i]); d < -1 || d > 1 {
			t.Fatalf("sample %d: got %d, want %d", i, got[i], want[i])
		}
	}
}

func TestWAVRoundTrip(t *testing.T) {
	pcm := sine(440, 16000, 0.5, 12000)
	var buf bytes.Buffer
	if err := WriteWAV(&buf, pcm, 16000); err != nil {
		t.Fatal(err)
	}
	got, rate, err := ReadWAV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if rate != 16000 || len(got) != len(pcm) {
		t.Fatalf("got %d samples at %d Hz, want %d at 16000", len(got), rate, len(pcm))
	}
	for i := range pcm {
		if got[i] != pcm[i] {
			t.Fatalf("sample %d: got %d, want %d", i, got[i], pcm[i])
		}
	}
}

func TestReadWAVDownmixesStereo(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteWAV(&buf, []int16{100, 300, -200, 0}, 8000); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	// Relabel the same bytes as 2 channels: frames (100,300) and (-200,0).
	b[22] = 2
	got, _, err := ReadWAV(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	want := []int16{200, -100}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestReadWAVRejects(t *testing.T) {
	var good bytes.Buffer
	if err := WriteWAV(&good, make([]int16, 100), 16000); err != nil {
		t.Fatal(err)
	}
	float := bytes.Clone(good.Bytes())
	float[20] = 3 // IEEE float format
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"not riff", []byte("OggS\x00\x02 definitely not a wav file")},
		{"header only", good.Bytes()[:12]},
		{"float samples", float},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := ReadWAV(bytes.NewReader(tt.data))
			if !errors.Is(err, ErrNotWAV) {
				t.Fatalf("ReadWAV: got %v, want ErrNotWAV", err)
			}
		})
	}
}

func TestAnalyzer(t *testing.T) {
	tests := []struct {
		name      string
		pcm       []int16
		wantLevel float64 // dBFS, within 1 dB
		band      func(Features) float64
	}{
		{"silence", make([]int16, FrameSamples), -120, nil},
		{"nil", nil, -120, nil},
		{"300 Hz", sine(300, SampleRate, 0.04, 16384), -9, func(f Features) float64 { return f.Low }},
		{"1 kHz", sine(1000, SampleRate, 0.04, 16384), -9, func(f Features) float64 { return f.Mid }},
		{"2.5 kHz", sine(2500, SampleRate, 0.04, 16384), -9, func(f Features) float64 { return f.High }},
		{"6 kHz", sine(6000, SampleRate, 0.04, 1638), -29, func(f Features) float64 { return f.Sibilance }},
	}
	a := NewAnalyzer()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := a.Analyze(tt.pcm)
			if math.Abs(f.Level-tt.wantLevel) > 1 {
				t.Errorf("level: got %.1f dBFS, want %.0f", f.Level, tt.wantLevel)
			}
			if tt.band != nil && tt.band(f) < 0.9 {
				t.Errorf("band share: got %.2f in the tone's band (%+v), want > 0.9", tt.band(f), f)
			}
		})
	}
}

func BenchmarkResampleStream48kTo16k(b *testing.B) {
	chunk := sine(440, 48000, 0.02, 8000)
	r := NewResampler(48000, 16000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r.Process(chunk)
	}
}

func BenchmarkAnalyze(b *testing.B) {
	frame := sine(440, SampleRate, 0.04, 8000)
	a := NewAnalyzer()
	for i := 0; i < b.N; i++ {
		a.Analyze(frame)
	}
}
