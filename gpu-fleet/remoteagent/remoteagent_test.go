package remoteagent

import "testing"

func TestEventKindString(t *testing.T) {
	tests := []struct {
		k    EventKind
		want string
	}{
		{AgentAudio, "AgentAudio"},
		{Interruption, "Interruption"},
		{UserTranscript, "UserTranscript"},
		{EventKind(99), "EventKind(99)"},
	}
	for _, tt := range tests {
		if got := tt.k.String(); got != tt.want {
			t.Errorf("got %q, want %q", got, tt.want)
		}
	}
}
