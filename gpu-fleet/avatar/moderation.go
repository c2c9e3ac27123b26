package avatar

import (
	"bytes"
	"context"
	"net/http"
	"os/exec"
	"strings"

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

// VideoSupported reports whether ffmpeg and prlimit (its box) are there
// to check videos.
func (m Moderation) VideoSupported() bool {
	bin, err := exec.LookPath(m.ffmpeg())
	if err != nil {
		return false
	}
	_, err = prlimitPath(bin)
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

// NewModerator is the API's upload moderation (app.Config.NewModerator).
func NewModerator(ffmpeg string) avatars.Moderator { return Moderation{FFmpeg: ffmpeg} }
