package audio

import (
	"math"
	"math/cmplx"
)

// Features describe one frame of speech coarsely enough to drive a mouth.
type Features struct {
	// Level is the RMS level in dBFS; silence is -120.
	Level float64
	// Low, Mid, High and Sibilance are the shares of the frame's energy in
	// 80-700 Hz (voicing, first formant of closed vowels), 700-1800 Hz (first
	// formant of open vowels), 1800-4000 Hz (second formant of spread vowels)
	// and 4000-8000 Hz (fricatives). They sum to about 1 when there is sound.
	Low, Mid, High, Sibilance float64
}

const fftSize = 1024

// Analyzer computes Features of 16 kHz frames. It keeps scratch buffers, so
// one Analyzer serves one goroutine.
type Analyzer struct {
	window  []float64
	buf     []complex128
	twiddle []complex128
	bands   [4][2]int // FFT bin ranges [lo, hi)
}

// NewAnalyzer returns an Analyzer for frames of up to fftSize samples at SampleRate.
func NewAnalyzer() *Analyzer {
	a := &Analyzer{
		window:  make([]float64, FrameSamples),
		buf:     make([]complex128, fftSize),
		twiddle: make([]complex128, fftSize/2),
	}
	for i := range a.window {
		a.window[i] = 0.5 - 0.5*math.Cos(2*math.Pi*float64(i)/float64(len(a.window)-1))
	}
	for i := range a.twiddle {
		a.twiddle[i] = cmplx.Exp(complex(0, -2*math.Pi*float64(i)/fftSize))
	}
	edges := []float64{80, 700, 1800, 4000, 8000}
	for b := range a.bands {
		a.bands[b] = [2]int{hzToBin(edges[b]), hzToBin(edges[b+1])}
	}
	return a
}

func hzToBin(hz float64) int {
	bin := int(math.Round(hz * fftSize / SampleRate))
	return min(bin, fftSize/2)
}

// Analyze returns the features of one frame (FrameSamples at SampleRate; a
// shorter frame is zero padded, a longer one uses its last FrameSamples).
func (a *Analyzer) Analyze(pcm []int16) Features {
	if len(pcm) > FrameSamples {
		pcm = pcm[len(pcm)-FrameSamples:]
	}
	var sumSquares float64
	for _, s := range pcm {
		v := float64(s)
		sumSquares += v * v
	}
	f := Features{Level: -120}
	if len(pcm) == 0 || sumSquares == 0 {
		return f
	}
	rms := math.Sqrt(sumSquares/float64(len(pcm))) / 32768
	f.Level = max(-120, 20*math.Log10(rms))

	for i := range a.buf {
		a.buf[i] = 0
	}
	for i, s := range pcm {
		a.buf[i] = complex(float64(s)/32768*a.window[i], 0)
	}
	a.fft()
	var energy [4]float64
	var total float64
	for b, r := range a.bands {
		for k := r[0]; k < r[1]; k++ {
			re, im := real(a.buf[k]), imag(a.buf[k])
			energy[b] += re*re + im*im
		}
		total += energy[b]
	}
	if total > 0 {
		f.Low, f.Mid, f.High, f.Sibilance = energy[0]/total, energy[1]/total, energy[2]/total, energy[3]/total
	}
	return f
}

// fft is an in-place iterative radix-2 transform of a.buf.
func (a *Analyzer) fft() {
	n := len(a.buf)
	for i, j := 1, 0; i < n; i++ {
		bit := n >> 1
		for ; j&bit != 0; bit >>= 1 {
			j ^= bit
		}
		j ^= bit
		if i < j {
			a.buf[i], a.buf[j] = a.buf[j], a.buf[i]
		}
	}
	for size := 2; size <= n; size <<= 1 {
		step := n / size
		for start := 0; start < n; start += size {
			for k := 0; k < size/2; k++ {
				w := a.twiddle[k*step]
				u := a.buf[start+k]
				v := a.buf[start+k+size/2] * w
				a.buf[start+k] = u + v
				a.buf[start+k+size/2] = u - v
			}
		}
	}
}
