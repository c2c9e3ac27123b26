package room

import (
	"slices"
	"testing"
	"time"

	lkapi "avatarsvc/shared/livekit"
)

func TestPublishOnBehalfIsReadFromTheAvatarsToken(t *testing.T) {
	const key, secret = "devkey", "a-secret-of-at-least-32-characters!!"
	mint := func(attrs map[string]string) string {
		tok, err := lkapi.AgentToken(key, secret, "room", AgentIdentity, attrs, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	plain, err := lkapi.JoinToken(key, secret, "room", AgentIdentity, time.Hour)
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

func TestSenderOrderKeepsEachSendersStreamsInOrder(t *testing.T) {
	o := newSenderOrder()
	var got []string
	a0, a1, b0 := o.take("a"), o.take("a"), o.take("b")
	done := make(chan struct{})
	go func() {
		// a's second stream was decided first: it waits for a's first.
		o.inTurn("a", a1, func() { got = append(got, "a1") })
		close(done)
	}()
	// Another sender never waits on a's streams (this would deadlock).
	o.inTurn("b", b0, func() { got = append(got, "b0") })
	o.inTurn("a", a0, func() { got = append(got, "a0") })
	<-done
	if want := []string{"b0", "a0", "a1"}; !slices.Equal(got, want) {
		t.Errorf("order: got %v, want %v", got, want)
	}
	if len(o.queues) != 0 {
		t.Errorf("queues kept after every turn: got %d, want 0", len(o.queues))
	}
}
