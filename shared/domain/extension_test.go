package domain

import (
	"testing"
	"time"
)

func TestUserExtension(t *testing.T) {
	now := time.Date(2026, 11, 10, 12, 0, 0, 0, time.UTC)
	started := Session{Status: StatusStarted, StartedAt: now.Add(-10 * time.Minute), Expiration: now.Add(10 * time.Minute)} // 20 of 30 minutes
	explorer := User{PlanKey: "explorer"}                                                                                   // 30-minute sessions, 300 minutes
	for _, tc := range []struct {
		name    string
		user    User
		sess    Session
		want    int
		granted int
		err     string
	}{
		{"within the cap", explorer, started, 5, 5, ""},
		{"up to the cap", explorer, started, 60, 10, ""},
		{"at the cap", explorer, Session{Status: StatusStarted, StartedAt: now, Expiration: now.Add(30 * time.Minute)}, 1, 0, "Session length limit reached"},
		{"no unreserved minutes", User{PlanKey: "explorer", ReservedMinutes: 300}, started, 5, 0, "No minutes remaining"},
		{"fewer unreserved minutes than asked", User{PlanKey: "explorer", ReservedMinutes: 297}, started, 5, 3, ""},
		{"too many", explorer, started, 61, 0, "minutes must be a whole number from 1 to 60"},
		{"ended", explorer, Session{Status: StatusEnded}, 5, 0, "Cannot extend an ended session"},
		{"never started", explorer, Session{Status: StatusCreated}, 5, 0, "Cannot extend a session that was never started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.user.Extension(now, tc.sess, tc.want)
			msg := ""
			if e, ok := err.(*Error); ok {
				msg = e.Message
			} else if err != nil {
				msg = err.Error()
			}
			if got != tc.granted || msg != tc.err {
				t.Errorf("got %d, %q; want %d, %q", got, msg, tc.granted, tc.err)
			}
		})
	}
}
