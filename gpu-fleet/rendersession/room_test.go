package rendersession_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"

	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/conversation"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/rendersession"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/avatarimage"
	lkapi "avatarsvc/shared/livekit"
)

const (
	// liveness bounds how long a test waits for something that must happen;
	// it never asserts speed.
	liveness = 20 * time.Second
	// Mouth-region difference from the still image (mean |dY|, 0-255).
	// Idle life (sway, breathing) stays under restMax; an open mouth is
	// well above movingMin.
	restMax   = roomtest.MouthAtRest
	movingMin = roomtest.MouthMoving
)

func prepareAvatar(t *testing.T, aspect render.AspectRatio) *avatarimage.Prepared {
	return roomtest.Face(t, aspect)
}

func speechPCM(t *testing.T) []int16 { return roomtest.Speech(t) }

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewJSONHandler(io.Discard, nil))
}

func joinViewer(t *testing.T, lk *localstack.LiveKit, roomName string, av *avatarimage.Prepared) *roomtest.Viewer {
	t.Helper()
	token, err := lkapi.JoinToken(lk.APIKey, lk.APISecret, roomName, "viewer", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return roomtest.JoinViewer(t, lk.URL, token, av)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	roomtest.WaitFor(t, what, cond)
}

type stack struct {
	lk    *localstack.LiveKit
	audio *audiows.Server
	wsURL string
	log   *slog.Logger
	// onExpiring is given to the sessions it starts (Config.OnExpiring).
	onExpiring func(expiresAt time.Time, secondsLeft int)
}

func newStack(t *testing.T) *stack {
	lk := localstack.LiveKitT(t)
	log := testLogger(t)
	srv := audiows.NewServer(log, audiows.Limits{})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &stack{lk: lk, audio: srv, log: log, wsURL: "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws/"}
}

func (st *stack) start(t *testing.T, sessionID, roomName string, av *avatarimage.Prepared, rc room.Config) *rendersession.Session {
	t.Helper()
	return st.startTalking(t, sessionID, roomName, av, rc, nil)
}

// startTalking starts a session whose avatar has its own conversation
// (conv; nil for none).
func (st *stack) startTalking(t *testing.T, sessionID, roomName string, av *avatarimage.Prepared, rc room.Config, conv *conversation.Config) *rendersession.Session {
	t.Helper()
	if rc.Token == "" { // a test may bring the avatar's token
		token, err := lkapi.JoinToken(st.lk.APIKey, st.lk.APISecret, roomName, room.AgentIdentity, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		rc.Token = token
	}
	rc.URL = st.lk.URL
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	s, err := rendersession.Start(ctx, rendersession.Config{
		SessionID: sessionID,
		TokenHash: audiows.HashToken("tok-" + sessionID),
		Room:      rc,
		Renderer:  render.NewCPURenderer(av),
		Audio:     st.audio,
		Logger:    st.log,

		Conversation: conv,
		OnExpiring:   st.onExpiring,
	})
	if err != nil {
		t.Fatalf("rendersession.Start: %v", err)
	}
	t.Cleanup(func() { s.Stop(); s.Wait() })
	return s
}

func waitEnd(t *testing.T, s *rendersession.Session) room.EndReason {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(liveness):
		t.Fatal("session did not end")
	}
	reason, err := s.Wait()
	if err != nil {
		t.Fatalf("session error: %v", err)
	}
	return reason
}

func TestSessionInRealRoom(t *testing.T) {
	st := newStack(t)
	av := prepareAvatar(t, render.Square)
	speech := speechPCM(t)
	const sessionID, roomName = "sess_room1", "room-1"
	s := st.start(t, sessionID, roomName, av, room.Config{GracePeriod: time.Second})

	v := joinViewer(t, st.lk, roomName, av)
	waitFor(t, "first decoded frames", func() bool { n, _, _ := v.Counts(); return n >= 10 })

	t.Run("idle frames keep coming at about 25 fps with the mouth at rest", func(t *testing.T) {
		from := time.Now()
		time.Sleep(2 * time.Second)
		frames := v.FramesBetween(from, time.Now())
		// 50 expected; generous bounds, this is liveness, not speed.
		if len(frames) < 25 || len(frames) > 80 {
			t.Fatalf("frames in 2 s idle: got %d, want about 50", len(frames))
		}
		worst := 0.0
		for i, f := range frames {
			if f.Mouth < 0 || f.Mouth > restMax {
				t.Fatalf("idle frame %d mouth difference: got %.1f, want <= %.1f", i, f.Mouth, restMax)
			}
			worst = max(worst, f.Mouth)
		}
		t.Logf("idle: %d frames in 2 s, mouth difference at most %.1f", len(frames), worst)
		if w, h := v.Size(); w != 512 || h != 512 {
			t.Fatalf("decoded size: got %dx%d, want 512x512", w, h)
		}
	})

	ws := roomtest.DialWS(t, st.wsURL+sessionID, sessionID, "tok-"+sessionID)

	t.Run("speech moves the mouth and finishes after the last frame", func(t *testing.T) {
		clip := speech[:3*16000]
		_, _, loudBefore := v.Counts()
		for i := 0; i < len(clip); i += 3200 {
			ws.SendPCM(clip[i:min(i+3200, len(clip))])
		}
		ws.Send(map[string]any{"type": "agent.speak_end"})
		started := ws.Await(audiows.TypeSpeakStarted)
		ended := ws.Await(audiows.TypeSpeakEnded)
		if got := ended.Body["played_samples"]; got != float64(len(clip)) {
			t.Fatalf("played_samples: got %v, want %d", got, len(clip))
		}
		if ended.Body["interrupted"] != false {
			t.Fatalf("interrupted: got %v, want false", ended.Body["interrupted"])
		}
		// 3 s of audio is 75 frames: ended follows started by 74 frame
		// slots, less at most the backlog a late first frame can catch up.
		// Much earlier would mean "finished" was sent when the audio was
		// buffered rather than played.
		if played, least := ended.At.Sub(started.At), 74*rendersession.FrameDuration-rendersession.DefaultMaxBacklog; played < least {
			t.Fatalf("speak_started to speak_ended: got %v, want >= %v (the audio's length)", played, least)
		}
		moving := 0
		for _, f := range v.FramesBetween(started.At, ended.At) {
			if f.Mouth >= movingMin {
				moving++
			}
		}
		during := v.FramesBetween(started.At, ended.At)
		if moving < 15 {
			t.Fatalf("frames with the mouth open during 3 s of speech: got %d of %d, want >= 15", moving, len(during))
		}
		t.Logf("speech: %d of %d frames with the mouth open, started->ended %v", moving, len(during), ended.At.Sub(started.At))
		time.Sleep(time.Second)
		for i, f := range v.FramesBetween(ended.At.Add(500*time.Millisecond), time.Now()) {
			if f.Mouth > restMax {
				t.Fatalf("frame %d after speech ended: mouth difference %.1f, want <= %.1f", i, f.Mouth, restMax)
			}
		}
		_, _, loudAfter := v.Counts()
		if loudAfter-loudBefore < 50 {
			t.Fatalf("loud Opus packets received during speech: got %d, want >= 50 of 150", loudAfter-loudBefore)
		}
	})

	t.Run("interrupt puts the mouth at rest at once", func(t *testing.T) {
		clip := speech[3*16000 : 6*16000]
		ws.SendPCM(clip)
		started := ws.Await(audiows.TypeSpeakStarted)
		waitFor(t, "the mouth to open", func() bool {
			for _, f := range v.FramesBetween(started.At, time.Now()) {
				if f.Mouth >= movingMin {
					return true
				}
			}
			return false
		})
		ws.Send(map[string]any{"type": "agent.interrupt"})
		ws.Await(audiows.TypeInterruptConfirmed)
		ended := ws.Await(audiows.TypeSpeakEnded)
		if ended.Body["interrupted"] != true {
			t.Fatalf("speak_ended after interrupt: got %v, want interrupted", ended.Body)
		}
		// speak_ended(interrupted) is emitted once the first frame at rest
		// was written; allow that frame's delivery and decode, then every
		// frame must be at rest.
		time.Sleep(time.Second)
		frames := v.FramesBetween(ended.At.Add(2*rendersession.FrameDuration), time.Now())
		if len(frames) < 10 {
			t.Fatalf("frames after interrupt: got %d, want about 20", len(frames))
		}
		worst := 0.0
		for i, f := range frames {
			if f.Mouth > restMax {
				t.Fatalf("frame %d after interrupt: mouth difference %.1f, want <= %.1f", i, f.Mouth, restMax)
			}
			worst = max(worst, f.Mouth)
		}
		first := v.FramesBetween(ended.At, ended.At.Add(2*rendersession.FrameDuration))
		t.Logf("interrupt: %d frames after, mouth difference at most %.1f; frames right at the event: %v", len(frames), worst, first)
	})

	t.Run("session ends by itself when the viewer leaves", func(t *testing.T) {
		v.Room.Disconnect()
		if got := waitEnd(t, s); got != room.ParticipantsLeft {
			t.Fatalf("end reason: got %v, want %v", got, room.ParticipantsLeft)
		}
		ended := ws.Await(audiows.TypeSessionEnded)
		if got := ended.Body["reason"]; got != "participants_left" {
			t.Fatalf("session.ended reason: got %v, want participants_left", got)
		}
		stats := s.Stats()
		if stats.Frames == 0 || stats.SpeakingFrames < 75 {
			t.Fatalf("stats: got %+v, want frames with >= 75 speaking", stats)
		}
		t.Logf("stats: %+v", stats)
	})
}

func TestSessionEndReasons(t *testing.T) {
	st := newStack(t)
	av := prepareAvatar(t, render.Landscape)

	t.Run("nobody joins", func(t *testing.T) {
		s := st.start(t, "sess_nobody", "room-nobody", av, room.Config{JoinTimeout: time.Second})
		if got := waitEnd(t, s); got != room.NoParticipants {
			t.Fatalf("end reason: got %v, want %v", got, room.NoParticipants)
		}
	})

	t.Run("expired", func(t *testing.T) {
		s := st.start(t, "sess_expired", "room-expired", av, room.Config{ExpiresAt: time.Now().Add(time.Second)})
		if got := waitEnd(t, s); got != room.Expired {
			t.Fatalf("end reason: got %v, want %v", got, room.Expired)
		}
	})

	t.Run("extended", func(t *testing.T) {
		// No one joins here, so a long join timeout keeps the expiration
		// the only reason to end.
		began := time.Now()
		s := st.start(t, "sess_extended", "room-extended", av, room.Config{ExpiresAt: began.Add(2 * time.Second), JoinTimeout: time.Minute})
		s.Extend(began.Add(5 * time.Second))
		s.Extend(began.Add(3 * time.Second)) // an earlier time changes nothing
		if got := waitEnd(t, s); got != room.Expired {
			t.Fatalf("end reason: got %v, want %v", got, room.Expired)
		}
		if ran := time.Since(began); ran < 5*time.Second {
			t.Errorf("ended %v after the start, want at the extended expiration (5 s)", ran.Round(100*time.Millisecond))
		}
	})

	t.Run("stopped", func(t *testing.T) {
		s := st.start(t, "sess_stopped", "room-stopped", av, room.Config{})
		s.Stop()
		if got := waitEnd(t, s); got != room.Stopped {
			t.Fatalf("end reason: got %v, want %v", got, room.Stopped)
		}
		// Its WebSocket path is gone with it.
		ws, _, err := websocket.DefaultDialer.Dial(st.wsURL+"sess_stopped", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer ws.Close()
		ws.WriteJSON(map[string]any{"type": "session.init", "session_id": "sess_stopped", "session_token": "tok-sess_stopped"})
		var msg map[string]any
		ws.SetReadDeadline(time.Now().Add(liveness))
		if err := ws.ReadJSON(&msg); err != nil || msg["type"] != audiows.TypeError {
			t.Fatalf("init on an ended session: got %v (%v), want an error", msg, err)
		}
	})

	t.Run("room deleted through the server API", func(t *testing.T) {
		s := st.start(t, "sess_deleted", "room-deleted", av, room.Config{})
		rooms := lksdk.NewRoomServiceClient(strings.Replace(st.lk.URL, "ws://", "http://", 1), st.lk.APIKey, st.lk.APISecret)
		ctx, cancel := context.WithTimeout(context.Background(), liveness)
		defer cancel()
		if _, err := rooms.DeleteRoom(ctx, &livekit.DeleteRoomRequest{Room: "room-deleted"}); err != nil {
			t.Fatal(err)
		}
		if got := waitEnd(t, s); got != room.RoomClosed {
			t.Fatalf("end reason: got %v, want %v", got, room.RoomClosed)
		}
	})

	t.Run("avatar removed from the room", func(t *testing.T) {
		// A LiveKit voice agent may remove the avatar when it closes.
		s := st.start(t, "sess_removed", "room-removed", av, room.Config{})
		rooms := lksdk.NewRoomServiceClient(strings.Replace(st.lk.URL, "ws://", "http://", 1), st.lk.APIKey, st.lk.APISecret)
		ctx, cancel := context.WithTimeout(context.Background(), liveness)
		defer cancel()
		if _, err := rooms.RemoveParticipant(ctx, &livekit.RoomParticipantIdentity{Room: "room-removed", Identity: room.AgentIdentity}); err != nil {
			t.Fatal(err)
		}
		if got := waitEnd(t, s); got != room.Removed {
			t.Fatalf("end reason: got %v, want %v", got, room.Removed)
		}
	})

	t.Run("a second session with the same id is refused", func(t *testing.T) {
		st.start(t, "sess_dup", "room-dup", av, room.Config{})
		token, _ := lkapi.JoinToken(st.lk.APIKey, st.lk.APISecret, "room-dup2", room.AgentIdentity, time.Hour)
		_, err := rendersession.Start(context.Background(), rendersession.Config{
			SessionID: "sess_dup", Renderer: render.NewCPURenderer(av), Audio: st.audio,
			Room: room.Config{URL: st.lk.URL, Token: token}, Logger: st.log,
		})
		if !errors.Is(err, audiows.ErrDuplicateSession) {
			t.Fatalf("Start with a running session's id: got %v, want ErrDuplicateSession", err)
		}
	})
}

// Example of the ws_uri a worker hands out for a session.
func ExampleConfig() {
	fmt.Println("ws://127.0.0.1:8765/ws/" + "sess_01J0EXAMPLE")
	// Output: ws://127.0.0.1:8765/ws/sess_01J0EXAMPLE
}

// TestExpiryWarning: DefaultExpiryWarning before its expiration (8 s after
// the start here, time for the viewer and ws_uri client to arrive) the session
// tells ws_uri's client and the room, with the time left.
func TestExpiryWarning(t *testing.T) {
	st := newStack(t)
	av := prepareAvatar(t, render.Square)
	const sessionID, roomName = "sess_expiring", "room-expiring"
	expires := time.Now().Add(rendersession.DefaultExpiryWarning + 8*time.Second).Truncate(time.Second)
	told := make(chan int, 2) // what the worker would publish as the session.expiring webhook
	st.onExpiring = func(at time.Time, left int) {
		if at.Equal(expires) {
			told <- left
		}
	}
	st.start(t, sessionID, roomName, av, room.Config{ExpiresAt: expires})
	v := joinViewer(t, st.lk, roomName, av)
	ws := roomtest.DialWS(t, st.wsURL+sessionID, sessionID, "tok-"+sessionID)

	check := func(t *testing.T, m map[string]any) {
		t.Helper()
		left, _ := m["seconds_left"].(float64)
		if m["type"] != audiows.TypeSessionExpiring || m["expires_at"] != expires.UTC().Format(time.RFC3339) ||
			left < 55 || left > 60 {
			t.Errorf("got %v, want session.expiring at %s with about 60 seconds left", m, expires.UTC().Format(time.RFC3339))
		}
	}
	t.Run("ws_uri", func(t *testing.T) {
		check(t, ws.Await(audiows.TypeSessionExpiring).Body)
	})
	t.Run("room", func(t *testing.T) {
		waitFor(t, "the warning in the room", func() bool { return len(v.Data(rendersession.ExpiringTopic)) > 0 })
		var m map[string]any
		if err := json.Unmarshal(v.Data(rendersession.ExpiringTopic)[0], &m); err != nil {
			t.Fatal(err)
		}
		check(t, m)
	})
	t.Run("the webhook hook", func(t *testing.T) {
		select {
		case left := <-told:
			check(t, map[string]any{"type": audiows.TypeSessionExpiring, "expires_at": expires.UTC().Format(time.RFC3339), "seconds_left": float64(left)})
		case <-time.After(5 * time.Second):
			t.Fatal("OnExpiring was not called")
		}
		if len(told) > 0 {
			t.Errorf("OnExpiring called %d more times, want once", len(told))
		}
	})
}
