package room

import (
	"testing"
	"time"

	lksdk "github.com/livekit/server-sdk-go/v2"
)

func TestPresence(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	type obs struct {
		at           time.Duration
		others       int
		reconnecting bool
		want         EndReason
	}
	tests := []struct {
		name      string
		expiresIn time.Duration // 0: never
		steps     []obs
	}{
		{
			name: "nobody joins within the join timeout",
			steps: []obs{
				{at: 0, want: NotEnded},
				{at: 29 * time.Second, want: NotEnded},
				{at: 30 * time.Second, want: NoParticipants},
			},
		},
		{
			name: "viewer leaves and stays away for the grace period",
			steps: []obs{
				{at: time.Second, others: 1, want: NotEnded},
				{at: 40 * time.Second, others: 1, want: NotEnded}, // past join timeout, someone is here
				{at: 41 * time.Second, others: 0, want: NotEnded},
				{at: 50 * time.Second, others: 0, want: NotEnded},
				{at: 51 * time.Second, others: 0, want: ParticipantsLeft},
			},
		},
		{
			name: "viewer comes back within the grace period",
			steps: []obs{
				{at: time.Second, others: 1, want: NotEnded},
				{at: 2 * time.Second, others: 0, want: NotEnded},
				{at: 11 * time.Second, others: 1, want: NotEnded},
				{at: 12 * time.Second, others: 0, want: NotEnded},
				{at: 21 * time.Second, others: 0, want: NotEnded},
				{at: 22 * time.Second, others: 0, want: ParticipantsLeft},
			},
		},
		{
			name: "an empty list while reconnecting does not count as leaving",
			steps: []obs{
				{at: time.Second, others: 1, want: NotEnded},
				{at: 2 * time.Second, others: 0, reconnecting: true, want: NotEnded},
				{at: 20 * time.Second, others: 0, reconnecting: true, want: NotEnded},
				{at: 21 * time.Second, others: 1, want: NotEnded},
			},
		},
		{
			name: "grace restarts after a reconnect",
			steps: []obs{
				{at: time.Second, others: 1, want: NotEnded},
				{at: 2 * time.Second, others: 0, want: NotEnded},
				{at: 8 * time.Second, others: 0, reconnecting: true, want: NotEnded},
				{at: 15 * time.Second, others: 0, want: NotEnded},
				{at: 18 * time.Second, others: 0, want: ParticipantsLeft},
			},
		},
		{
			name:      "expiration wins over presence",
			expiresIn: 5 * time.Second,
			steps: []obs{
				{at: time.Second, others: 1, want: NotEnded},
				{at: 5 * time.Second, others: 1, want: Expired},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var expires time.Time
			if tt.expiresIn > 0 {
				expires = at(tt.expiresIn)
			}
			p := newPresence(t0, 10*time.Second, 30*time.Second, expires)
			for i, s := range tt.steps {
				if got := p.observe(at(s.at), s.others, s.reconnecting); got != s.want {
					t.Fatalf("step %d (t=%v others=%d reconnecting=%v): got %v, want %v",
						i, s.at, s.others, s.reconnecting, got, s.want)
				}
			}
		})
	}
}

func TestEndReasonForDisconnect(t *testing.T) {
	tests := []struct {
		reason lksdk.DisconnectionReason
		want   EndReason
	}{
		{lksdk.Failed, RoomError},
		{lksdk.DuplicateIdentity, RoomError},
		{lksdk.RoomClosed, RoomClosed},
		{lksdk.ParticipantRemoved, Removed},
		{lksdk.OtherReason, RoomClosed}, // room deleted through the API
	}
	for _, tt := range tests {
		t.Run(string(tt.reason), func(t *testing.T) {
			if got := endReasonFor(tt.reason); got != tt.want {
				t.Fatalf("endReasonFor(%q): got %v, want %v", tt.reason, got, tt.want)
			}
		})
	}
}
