package render

import "fmt"

// Renderer draws the avatar, one frame per 40 ms of audio.
type Renderer interface {
	// Render draws the frame shown while the given 40 ms of 16 kHz mono PCM
	// plays (len(pcm) == audio.FrameSamples; nil means silence). Called at
	// 25 fps from one goroutine.
	Render(pcm []int16, dst *Frame) error
	Size() (width, height int)
}

// AspectRatio is a session's video shape.
type AspectRatio string

// The aspect ratios a session may ask for.
const (
	Square    AspectRatio = "1:1" // 512x512
	Landscape AspectRatio = "4:3" // 640x480
	Portrait  AspectRatio = "3:4" // 480x640
)

// Dimensions returns the frame size for an aspect ratio.
func Dimensions(ar AspectRatio) (w, h int, err error) {
	switch ar {
	case Square:
		return 512, 512, nil
	case Landscape:
		return 640, 480, nil
	case Portrait:
		return 480, 640, nil
	}
	return 0, 0, fmt.Errorf("render: unknown aspect ratio %q (want 1:1, 4:3 or 3:4)", string(ar))
}
