// Package avatarimage is what the API's upload moderation and the renderer
// both do with an avatar's bytes: decode an image (or take a video's still
// in the ffmpeg box) within one set of bounds, find its one face with pigo,
// crop and scale it to a frame with the face well placed, and locate the
// eyes and mouth. Sharing it means an avatar that passes upload also passes
// the renderer. It imports nothing from the API's services, so the renderer
// links no DynamoDB code through it.
package avatarimage

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	_ "image/gif" // registered for image.Decode
	_ "image/jpeg"
	_ "image/png"
	"io"

	_ "golang.org/x/image/webp"
)

// Limits on avatars, for every way one arrives (upload, data URI, URL).
// The pixel limit bounds the memory a decode can take (4096x4096 RGBA is
// 64 MiB) whatever the file's byte size. Videos may be a few tens of MB (in
// AWS, Lambda's 6 MB request payload limit applies first).
const (
	MaxDimension  = 4096
	MaxPixels     = MaxDimension * MaxDimension
	MaxImageBytes = 10 << 20
	MaxVideoBytes = 50 << 20
)

// Errors the API can show to callers as they are.
var (
	ErrNoFace            = errors.New("no face found in the image: use a photo with one clear, frontal face")
	ErrManyFaces         = errors.New("more than one face found in the image: use a photo with exactly one person")
	ErrFaceTooSmall      = errors.New("the face in the image is too small: use a photo where the face is at least 80 pixels wide")
	ErrTooLarge          = fmt.Errorf("the image is too large: at most %d bytes and %dx%d pixels", MaxImageBytes, MaxDimension, MaxDimension)
	ErrUnsupportedFormat = errors.New("unsupported image format: use PNG, JPEG, GIF or WebP")
	ErrCorruptImage      = errors.New("the image file is damaged or incomplete")
)

// Decode reads one PNG, JPEG, GIF (first frame) or WebP image of at most
// maxBytes bytes (0: MaxImageBytes). It reads the header first and refuses images whose declared
// size is over the limits, so a small file claiming a huge size never makes it
// allocate the pixels.
func Decode(r io.Reader, maxBytes int64) (image.Image, error) {
	if maxBytes <= 0 {
		maxBytes = MaxImageBytes
	}
	data, err := io.ReadAll(io.LimitReader(r, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("avatarimage: reading image: %w", err)
	}
	if int64(len(data)) > maxBytes {
		return nil, fmt.Errorf("%w (file is over %d bytes)", ErrTooLarge, maxBytes)
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		if errors.Is(err, image.ErrFormat) {
			return nil, ErrUnsupportedFormat
		}
		return nil, fmt.Errorf("%w: reading header: %v", ErrCorruptImage, err)
	}
	switch format {
	case "png", "jpeg", "gif", "webp":
	default:
		return nil, ErrUnsupportedFormat
	}
	if cfg.Width <= 0 || cfg.Height <= 0 {
		return nil, fmt.Errorf("%w: declared size %dx%d", ErrCorruptImage, cfg.Width, cfg.Height)
	}
	if cfg.Width > MaxDimension || cfg.Height > MaxDimension || int64(cfg.Width)*int64(cfg.Height) > MaxPixels {
		return nil, fmt.Errorf("%w (declared size %dx%d)", ErrTooLarge, cfg.Width, cfg.Height)
	}
	img, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%w: decoding %s: %v", ErrCorruptImage, format, err)
	}
	return img, nil
}
