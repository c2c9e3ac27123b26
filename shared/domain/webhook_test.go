package domain

import (
	"strings"
	"testing"
	"time"
)

func TestValidateWebhookURL(t *testing.T) {
	for _, tc := range []struct {
		url      string
		loopback bool
		ok       bool
	}{
		{"https://hooks.example.com/avatar", false, true},
		{"https://hooks.example.com:8443/a?b=c", false, true},
		{"http://hooks.example.com/avatar", false, false},
		{"http://127.0.0.1:9000/hook", false, false},
		{"http://127.0.0.1:9000/hook", true, true},
		{"http://localhost:9000/hook", true, false}, // only the literal address, never a name
		{"https://user:pass@hooks.example.com/", false, false},
		{"https://hooks.example.com/#frag", false, false},
		{"https:///nohost", false, false},
		{"", false, false},
		{"https://" + strings.Repeat("a", 2050) + ".com", false, false},
	} {
		t.Run(tc.url, func(t *testing.T) {
			_, err := ValidateWebhookURL(tc.url, tc.loopback)
			if got := err == nil; got != tc.ok {
				t.Errorf("ValidateWebhookURL(%q, %v): got ok=%v (%v), want ok=%v", tc.url, tc.loopback, got, err, tc.ok)
			}
		})
	}
}

func TestValidateWebhookEvents(t *testing.T) {
	got, err := ValidateWebhookEvents([]string{"link.exhausted", "session.ended", "session.started"})
	if err != nil || strings.Join(got, ",") != "session.started,session.ended,link.exhausted" {
		t.Errorf("got %v, %v; want the documented order", got, err)
	}
	for _, bad := range [][]string{nil, {}, {"session.ended", "session.exploded"}} {
		if _, err := ValidateWebhookEvents(bad); err == nil {
			t.Errorf("ValidateWebhookEvents(%q): got no error", bad)
		}
	}
}

func TestWebhookShouldDisable(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name  string
		since time.Time
		want  bool
	}{
		{"never failed", time.Time{}, false},
		{"failing for an hour", now.Add(-time.Hour), false},
		{"failing for a day", now.Add(-WebhookDisableAfter), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (Webhook{FailingSince: tc.since}).ShouldDisable(now); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
