// The store's sentinel errors, in one place. A conditional write or
// transaction whose condition no longer holds answers one of these; the
// caller re-reads and decides again. DynamoDB failures themselves are
// wrapped by unavailable (store.go).

package store

import (
	"errors"

	"avatarsvc/shared/domain"
)

// Errors a transaction reports when a condition it relied on no longer holds;
// the caller re-reads and decides again.
var (
	ErrSessionChanged = errors.New("session changed concurrently")
	ErrAccountLimit   = errors.New("account condition failed")
)

// ErrLinkChanged means the link no longer allowed the start (paused,
// expired or used up meanwhile): re-read it to say why.
var ErrLinkChanged = errors.New("link changed concurrently")

// ErrNotClaimable means a claim's condition failed: the session ended, its
// job is past its deadline, or a live worker already holds it.
var ErrNotClaimable = errors.New("session not claimable")

// ErrChanged means an item changed between the caller's read and its write.
var ErrChanged = errors.New("item changed concurrently")

// errBadCursor answers a page cursor that is not one this store handed out
// for the same owner and listing.
var errBadCursor = domain.Errorf(domain.Invalid, "Invalid cursor").
	WithSuggestion("Pass the next_cursor value of the previous page unchanged")
