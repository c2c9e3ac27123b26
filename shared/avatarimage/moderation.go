package avatarimage

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"net/http"
	"os/exec"
	"strings"
)

// Moderation is the upload check the API runs on avatars: the same decode
// bounds and face checks a renderer applies at session start, so an avatar
// that passes upload also passes the renderer. It satisfies
// shared/avatars.Moderator, declared there where it is used.
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
func (m Moderation) CheckImage(data []byte) error {
	if IsVideo(data) {
		return ErrUnsupportedFormat
	}
	return m.check(context.Background(), data)
}

// CheckVideo requires a real MP4 or WebM from which ffmpeg can take a
// frame, and a face in that frame.
func (m Moderation) CheckVideo(ctx context.Context, data []byte) error {
	if !IsVideo(data) {
		return ErrNotVideo
	}
	return m.check(ctx, data)
}

func (m Moderation) check(ctx context.Context, data []byte) error {
	img, err := Still(ctx, m.ffmpeg(), data)
	if err != nil {
		return err
	}
	_, err = Prepare(img, moderationFrame, moderationFrame)
	return err
}

// Still is the picture an avatar is animated from, under the upload's
// bounds: an image of at most MaxImageBytes, or for an MP4 or WebM
// of at most MaxVideoBytes the frame ffmpeg takes (VideoFrame's
// box). Upload moderation and the renderer (avatarsource, whatever the
// avatar's origin: upload, data URI or URL) both start here, so an avatar
// given by URL meets exactly the checks an upload does.
func Still(ctx context.Context, ffmpeg string, data []byte) (image.Image, error) {
	if !IsVideo(data) {
		return Decode(bytes.NewReader(data), MaxImageBytes)
	}
	if len(data) > MaxVideoBytes {
		return nil, fmt.Errorf("%w (the video is over %d bytes)", ErrTooLarge, MaxVideoBytes)
	}
	frame, err := VideoFrame(ctx, ffmpeg, data)
	if err != nil {
		return nil, err
	}
	// The frame is ffmpeg's PNG: its pixels are bounded, its bytes need not be.
	return Decode(bytes.NewReader(frame), int64(len(frame)))
}

// IsVideo reports whether data is an MP4 or WebM file (by its bytes).
func IsVideo(data []byte) bool {
	t := http.DetectContentType(data)
	return strings.HasPrefix(t, "video/mp4") || strings.HasPrefix(t, "video/webm")
}
