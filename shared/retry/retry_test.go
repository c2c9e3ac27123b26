package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDo(t *testing.T) {
	boom := errors.New("boom")
	tests := []struct {
		name          string
		againFor      int // attempts that ask to go again before succeeding
		fail          error
		budget        time.Duration
		wantExhausted bool
		wantErr       error
		wantAttempts  int
	}{
		{name: "first try", againFor: 0, budget: time.Second, wantAttempts: 1},
		{name: "after conflicts", againFor: 3, budget: time.Second, wantAttempts: 4},
		{name: "error stops", fail: boom, budget: time.Second, wantErr: boom, wantAttempts: 1},
		{name: "budget runs out", againFor: 1 << 30, budget: 30 * time.Millisecond, wantExhausted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Backoff{Base: time.Millisecond, Max: 4 * time.Millisecond, Budget: tt.budget}
			n := 0
			exhausted, err := b.Do(context.Background(), func(context.Context) (bool, error) {
				n++
				if tt.fail != nil {
					return false, tt.fail
				}
				return n <= tt.againFor, nil
			})
			if exhausted != tt.wantExhausted || !errors.Is(err, tt.wantErr) {
				t.Fatalf("got exhausted=%v err=%v, want %v %v", exhausted, err, tt.wantExhausted, tt.wantErr)
			}
			if tt.wantAttempts > 0 && n != tt.wantAttempts {
				t.Errorf("attempts: got %d, want %d", n, tt.wantAttempts)
			}
			if tt.wantExhausted && n < 2 {
				t.Errorf("attempts before giving up: got %d, want several", n)
			}
		})
	}
}

func TestDoStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := Backoff{Base: time.Second, Max: time.Second, Budget: time.Minute}
	_, err := b.Do(ctx, func(context.Context) (bool, error) { return true, nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}
