package domain

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// APIKey is a stored API key. The key itself is shown once and never stored:
// only its SHA-256.
type APIKey struct {
	Hash      string
	UserID    string
	Mode      string // "live" or "test"
	Prefix    string // the first characters, to tell keys apart in listings
	Name      string
	Active    bool
	CreatedAt time.Time
}

// Key modes and their prefixes.
const (
	ModeLive      = "live"
	ModeTest      = "test"
	liveKeyPrefix = "ak_live_"
	testKeyPrefix = "ak_test_"
)

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func randomToken(n int) string {
	buf := make([]byte, n)
	if _, err := rand.Read(buf); err != nil {
		panic("crypto/rand failed: " + err.Error()) // never happens on supported platforms
	}
	return strings.ToLower(b32.EncodeToString(buf))
}

// NewAPIKey makes a key of the given mode with 160 random bits. It returns
// the plaintext, to show once, and the record to store.
func NewAPIKey(userID, mode, name string, now time.Time) (string, APIKey, error) {
	var prefix string
	switch mode {
	case ModeLive:
		prefix = liveKeyPrefix
	case ModeTest:
		prefix = testKeyPrefix
	default:
		return "", APIKey{}, Errorf(Invalid, "Unknown key mode %q", mode).WithSuggestion("Use live or test")
	}
	plain := prefix + randomToken(20)
	return plain, APIKey{
		Hash: HashSecret(plain), UserID: userID, Mode: mode, Prefix: plain[:len(prefix)+4],
		Name: name, Active: true, CreatedAt: now.UTC(),
	}, nil
}

// KeyMode returns the mode a key's prefix claims, or "" for a malformed key.
func KeyMode(plain string) string {
	switch {
	case strings.HasPrefix(plain, liveKeyPrefix):
		return ModeLive
	case strings.HasPrefix(plain, testKeyPrefix):
		return ModeTest
	}
	return ""
}

// HashSecret is the stored form of a key or session token.
func HashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// NewSessionToken returns a session token (256 random bits) and its hash.
func NewSessionToken() (token, hash string) {
	token = "st_" + randomToken(32)
	return token, HashSecret(token)
}

// NewID returns a prefixed ULID: sortable by creation time, with 80 random
// bits from crypto/rand (ulid.Make would draw them from math/rand).
func NewID(prefix string) string {
	return prefix + ulid.MustNew(ulid.Now(), rand.Reader).String()
}

// NewUserID returns a new account id.
func NewUserID() string { return NewID("user_") }

// NewSessionID returns a new session id.
func NewSessionID() string { return NewID("sess_") }
