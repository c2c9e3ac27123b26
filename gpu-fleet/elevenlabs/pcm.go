package elevenlabs

// G.711 μ-law, as in ITU-T G.711 and its widely used reference
// implementation: 0x84 is the bias, 32635 the largest magnitude encoded.
const (
	ulawBias = 0x84
	ulawClip = 32635
)

// ulawDecode expands μ-law bytes to linear PCM.
func ulawDecode(b []byte) []int16 {
	out := make([]int16, len(b))
	for i, v := range b {
		out[i] = ulawToLinear(v)
	}
	return out
}

func ulawToLinear(v byte) int16 {
	u := ^v
	exponent := (u >> 4) & 0x07
	mantissa := int32(u & 0x0F)
	magnitude := ((mantissa << 3) + ulawBias) << exponent
	magnitude -= ulawBias
	if u&0x80 != 0 {
		return int16(-magnitude)
	}
	return int16(magnitude)
}

// ulawEncode compresses linear PCM to μ-law bytes.
func ulawEncode(pcm []int16) []byte {
	out := make([]byte, len(pcm))
	for i, s := range pcm {
		out[i] = linearToULaw(s)
	}
	return out
}

func linearToULaw(s int16) byte {
	v := int32(s)
	var sign byte
	if v < 0 {
		v = -v
		sign = 0x80
	}
	if v > ulawClip {
		v = ulawClip
	}
	v += ulawBias
	// The exponent is the position of the highest set bit among bits 7..14.
	exponent := byte(7)
	for mask := int32(0x4000); v&mask == 0 && exponent > 0; mask >>= 1 {
		exponent--
	}
	mantissa := byte(v>>(exponent+3)) & 0x0F
	return ^(sign | exponent<<4 | mantissa)
}
