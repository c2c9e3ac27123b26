package worker_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/gpu-fleet/worker"
	"avatarsvc/scripts/stacktest"
	"avatarsvc/shared/domain"
)

// TestLinkSessionBillsOnlyWhenSomeoneCame: a link session nobody joins
// (a script that started it and left) ends no_show soon after the renderer
// joined, billed 0, with the owner's slot and reservation back; one a
// visitor joins bills from the visitor's arrival.
func TestLinkSessionBillsOnlyWhenSomeoneCame(t *testing.T) {
	stacktest.SkipShort(t)
	startWorker(t, nil)
	acct, err := stack.NewAccount(context.Background(), "pro")
	if err != nil {
		t.Fatal(err)
	}
	code, m := api(t, "POST", "/v1/agents", acct.LiveKey, map[string]any{"name": "Greeter", "avatar_id": "catalog/nasa/eileen-collins"})
	if code != http.StatusCreated {
		t.Fatalf("create agent: %d %v", code, m)
	}
	code, m = api(t, "POST", "/v1/links", acct.LiveKey, map[string]any{"agent_id": m["agent"].(map[string]any)["agent_id"]})
	if code != http.StatusCreated {
		t.Fatalf("create link: %d %v", code, m)
	}
	_, linkID, _ := strings.Cut(m["link"].(map[string]any)["url"].(string), "#")
	startLink := func(t *testing.T) (session, map[string]any) {
		code, started := api(t, "POST", "/v1/links/start-session", "", map[string]any{"link_id": linkID, "aspect_ratio": "1:1"})
		if code != http.StatusOK {
			t.Fatalf("start via link: %d %v", code, started)
		}
		return session{id: started["session_id"].(string), key: acct.LiveKey, user: acct.User.ID}, started
	}

	t.Run("nobody joins", func(t *testing.T) {
		began := time.Now()
		s, _ := startLink(t)
		ended := s.awaitEnded(t)
		t.Logf("link start to no_show: %v (the renderer waits %v for a person)", time.Since(began), worker.NoShowTimeout)
		if ended["end_reason"] != domain.ReasonNoShow || minutesConsumed(t, ended) != 0 {
			t.Errorf("got %v %v, want no_show billed 0", ended["end_reason"], ended["billing"])
		}
		if u := account(t, acct.User.ID); u.ActiveSessions != 0 || u.ReservedMinutes != 0 || u.IncludedUsed != 0 {
			t.Errorf("account: active %d, reserved %d, used %d; want 0, 0, 0", u.ActiveSessions, u.ReservedMinutes, u.IncludedUsed)
		}
	})

	t.Run("a visitor joins", func(t *testing.T) {
		s, started := startLink(t)
		v := roomtest.JoinViewer(t, started["rtc_url"].(string), started["participant_token"].(string), preparedFace(t))
		waitFor(t, "the avatar in the room", func() bool { return avatarPresent(v) })
		var got domain.Session
		waitFor(t, "the visitor's arrival on the session", func() bool {
			got, _ = stack.App.Store.GetSession(context.Background(), acct.User.ID, s.id)
			return !got.PersonJoinedAt.IsZero()
		})
		if got.PersonJoinedAt.Before(got.StartedAt) {
			t.Errorf("first person at %v, before the start %v", got.PersonJoinedAt, got.StartedAt)
		}
		v.Room.Disconnect()
		ended := s.awaitEnded(t)
		if ended["end_reason"] != domain.ReasonParticipantsLeft || minutesConsumed(t, ended) != 1 {
			t.Errorf("got %v %v, want participants_left billed 1 minute", ended["end_reason"], ended["billing"])
		}
	})
}
