package sessions

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"image"
	_ "image/gif" // formats an avatar data URI may carry
	_ "image/jpeg"
	_ "image/png"
	"net/url"
	"strings"

	_ "golang.org/x/image/webp"

	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/domain"
)

// Bounds on avatars given inline. The whole request must fit a Lambda
// payload (6 MB), so a data URI's image is capped at 4 MiB; its dimensions
// are the renderer's (avatarimage.MaxDimension).
const (
	MaxAvatarBytes     = 4 << 20
	maxAvatarURLLength = 2048
)

const avatarFormats = "Pass an avat_... id, a catalog avatar id, an https:// image URL or a base64 data URI such as data:image/png;base64,iVBOR... (PNG, JPEG, GIF or WebP)"

// Avatar is a validated avatar value from a request.
type Avatar struct {
	URL       string // set for https URLs
	Data      []byte // set for data URIs
	MediaType string // image/png, image/jpeg, image/gif, image/webp
}

func invalidAvatar(why string) error {
	return domain.Errorf(domain.Invalid, "Invalid avatar format").WithSuggestion(why + avatarFormats)
}

// ParseAvatar accepts an https URL or a data:image/...;base64 URI. A data
// URI's image header is read to check its type and dimensions before anything
// is decoded in full.
func ParseAvatar(v string) (Avatar, error) {
	switch {
	case strings.HasPrefix(v, "https://"):
		u, err := url.Parse(v)
		if err != nil || u.Host == "" || len(v) > maxAvatarURLLength {
			return Avatar{}, invalidAvatar("The URL is not a valid https address. ")
		}
		return Avatar{URL: v}, nil
	case strings.HasPrefix(v, "data:image/"):
		return parseDataURI(v)
	}
	return Avatar{}, invalidAvatar("")
}

func parseDataURI(v string) (Avatar, error) {
	meta, payload, ok := strings.Cut(strings.TrimPrefix(v, "data:"), ",")
	if !ok || !strings.HasSuffix(meta, ";base64") {
		return Avatar{}, invalidAvatar("The data URI must be base64-encoded. ")
	}
	mediaType := strings.TrimSuffix(meta, ";base64")
	if i := strings.IndexByte(mediaType, ';'); i >= 0 { // drop parameters such as ;charset
		mediaType = mediaType[:i]
	}
	if mediaType == "image/jpg" {
		mediaType = "image/jpeg"
	}
	switch mediaType {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
	default:
		return Avatar{}, invalidAvatar("The image type " + mediaType + " is not supported. ")
	}
	if base64.StdEncoding.DecodedLen(len(payload)) > MaxAvatarBytes+3 {
		return Avatar{}, domain.Errorf(domain.TooLarge, "Invalid avatar format").
			WithSuggestion("The image is too large: inline data:image/... URIs are limited to 4 MiB; host larger images and pass an https:// URL")
	}
	data, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		data, err = base64.RawStdEncoding.DecodeString(payload)
	}
	if err != nil {
		return Avatar{}, invalidAvatar("The base64 payload could not be decoded. ")
	}
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil || "image/"+format != mediaType {
		return Avatar{}, invalidAvatar("The data is not a readable " + mediaType + " image. ")
	}
	if cfg.Width > avatarimage.MaxDimension || cfg.Height > avatarimage.MaxDimension || cfg.Width < 64 || cfg.Height < 64 {
		return Avatar{}, domain.Errorf(domain.Invalid, "Invalid avatar format").
			WithSuggestion(fmt.Sprintf("The image's dimensions are out of range: use an image between 64x64 and %dx%d pixels", avatarimage.MaxDimension, avatarimage.MaxDimension))
	}
	return Avatar{Data: data, MediaType: mediaType}, nil
}
