package ratelimit

import (
	"context"
	"testing"
	"time"
)

// memCounter is an in-memory Counter for the window arithmetic; the DynamoDB
// counter itself is exercised by the API tests.
type memCounter map[string]int

func (m memCounter) Increment(_ context.Context, bucket string, _ time.Time) (int, error) {
	m[bucket]++
	return m[bucket], nil
}

func TestAllow(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 15, 0, time.UTC)
	l := New(memCounter{}, func() time.Time { return now })
	for i := 1; i <= 61; i++ {
		d, err := l.Allow(context.Background(), "key:a", Write)
		if err != nil {
			t.Fatal(err)
		}
		if want := i <= 60; d.Allowed != want {
			t.Fatalf("request %d: allowed %v, want %v", i, d.Allowed, want)
		}
		if d.Limit != 60 || d.Remaining != max(0, 60-i) || d.Reset != 45 {
			t.Fatalf("request %d: got %+v, want limit 60 remaining %d reset 45", i, d, max(0, 60-i))
		}
	}
	if d, _ := l.Allow(context.Background(), "key:b", Write); !d.Allowed {
		t.Error("another subject shares the quota")
	}
	if d, _ := l.Allow(context.Background(), "key:a", Read); !d.Allowed || d.Limit != 300 {
		t.Errorf("read quota: got %+v", d)
	}
	now = now.Add(45 * time.Second)
	if d, _ := l.Allow(context.Background(), "key:a", Write); !d.Allowed || d.Remaining != 59 {
		t.Errorf("next window: got %+v", d)
	}
}

// TestAllowWithin: a caller-chosen limit (a link's per-visitor starts)
// counts in its own bucket per class and subject.
func TestAllowWithin(t *testing.T) {
	now := time.Date(2026, 3, 1, 10, 0, 15, 0, time.UTC)
	l := New(memCounter{}, func() time.Time { return now })
	for i := 1; i <= 4; i++ {
		d, err := l.AllowWithin(context.Background(), "link:a#ip:1", LinkVisitor, 3)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := d.Allowed, i <= 3; got != want || d.Limit != 3 {
			t.Fatalf("request %d: got %+v, want allowed %v with limit 3", i, d, want)
		}
	}
	if d, _ := l.AllowWithin(context.Background(), "link:a#ip:2", LinkVisitor, 3); !d.Allowed {
		t.Error("another address shares the visitor's limit")
	}
	if d, _ := l.Allow(context.Background(), "link:a#ip:1", SessionStart); !d.Allowed || d.Limit != 150 {
		t.Errorf("the session-start class: got %+v, want its own bucket of 150", d)
	}
}
