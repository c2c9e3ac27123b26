package livekit

import (
	"encoding/json"
	"testing"
)

// TestEventIsPerson: webhook participants as LiveKit encodes them
// (protojson: enum names, the standard kind omitted).
func TestEventIsPerson(t *testing.T) {
	tests := []struct {
		name, body string
		want       bool
	}{
		{"visitor", `{"event":"participant_left","participant":{"identity":"guest-1","sid":"PA_1"}}`, true},
		{"voice agent", `{"event":"participant_left","participant":{"identity":"agent-AJ_1","kind":"AGENT"}}`, false},
		{"our renderer", `{"event":"participant_left","participant":{"identity":"avatar-renderer","kind":"AGENT"}}`, false},
		{"egress", `{"event":"participant_joined","participant":{"identity":"EG_1","kind":"EGRESS"}}`, false},
		{"no participant", `{"event":"room_finished"}`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var ev Event
			if err := json.Unmarshal([]byte(tt.body), &ev); err != nil {
				t.Fatal(err)
			}
			if got := ev.IsPerson(); got != tt.want {
				t.Fatalf("IsPerson(%s): got %v, want %v", tt.body, got, tt.want)
			}
		})
	}
}
