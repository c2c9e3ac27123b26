package livekit

import "testing"

// A visitor sees the reason's code, never the detail after it (an HTTP
// status, a host name), and nothing that is not a plain code.
func TestPublicEndReason(t *testing.T) {
	for _, tc := range []struct{ reason, want string }{
		{"avatar_unavailable: HTTP 404", "avatar_unavailable"},
		{"avatar_rejected: no face found", "avatar_rejected"},
		{"room_unreachable: room host 10.0.0.1 not allowed", "room_unreachable"},
		{"no_capacity", "no_capacity"},
		{"", "ended"},
		{"Weird <b>reason</b>", "ended"},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			if got := PublicEndReason(tc.reason); got != tc.want {
				t.Errorf("PublicEndReason(%q): got %q, want %q", tc.reason, got, tc.want)
			}
		})
	}
}
