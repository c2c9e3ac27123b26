// Package ratelimit enforces per-key request rates with fixed one-minute
// windows counted in DynamoDB, so every Lambda instance shares the count.
package ratelimit

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Class is a kind of request with its own quota.
type Class string

const (
	Read         Class = "read"          // GET
	Write        Class = "write"         // POST, PUT, DELETE
	SessionStart Class = "session_start" // the endpoints that start a session (see routes.go)
	// LinkVisitor is starts through one link from one client address; its
	// limit is the link's (AllowWithin), not in Limits.
	LinkVisitor Class = "link_visitor"
)

// Limits per key and window.
var Limits = map[Class]int{Read: 300, Write: 60, SessionStart: 150}

// Window is the length of a rate-limit window.
const Window = time.Minute

// Counter atomically increments a window's counter.
type Counter interface {
	Increment(ctx context.Context, bucket string, expires time.Time) (int, error)
}

// Limiter decides whether a request is within its quota.
type Limiter struct {
	counter Counter
	now     func() time.Time
}

// New returns a Limiter; now is the clock (injectable for tests).
func New(c Counter, now func() time.Time) *Limiter { return &Limiter{counter: c, now: now} }

// Decision is the outcome for one request, with what the headers report.
type Decision struct {
	Allowed   bool
	Limit     int
	Remaining int
	Reset     int // seconds until the window resets
}

// Allow counts one request by subject (a key hash, or an address for
// unauthenticated requests) against class.
func (l *Limiter) Allow(ctx context.Context, subject string, class Class) (Decision, error) {
	limit, ok := Limits[class]
	if !ok {
		return Decision{}, fmt.Errorf("unknown rate-limit class %q", class)
	}
	return l.AllowWithin(ctx, subject, class, limit)
}

// AllowWithin is Allow with a limit the caller chooses (a link's per-visitor
// starts); class names the bucket.
func (l *Limiter) AllowWithin(ctx context.Context, subject string, class Class, limit int) (Decision, error) {
	now := l.now()
	start := now.Truncate(Window)
	end := start.Add(Window)
	reset := int(math.Ceil(end.Sub(now).Seconds()))
	bucket := fmt.Sprintf("%s#%s#%d", subject, class, start.Unix())
	count, err := l.counter.Increment(ctx, bucket, end.Add(Window))
	if err != nil {
		return Decision{Allowed: true, Limit: limit, Remaining: limit, Reset: reset}, err
	}
	return Decision{Allowed: count <= limit, Limit: limit, Remaining: max(0, limit-count), Reset: max(1, reset)}, nil
}
