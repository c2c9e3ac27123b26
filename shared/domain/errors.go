// Package domain holds the service's types and the rules that need no I/O:
// error codes, plans, the session state machine (statemachine.go), billing
// and the usage summary.
package domain

import (
	"errors"
	"fmt"
)

// Code classifies a failure. Services return codes; exactly one place
// (shared/httpapi/errors.go) turns them into HTTP statuses and body shapes.
type Code string

const (
	Invalid       Code = "invalid"        // the request is malformed or a value is out of range
	NotFound      Code = "not_found"      // missing, or owned by another tenant (answered the same)
	NotAllowed    Code = "not_allowed"    // a known path with a method it does not serve
	Conflict      Code = "conflict"       // the resource's state does not allow the operation
	Unauthorized  Code = "unauthorized"   // no, unknown or deactivated credentials
	Forbidden     Code = "forbidden"      // authenticated but not allowed
	LimitExceeded Code = "limit_exceeded" // a plan limit: concurrency, minutes, avatars
	TooLarge      Code = "too_large"      // a body or file over its size bound
	Unacceptable  Code = "unacceptable"   // an upload of the wrong type, or one moderation refused
	RateLimited   Code = "rate_limited"   // per-key request rate
	Unavailable   Code = "unavailable"    // a dependency is down; retrying later may work
	Internal      Code = "internal"       // a bug or an unexpected dependency answer
)

// Error is a failure a caller can act on: its Message is safe to show.
type Error struct {
	Code       Code
	Message    string
	Suggestion string
	Err        error // the underlying cause, logged but never shown
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an Error with a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithSuggestion returns a copy of e carrying a hint for the caller.
func (e *Error) WithSuggestion(s string) *Error {
	c := *e
	c.Suggestion = s
	return &c
}

// Wrap marks err as an internal failure with a safe message.
func Wrap(err error, message string) *Error {
	return &Error{Code: Internal, Message: message, Err: err}
}

// ErrorCode returns the code of err, Internal for errors that carry none.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

// ErrorMessage returns the caller-safe message of err and its suggestion.
func ErrorMessage(err error) (message, suggestion string) {
	var e *Error
	if errors.As(err, &e) {
		return e.Message, e.Suggestion
	}
	return "Internal server error", ""
}
