package room

import (
	"testing"
	"time"
)

func TestPublishOnBehalfIsReadFromTheAvatarsToken(t *testing.T) {
	const key, secret = "devkey", "a-secret-of-at-least-32-characters!!"
	mint := func(attrs map[string]string) string {
		tok, err := AgentToken(key, secret, "room", AgentIdentity, attrs, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	plain, err := Token(key, secret, "room", AgentIdentity, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, token, want string
	}{
		{"names the agent", mint(map[string]string{PublishOnBehalfAttribute: "voice-agent", "other": "x"}), "voice-agent"},
		{"other attributes only", mint(map[string]string{"other": "x"}), ""},
		{"no attributes (service-minted)", plain, ""},
		{"not a JWT", "garbage", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := publishOnBehalf(tc.token); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
