package domain

import (
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Avatar is an image or video a user uploaded (or one of the public
// catalog's). It has two ids: the primary avat_<ULID> and an integer, the
// spec's second form, allocated from a counter when it is created.
type Avatar struct {
	ID         string
	Number     int64
	UserID     string // CatalogOwner for the public catalog
	Name       string
	URL        string // public address of the stored media
	VoiceID    string // "" is null
	StorageKey string // object key in the media bucket: the spec's cloudinary_id
	MediaType  string // image/png, ..., video/mp4, video/webm
	IsFavorite bool
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// IsVideo reports a video avatar.
func (a Avatar) IsVideo() bool { return strings.HasPrefix(a.MediaType, "video/") }

// CatalogOwner owns the pre-built avatars every account may use. Their ids
// are path-like, under CatalogPrefix, e.g. "catalog/nasa/eileen-collins".
const (
	CatalogOwner  = "catalog"
	CatalogPrefix = "catalog/"
	AvatarPrefix  = "avat_"
)

// NewAvatarID returns a new primary avatar id.
func NewAvatarID() string { return NewID(AvatarPrefix) }

// ErrAvatarNotFound answers a missing avatar, or another tenant's.
var ErrAvatarNotFound = Errorf(NotFound, "Avatar not found")

// maxIDLength bounds every path id the API accepts: longer ids cannot exist,
// and DynamoDB refuses keys over 2 KB with an error that is not the caller's.
const maxIDLength = 128

// ParseAvatarRef tells which form of avatar id s is: a primary id
// (avat_..., or a catalog path) or an integer. A malformed id is reported as
// not found, the same answer a missing one gets.
func ParseAvatarRef(s string) (id string, number int64, err error) {
	return parseRef(s, AvatarPrefix, ErrAvatarNotFound, true)
}

func parseRef(s, prefix string, notFound error, catalog bool) (string, int64, error) {
	switch {
	case len(s) == 0 || len(s) > maxIDLength:
		return "", 0, notFound
	case strings.HasPrefix(s, prefix) && isIDChars(s[len(prefix):], false):
		return s, 0, nil
	case catalog && strings.HasPrefix(s, CatalogPrefix) && isIDChars(s[len(CatalogPrefix):], true):
		return s, 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || strconv.FormatInt(n, 10) != s {
		return "", 0, notFound
	}
	return "", n, nil
}

// isIDChars accepts the characters ids are made of: ULID/base32 letters and
// digits, and for catalog paths lower-case words separated by / - _.
func isIDChars(s string, path bool) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9', c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case path && (c == '/' || c == '-' || c == '_'):
		default:
			return false
		}
	}
	return !path || (!strings.Contains(s, "//") && !strings.HasSuffix(s, "/"))
}

// IsAvatarRef reports whether s names a stored avatar rather than an image
// (an https URL or a data URI).
func IsAvatarRef(s string) bool {
	return strings.HasPrefix(s, AvatarPrefix) || strings.HasPrefix(s, CatalogPrefix)
}

// Page asks for one page of a list.
type Page struct {
	Limit  int
	Cursor string
}

// Page sizes: the default page of the largest item kind stays far below
// Lambda's 6 MB response limit.
const (
	DefaultPageLimit = 50
	MaxPageLimit     = 200
)

// PlausibleID reports whether s could be a stored id at all; anything else
// is answered as not found without a database call (DynamoDB refuses empty
// and over-long keys with errors that are not the caller's to see).
func PlausibleID(s string) bool {
	return len(s) > 0 && len(s) <= maxIDLength && utf8.ValidString(s)
}
