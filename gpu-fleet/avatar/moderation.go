package avatar

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"avatarsvc/shared/avatars"
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
// frame, and a face in that frame.
func (m Moderation) CheckVideo(ctx context.Context, data []byte) error {
	frame, err := VideoFrame(ctx, m.ffmpeg(), data)
	if err != nil {
		return err
	}
	return m.CheckImage(frame)
}

// IsVideo reports whether data is an MP4 or WebM file (by its bytes).
func IsVideo(data []byte) bool {
	t := http.DetectContentType(data)
	return strings.HasPrefix(t, "video/mp4") || strings.HasPrefix(t, "video/webm")
}

// VideoFrame takes one frame of a video as PNG with ffmpeg: half a second
// in, or the first frame of a shorter clip. Video avatars are animated from
// this still, like photos.
func VideoFrame(ctx context.Context, ffmpeg string, data []byte) ([]byte, error) {
	path, err := exec.LookPath(ffmpeg)
	if err != nil {
		return nil, ErrVideoUnsupported
	}
	f, err := os.CreateTemp("", "video-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for _, at := range []string{"0.5", "0"} {
		cmd := exec.CommandContext(ctx, path, "-v", "error", "-ss", at, "-i", f.Name(),
			"-frames:v", "1", "-f", "image2pipe", "-vcodec", "png", "-")
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Run(); err == nil && out.Len() > 0 {
			return out.Bytes(), nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w: the video took too long to read", ErrCorruptImage)
		}
	}
	return nil, errors.New("the file is not a playable MP4 or WebM video")
}

// NewModerator is the API's upload moderation (app.Config.NewModerator).
func NewModerator(ffmpeg string) avatars.Moderator { return Moderation{FFmpeg: ffmpeg} }
