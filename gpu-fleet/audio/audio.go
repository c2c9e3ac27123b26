// Package audio holds the PCM helpers of the renderer: WAV files, sample-rate
// conversion and the per-frame features that drive the avatar's mouth.
package audio

const (
	// SampleRate is the internal PCM rate of the whole renderer.
	SampleRate = 16000
	// FrameSamples is 40 ms at 16 kHz: the audio shown by one video frame at 25 fps.
	FrameSamples = 640
	// FPS is the video frame rate that FrameSamples corresponds to.
	FPS = SampleRate / FrameSamples
)
