package reaper

import (
	"testing"
	"time"

	"avatarsvc/shared/domain"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	started := func(mod func(*domain.Session)) domain.Session {
		s := domain.Session{ID: "sess_x", Status: domain.StatusStarted, StartedAt: now.Add(-time.Minute),
			Expiration: now.Add(time.Hour), JobDeadline: now.Add(time.Minute), JobEnqueuedAt: now.Add(-time.Minute)}
		if mod != nil {
			mod(&s)
		}
		return s
	}
	tests := []struct {
		name       string
		s          domain.Session
		wantAction Action
		wantReason string
	}{
		{"waiting for a worker", started(nil), Leave, ""},
		{"served with a live lease", started(func(s *domain.Session) {
			s.WorkerID, s.LeaseUntil, s.JobDeadline = "w1", now.Add(5*time.Second), now.Add(-time.Minute)
		}), Leave, ""},
		{"lease lapsed: worker lost", started(func(s *domain.Session) { s.WorkerID, s.LeaseUntil = "w1", now.Add(-time.Second) }), End, domain.ReasonWorkerLost},
		{"expiration passed", started(func(s *domain.Session) {
			s.WorkerID, s.LeaseUntil, s.Expiration = "w1", now.Add(5*time.Second), now.Add(-time.Second)
		}), End, domain.ReasonExpired},
		{"never claimed before the deadline", started(func(s *domain.Session) { s.JobDeadline = now.Add(-time.Second) }), End, domain.ReasonNoCapacity},
		{"send failed: re-send", started(func(s *domain.Session) { s.JobEnqueuedAt = time.Time{} }), Resend, ""},
		{"send failed just now: wait", started(func(s *domain.Session) {
			s.JobEnqueuedAt, s.StartedAt = time.Time{}, now.Add(-time.Second)
		}), Leave, ""},
		{"sends kept failing: give up", started(func(s *domain.Session) {
			s.JobEnqueuedAt, s.StartedAt, s.JobDeadline = time.Time{}, now.Add(-time.Hour), now.Add(time.Minute)
		}), End, domain.ReasonNoCapacity},
		{"ended sessions are left alone", domain.Session{Status: domain.StatusEnded, Expiration: now.Add(-time.Hour)}, Leave, ""},
		{"no expiration (unlimited plan)", started(func(s *domain.Session) {
			s.Expiration, s.WorkerID, s.LeaseUntil = time.Time{}, "w1", now.Add(time.Second)
		}), Leave, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			action, reason := DefaultPolicy.Decide(tt.s, now)
			if action != tt.wantAction || reason != tt.wantReason {
				t.Errorf("got %v %q, want %v %q", action, reason, tt.wantAction, tt.wantReason)
			}
		})
	}
}
