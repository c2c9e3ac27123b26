package main

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	t.Setenv("LIVEKIT_URL", "")
	t.Setenv("AVATAR_ROOM_TOKEN", "")
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no url", []string{"-token", "t", "-avatar", "a.png"}, "-url is required"},
		{"no credentials", []string{"-url", "ws://x", "-avatar", "a.png"}, "give -token"},
		{"key without room", []string{"-url", "ws://x", "-api-key", "k", "-api-secret", "s", "-avatar", "a.png"}, "give -token"},
		{"no avatar", []string{"-url", "ws://x", "-token", "t"}, "-avatar is required"},
		{"token", []string{"-url", "ws://x", "-token", "t", "-avatar", "a.png"}, ""},
		{"minted token", []string{"-url", "ws://x", "-api-key", "k", "-api-secret", "s", "-room", "r", "-avatar", "a.png"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parse(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parse error: got %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parse: got %v, want nil", err)
			}
			if !strings.HasPrefix(o.sessionID, "sess_") || len(o.sessionToken) != 32 {
				t.Fatalf("defaults: got session id %q token %q, want sess_... and 128 random bits in hex", o.sessionID, o.sessionToken)
			}
			if o.listen != "127.0.0.1:8765" {
				t.Fatalf("listen: got %q, want 127.0.0.1:8765", o.listen)
			}
		})
	}
}
