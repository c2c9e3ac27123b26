package elevenlabs

import (
	"errors"
	"testing"
)

func TestParseAudioFormat(t *testing.T) {
	tests := []struct {
		in       string
		encoding string
		rate     int
		wantErr  bool
	}{
		// The formats the AsyncAPI contract lists.
		{in: "pcm_8000", encoding: "pcm", rate: 8000},
		{in: "pcm_16000", encoding: "pcm", rate: 16000},
		{in: "pcm_22050", encoding: "pcm", rate: 22050},
		{in: "pcm_24000", encoding: "pcm", rate: 24000},
		{in: "pcm_44100", encoding: "pcm", rate: 44100},
		{in: "pcm_48000", encoding: "pcm", rate: 48000},
		{in: "ulaw_8000", encoding: "ulaw", rate: 8000},
		// A rate not listed yet is still PCM we can resample.
		{in: "pcm_32000", encoding: "pcm", rate: 32000},
		{in: "mp3_44100_128", wantErr: true},
		{in: "opus_48000", wantErr: true},
		{in: "pcm", wantErr: true},
		{in: "pcm_", wantErr: true},
		{in: "pcm_96000", wantErr: true},
		{in: "pcm_-16000", wantErr: true},
		{in: "", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseAudioFormat(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrUnsupportedFormat) {
					t.Errorf("error: got %v, want ErrUnsupportedFormat", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.encoding != tt.encoding || got.rate != tt.rate || got.name != tt.in {
				t.Errorf("got %+v, want encoding %s rate %d", got, tt.encoding, tt.rate)
			}
		})
	}
}

func TestULawKnownValues(t *testing.T) {
	// G.711 μ-law reference points: 0xFF and 0x7F are +0 and -0, 0x80 and
	// 0x00 the largest magnitudes (±32124).
	decode := []struct {
		in   byte
		want int16
	}{
		{0xFF, 0},
		{0x7F, 0},
		{0x80, 32124},
		{0x00, -32124},
		{0xF0, 120},  // exponent 0, mantissa 15
		{0xEF, 132},  // exponent 1, mantissa 0
		{0x70, -120}, // negative of 0xF0
	}
	for _, tt := range decode {
		if got := ulawToLinear(tt.in); got != tt.want {
			t.Errorf("decode 0x%02X: got %d, want %d", tt.in, got, tt.want)
		}
	}
	encode := []struct {
		in   int16
		want byte
	}{
		{0, 0xFF},
		{32767, 0x80},
		{-32768, 0x00},
		{120, 0xF0},
		{-120, 0x70},
	}
	for _, tt := range encode {
		if got := linearToULaw(tt.in); got != tt.want {
			t.Errorf("encode %d: got 0x%02X, want 0x%02X", tt.in, got, tt.want)
		}
	}
}

func TestULawRoundTrip(t *testing.T) {
	// Every code decodes to a value that encodes back to the same code
	// (except -0, which encodes as +0).
	for b := 0; b < 256; b++ {
		lin := ulawToLinear(byte(b))
		if got := linearToULaw(lin); got != byte(b) && !(b == 0x7F && got == 0xFF) {
			t.Errorf("code 0x%02X -> %d -> 0x%02X", b, lin, got)
		}
	}
	// Any sample comes back within half a quantisation step (relative
	// error under 1/16 of the magnitude, plus the bias region near zero).
	for s := -32768; s <= 32767; s += 7 {
		got := int(ulawToLinear(linearToULaw(int16(s))))
		limit := 8 + abs(s)/16
		if s > 32124 || s < -32124 {
			limit = abs(s) - 32124 + 1100
		}
		if d := abs(got - s); d > limit {
			t.Fatalf("%d -> %d: error %d over %d", s, got, d, limit)
		}
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
