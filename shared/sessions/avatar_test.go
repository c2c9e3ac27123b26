package sessions

import (
	"bytes"
	"encoding/base64"
	"image"
	"image/png"
	"testing"

	"avatarsvc/shared/domain"
)

func pngOf(w, h int) string {
	var buf bytes.Buffer
	_ = png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h)))
	return base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestParseAvatar(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		code domain.Code // "" means accepted
	}{
		{"https URL", "https://cdn.example.com/a.png", ""},
		{"data URI png", "data:image/png;base64," + pngOf(128, 128), ""},
		{"jpg alias checked against content", "data:image/jpg;base64," + pngOf(128, 128), domain.Invalid},
		{"unpadded base64", "data:image/png;base64," + base64.RawStdEncoding.EncodeToString(mustDecode(pngOf(100, 100))), ""},
		{"http URL", "http://cdn.example.com/a.png", domain.Invalid},
		{"https without host", "https:///a.png", domain.Invalid},
		{"svg", "data:image/svg+xml;base64,PHN2Zz4=", domain.Invalid},
		{"tiny image", "data:image/png;base64," + pngOf(10, 10), domain.Invalid},
		{"huge declared dimensions", "data:image/png;base64," + pngOf(5000, 10), domain.Invalid},
		{"plain text", "hello", domain.Invalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseAvatar(tc.in)
			if got := codeOf(err); got != tc.code {
				t.Errorf("got %q (%v), want %q", got, err, tc.code)
			}
		})
	}
}

func mustDecode(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func codeOf(err error) domain.Code {
	if err == nil {
		return ""
	}
	return domain.ErrorCode(err)
}
