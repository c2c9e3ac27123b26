// Package auth authenticates API keys.
package auth

import (
	"context"
	"crypto/subtle"

	"avatarsvc/shared/domain"
)

// KeyStore finds stored keys by hash.
type KeyStore interface {
	KeyByHash(ctx context.Context, hash string) (domain.APIKey, error)
}

// The three authentication failures the spec names, answered as 401 with a
// string error.
var (
	ErrKeyMissing     = domain.Errorf(domain.Unauthorized, "API key required")
	ErrKeyInvalid     = domain.Errorf(domain.Unauthorized, "Invalid API key")
	ErrKeyDeactivated = domain.Errorf(domain.Unauthorized, "API key has been deactivated")
)

// Authenticator checks x-api-key values.
type Authenticator struct {
	keys KeyStore
}

// New returns an Authenticator over keys.
func New(keys KeyStore) *Authenticator { return &Authenticator{keys: keys} }

// Authenticate returns the stored key for a presented one. Keys are looked up
// by their SHA-256, and the stored hash is compared in constant time.
func (a *Authenticator) Authenticate(ctx context.Context, presented string) (domain.APIKey, error) {
	if presented == "" {
		return domain.APIKey{}, ErrKeyMissing
	}
	mode := domain.KeyMode(presented)
	if mode == "" || len(presented) > 128 {
		return domain.APIKey{}, ErrKeyInvalid
	}
	hash := domain.HashSecret(presented)
	k, err := a.keys.KeyByHash(ctx, hash)
	if domain.ErrorCode(err) == domain.NotFound {
		return domain.APIKey{}, ErrKeyInvalid
	}
	if err != nil {
		return domain.APIKey{}, err
	}
	if subtle.ConstantTimeCompare([]byte(k.Hash), []byte(hash)) != 1 || k.Mode != mode {
		return domain.APIKey{}, ErrKeyInvalid
	}
	if !k.Active {
		return domain.APIKey{}, ErrKeyDeactivated
	}
	return k, nil
}
