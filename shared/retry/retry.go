// Package retry runs optimistic-concurrency loops: re-read, decide, write
// with a condition, and try again when another writer got there first.
// Attempts back off exponentially with full jitter, so contenders spread
// out instead of colliding again, and the loop gives up inside a time
// budget well short of a Lambda's timeout.
package retry

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff bounds one loop.
type Backoff struct {
	Base   time.Duration // first wait's upper bound
	Max    time.Duration // cap on any one wait
	Budget time.Duration // total time after which the loop gives up
}

// Service is the policy of the API's service loops: a Lambda times out at
// 10 s; the loop stops after 4 s, leaving room for the SDK's own retries of
// the last call and for the response.
var Service = Backoff{Base: 10 * time.Millisecond, Max: 300 * time.Millisecond, Budget: 4 * time.Second}

// Do calls attempt until it reports done or fails, waiting between tries.
// It returns attempt's error, ctx's error, or exhausted=true when the
// budget ran out with attempt still asking to go again.
func (b Backoff) Do(ctx context.Context, attempt func(ctx context.Context) (again bool, err error)) (exhausted bool, err error) {
	deadline := time.Now().Add(b.Budget)
	wait := b.Base
	for {
		again, err := attempt(ctx)
		if err != nil || !again {
			return false, err
		}
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		d := time.Duration(rand.Int64N(int64(wait) + 1)) // full jitter
		if time.Now().Add(d).After(deadline) {
			return true, nil
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, b.Max)
	}
}
