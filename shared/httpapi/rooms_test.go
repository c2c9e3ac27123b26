package httpapi_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	protologger "github.com/livekit/protocol/logger"
	lksdk "github.com/livekit/server-sdk-go/v2"

	"avatarsvc/shared/app"
)

func TestInitiateRoom(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	lksdk.SetLogger(protologger.LogRLogger(logr.Discard()))

	res := call(t, "POST", "/v1/rooms/initiate", acct.LiveKey, map[string]any{"aspect_ratio": "4:3", "voice_id": "de"})
	if res.Status != 201 {
		t.Fatalf("initiate: %d %s", res.Status, res.Body)
	}
	m := res.JSON(t)
	name, _ := dig(m, "room", "name").(string)
	token, _ := dig(m, "room", "token").(string)
	if m["success"] != true || !strings.HasPrefix(name, "avatar-room-") || dig(m, "room", "url") != stack.LiveKit.URL || token == "" {
		t.Fatalf("answer: %v", m)
	}
	id := m["session_id"].(string)
	get := func() map[string]any {
		return dig(call(t, "GET", "/v1/sessions/"+id, acct.LiveKey, nil).JSON(t), "session").(map[string]any)
	}
	if s := get(); s["status"] != "created" {
		t.Fatalf("before anyone joined: status %v, want created", s["status"])
	}

	// The client joins with the returned token: LiveKit's participant_joined
	// webhook (signed, verified) starts the session.
	room, err := lksdk.ConnectToRoomWithToken(dig(m, "room", "url").(string), token, lksdk.NewRoomCallback())
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	waitStatus := func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			if get()["status"] == want {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("session status: got %v, want %s", get()["status"], want)
	}
	waitStatus("started")
	room.Disconnect()
	waitStatus("ended")
	if s := get(); s["end_reason"] != "participants_left" {
		t.Errorf("end_reason: got %v, want participants_left", s["end_reason"])
	}

	t.Run("unsigned webhooks are refused", func(t *testing.T) {
		res := call(t, "POST", "/v1/livekit/webhook", "", map[string]any{"event": "participant_joined", "room": map[string]any{"name": name}})
		if res.Status != 401 {
			t.Errorf("unsigned webhook: got %d, want 401 (%s)", res.Status, res.Body)
		}
	})
	t.Run("bad input", func(t *testing.T) {
		assertStructuredError(t, call(t, "POST", "/v1/rooms/initiate", acct.LiveKey, map[string]any{"aspect_ratio": "2:1"}), 400, `Invalid aspect_ratio "2:1"`)
		assertStructuredError(t, call(t, "POST", "/api/v1/rooms/initiate", acct.LiveKey, map[string]any{"avatar": "avat_missing"}), 404, "Avatar not found")
		assertStructuredError(t, call(t, "POST", "/v1/rooms/initiate", acct.LiveKey, map[string]any{"voice_id": "klingon"}), 400, `Unknown voice_id "klingon"`)
		assertStructuredError(t, call(t, "POST", "/v1/rooms/initiate", acct.LiveKey, map[string]any{"agent_id": "agnt_missing"}), 404, "Agent not found")
		assertStringError(t, call(t, "POST", "/v1/rooms/initiate", "", nil), 401, false, "API key required")
	})
	t.Run("no room platform configured", func(t *testing.T) {
		cfg := stack.App.Config
		cfg.LiveKitURL, cfg.LiveKitAPIKey, cfg.LiveKitAPISecret = "", "", ""
		a, err := app.New(context.Background(), cfg, stack.Clock.Now, slog.New(slog.NewJSONHandler(io.Discard, nil)))
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(a.Handler())
		defer srv.Close()
		old := stack.Server.URL
		stack.Server.URL = srv.URL
		defer func() { stack.Server.URL = old }()
		assertStructuredError(t, call(t, "POST", "/v1/rooms/initiate", acct.LiveKey, nil), 500, "Room platform is not configured on this server")
		agent := createAgent(t, acct.LiveKey, map[string]any{"name": "x", "avatar_id": "catalog/nasa/eileen-collins"})
		l := createLink(t, acct.LiveKey, map[string]any{"agent_id": agent["agent_id"]})
		assertStructuredError(t, startViaLink(t, l["link_id"].(string)), 500, "Room platform is not configured on this server")
	})
}

// TestListVoices: the voices a voice_id may name, the default first; each
// one is accepted where voice_id is set.
func TestListVoices(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	for _, path := range []string{"/v1/voices", "/api/v1/voices"} {
		res := call(t, "GET", path, acct.LiveKey, nil)
		if res.Status != 200 {
			t.Fatalf("GET %s: %d %s", path, res.Status, res.Body)
		}
		m := res.JSON(t)
		list, _ := m["voices"].([]any)
		if len(list) < 10 || dig(list[0], "voice_id") != m["default"] {
			t.Fatalf("GET %s: got %v, want the voices with the default first", path, m)
		}
	}
	if res := call(t, "GET", "/v1/voices", "", nil); res.Status != 401 {
		t.Errorf("without a key: got %d, want 401", res.Status)
	}
}
