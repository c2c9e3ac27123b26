package opus

import (
	"avatarsvc/gpu-fleet/testfiles"
	"math"
	"os"
	"testing"

	"avatarsvc/gpu-fleet/audio"
)

func speech48k(t testing.TB) []int16 {
	t.Helper()
	p := testfiles.Path(testfiles.Speech48k)
	f, err := os.Open(p)
	if err != nil {
		t.Fatalf("test input missing: %v", err)
	}
	defer f.Close()
	pcm, rate, err := audio.ReadWAV(f)
	if err != nil {
		t.Fatal(err)
	}
	if rate != 48000 {
		pcm = audio.Resample(pcm, rate, 48000)
	}
	return pcm
}

func rms(pcm []int16) float64 {
	var s float64
	for _, v := range pcm {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(len(pcm)))
}

func TestSpeechRoundTrip(t *testing.T) {
	pcm := speech48k(t)
	enc, err := NewEncoder(48000, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	dec, err := NewDecoder(48000, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	n := enc.FrameSamples()
	if n != 960 {
		t.Fatalf("FrameSamples: got %d, want 960", n)
	}
	var in, out []int16
	var bytes int
	for i := 0; i+n <= len(pcm); i += n {
		packet, err := enc.Encode(pcm[i : i+n])
		if err != nil {
			t.Fatalf("frame %d: Encode: %v", i/n, err)
		}
		bytes += len(packet)
		got, err := dec.Decode(packet)
		if err != nil {
			t.Fatalf("frame %d: Decode: %v", i/n, err)
		}
		if len(got) != n {
			t.Fatalf("frame %d: decoded %d samples, want %d", i/n, len(got), n)
		}
		in = append(in, pcm[i:i+n]...)
		out = append(out, got...)
	}
	ratio := rms(out) / rms(in)
	if ratio < 0.8 || ratio > 1.25 {
		t.Errorf("decoded energy: got %.2f of the input's RMS, want 0.8-1.25", ratio)
	}
	kbps := float64(bytes) * 8 / (float64(len(in)) / 48000) / 1000
	if kbps < 8 || kbps > 64 {
		t.Errorf("bitrate: got %.1f kbps, want 8-64 (target 32)", kbps)
	}
}

func TestEncoderRejectsWrongFrameSize(t *testing.T) {
	enc, err := NewEncoder(48000, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	if _, err := enc.Encode(make([]int16, 480)); err == nil {
		t.Error("Encode of 10 ms: got nil error, want one")
	}
	if _, err := NewEncoder(44100, 1); err == nil {
		t.Error("NewEncoder(44100): got nil error, want one (Opus has no 44.1 kHz mode)")
	}
}

func BenchmarkOpusEncode(b *testing.B) {
	pcm := speech48k(b)
	enc, err := NewEncoder(48000, 1)
	if err != nil {
		b.Fatal(err)
	}
	defer enc.Close()
	n := enc.FrameSamples()
	frames := len(pcm) / n
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := (i % frames) * n
		if _, err := enc.Encode(pcm[k : k+n]); err != nil {
			b.Fatal(err)
		}
	}
}
