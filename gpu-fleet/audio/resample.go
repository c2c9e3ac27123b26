package audio

import "math"

// zeroCrossings is the half-length of the windowed-sinc kernel in periods of
// the lower of the two rates: 16 gives about 80 dB of stop band with the
// Kaiser window below, for 1 ms of lookahead at 48 kHz -> 16 kHz.
const zeroCrossings = 16

// Resampler converts a stream of PCM chunks from one rate to another with a
// polyphase windowed-sinc filter, keeping state across chunks so the output
// has no seams. It is not safe for concurrent use.
type Resampler struct {
	up, down int         // output sample k sits at input time k*down/up
	half     int         // taps each side of the centre, in input samples
	phases   [][]float32 // phases[p] is the kernel for fractional offset p/up
	buf      []float32   // input history; buf[0] is input sample number base
	base     int64
	next     int64 // integer input position of the next output sample
	phase    int   // its fractional part, in units of 1/up
	in, out  int64 // samples consumed and produced, for Flush
}

// NewResampler returns a resampler from rate from to rate to (Hz).
func NewResampler(from, to int) *Resampler {
	if from <= 0 || to <= 0 {
		panic("audio: NewResampler with a non-positive rate")
	}
	g := gcd(from, to)
	up, down := to/g, from/g
	r := &Resampler{up: up, down: down}
	if up == down {
		return r
	}
	// Cut off a little below the lower Nyquist frequency, in cycles per input sample.
	ratio := math.Min(1, float64(up)/float64(down))
	cutoff := 0.5 * ratio * 0.94
	r.half = int(math.Ceil(zeroCrossings / ratio))
	taps := 2 * r.half
	r.phases = make([][]float32, up)
	const beta = 8.0
	i0beta := besselI0(beta)
	for p := 0; p < up; p++ {
		frac := float64(p) / float64(up)
		k := make([]float32, taps)
		sum := 0.0
		vals := make([]float64, taps)
		for j := 0; j < taps; j++ {
			// Tap j multiplies input sample (next - half + 1 + j).
			x := float64(j-r.half+1) - frac
			v := 2 * cutoff * sinc(2*cutoff*x)
			t := x / float64(r.half)
			if t <= -1 || t >= 1 {
				v = 0
			} else {
				v *= besselI0(beta*math.Sqrt(1-t*t)) / i0beta
			}
			vals[j] = v
			sum += v
		}
		// Unity gain at DC for every phase, so a constant stays constant.
		for j := range vals {
			k[j] = float32(vals[j] / sum)
		}
		r.phases[p] = k
	}
	// Input before the first sample is silence.
	r.buf = make([]float32, r.half-1, 4096)
	r.base = -int64(r.half - 1)
	return r
}

// Process consumes a chunk and returns the output samples that are complete.
// The filter looks ahead half its length, so the last few input samples
// come out with the next chunk (or Flush).
func (r *Resampler) Process(in []int16) []int16 {
	if r.up == r.down {
		out := make([]int16, len(in))
		copy(out, in)
		r.in += int64(len(in))
		r.out += int64(len(in))
		return out
	}
	for _, s := range in {
		r.buf = append(r.buf, float32(s))
	}
	r.in += int64(len(in))
	out := make([]int16, 0, int(int64(len(in))*int64(r.up)/int64(r.down))+2)
	end := r.base + int64(len(r.buf)) // one past the last buffered input sample
	for r.next+int64(r.half) < end {
		start := int(r.next - int64(r.half) + 1 - r.base)
		window := r.buf[start : start+2*r.half]
		k := r.phases[r.phase]
		var acc float32
		for j, v := range window {
			acc += v * k[j]
		}
		out = append(out, clamp16(acc))
		r.out++
		r.phase += r.down
		r.next += int64(r.phase / r.up)
		r.phase %= r.up
	}
	// Drop history the next output no longer needs.
	keep := r.next - int64(r.half) + 1 - r.base
	if keep > 0 && keep <= int64(len(r.buf)) {
		n := copy(r.buf, r.buf[keep:])
		r.buf = r.buf[:n]
		r.base += keep
	}
	return out
}

// Flush returns the rest of the output for the input seen so far, as if the
// stream ended with silence, and resets nothing: call it once at the end.
func (r *Resampler) Flush() []int16 {
	want := (r.in*int64(r.up) + int64(r.down) - 1) / int64(r.down)
	if r.up == r.down || r.out >= want {
		return nil
	}
	pad := make([]int16, r.half+r.down/r.up+1)
	out := r.Process(pad)
	r.in -= int64(len(pad))
	if missing := want - (r.out - int64(len(out))); missing < int64(len(out)) {
		r.out -= int64(len(out)) - missing
		out = out[:missing]
	}
	return out
}

// Resample converts a whole clip from one rate to another.
func Resample(pcm []int16, fromRate, toRate int) []int16 {
	r := NewResampler(fromRate, toRate)
	out := r.Process(pcm)
	return append(out, r.Flush()...)
}

func clamp16(v float32) int16 {
	if v >= 32767 {
		return 32767
	}
	if v <= -32768 {
		return -32768
	}
	return int16(math.Round(float64(v)))
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	return math.Sin(math.Pi*x) / (math.Pi * x)
}

// besselI0 is the modified Bessel function of order zero, for the Kaiser window.
func besselI0(x float64) float64 {
	sum, term := 1.0, 1.0
	for k := 1; k < 50; k++ {
		term *= (x / (2 * float64(k))) * (x / (2 * float64(k)))
		sum += term
		if term < 1e-12*sum {
			break
		}
	}
	return sum
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
