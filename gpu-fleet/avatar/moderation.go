package avatar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// Moderation is the upload check the API runs on avatars: the same decode
// bounds and face checks a renderer applies at session start, so an avatar
// that passes upload also passes the renderer.
type Moderation struct {
	// FFmpeg is the ffmpeg binary that takes a frame from a video upload
	// ("" finds ffmpeg on PATH). In AWS it comes from a Lambda layer.
	FFmpeg string
}

// ErrVideoUnsupported means this deployment has no ffmpeg to check videos.
var ErrVideoUnsupported = errors.New("video moderation needs ffmpeg, which is not installed on this deployment")

// VideoSupported reports whether ffmpeg is there to check videos.
func (m Moderation) VideoSupported() bool {
	_, err := exec.LookPath(m.ffmpeg())
	return err == nil
}

func (m Moderation) ffmpeg() string {
	if m.FFmpeg == "" {
		return "ffmpeg"
	}
	return m.FFmpeg
}

// moderationFrame is the frame size the face checks run at.
const moderationFrame = 256

// CheckImage decodes the image within bounds and requires one clear face
// of adequate size.
func (Moderation) CheckImage(data []byte) error {
	img, err := Decode(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return err
	}
	_, err = Prepare(img, moderationFrame, moderationFrame)
	return err
}

// CheckVideo requires a real MP4 or WebM from which ffmpeg can take a
// frame (half a second in, or the first for shorter clips), and a face in
// that frame.
func (m Moderation) CheckVideo(ctx context.Context, data []byte) error {
	path, err := exec.LookPath(m.ffmpeg())
	if err != nil {
		return ErrVideoUnsupported
	}
	f, err := os.CreateTemp("", "upload-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	f.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	var frame []byte
	for _, at := range []string{"0.5", "0"} {
		cmd := exec.CommandContext(ctx, path, "-v", "error", "-ss", at, "-i", f.Name(),
			"-frames:v", "1", "-f", "image2pipe", "-vcodec", "png", "-")
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err == nil && out.Len() > 0 {
			frame = out.Bytes()
			break
		} else if ctx.Err() != nil {
			return fmt.Errorf("%w: the video took too long to read", ErrCorruptImage)
		}
	}
	if frame == nil {
		return errors.New("the file is not a playable MP4 or WebM video")
	}
	return m.CheckImage(frame)
}
