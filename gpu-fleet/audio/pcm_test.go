package audio

import (
	"slices"
	"testing"
)

func TestPCM16(t *testing.T) {
	in := []int16{0, 1, -1, 32767, -32768, 256, -256}
	b := EncodePCM16(in)
	if got, want := len(b), 2*len(in); got != want {
		t.Fatalf("bytes: got %d, want %d", got, want)
	}
	// Little-endian: 256 is 00 01.
	if got, want := b[10:12], []byte{0x00, 0x01}; string(got) != string(want) {
		t.Errorf("256 encoded: got % X, want % X", got, want)
	}
	if got := DecodePCM16(b, 1); !slices.Equal(got, in) {
		t.Errorf("round trip: got %v, want %v", got, in)
	}
	tests := []struct {
		name     string
		in       []int16
		channels int
		want     []int16
	}{
		{"stereo averaged", []int16{100, 300, -32768, 32767}, 2, []int16{200, 0}},
		{"partial frame ignored", []int16{10, 20, 30}, 2, []int16{15}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := DecodePCM16(EncodePCM16(tt.in), tt.channels); !slices.Equal(got, tt.want) {
				t.Fatalf("DecodePCM16: got %v, want %v", got, tt.want)
			}
		})
	}
}
