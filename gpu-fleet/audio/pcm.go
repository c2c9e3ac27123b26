package audio

import "encoding/binary"

// DecodePCM16 turns interleaved 16-bit little-endian PCM into mono samples,
// averaging the channels; a trailing partial sample frame is ignored. Every
// speech input (ws_uri, in-room agents, ElevenLabs, WAV files) arrives so.
func DecodePCM16(b []byte, channels int) []int16 {
	pcm := make([]int16, len(b)/(2*channels))
	for i := range pcm {
		sum := 0
		for c := 0; c < channels; c++ {
			sum += int(int16(binary.LittleEndian.Uint16(b[2*(i*channels+c):])))
		}
		pcm[i] = int16(sum / channels)
	}
	return pcm
}

// EncodePCM16 encodes mono samples as 16-bit little-endian PCM.
func EncodePCM16(pcm []int16) []byte {
	b := make([]byte, 2*len(pcm))
	for i, s := range pcm {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(s))
	}
	return b
}
