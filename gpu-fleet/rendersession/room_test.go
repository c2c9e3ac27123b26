package rendersession_test

import (
	"avatarsvc/gpu-fleet/testfiles"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/samplebuilder"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/avatar"
	"avatarsvc/gpu-fleet/encode/opus"
	"avatarsvc/gpu-fleet/encode/vp8"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/rendersession"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/scripts/localstack"
)

const (
	// liveness bounds how long a test waits for something that must happen;
	// it never asserts speed.
	liveness = 20 * time.Second
	// Mouth-region difference from the still image (mean |dY|, 0-255).
	// Idle life (sway, breathing) stays under restMax; an open mouth is
	// well above movingMin.
	restMax   = 16.0
	movingMin = 22.0
)

func prepareAvatar(t *testing.T, aspect render.AspectRatio) *avatar.Prepared {
	t.Helper()
	f, err := os.Open(testfiles.Path(testfiles.FacePNG))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := avatar.Decode(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, h, err := render.Dimensions(aspect)
	if err != nil {
		t.Fatal(err)
	}
	av, err := avatar.Prepare(img, w, h)
	if err != nil {
		t.Fatal(err)
	}
	return av
}

func speechPCM(t *testing.T) []int16 {
	t.Helper()
	f, err := os.Open(testfiles.Path(testfiles.Speech16k))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pcm, rate, err := audio.ReadWAV(f)
	if err != nil {
		t.Fatal(err)
	}
	if rate != 16000 {
		t.Fatalf("speech-16k.wav rate: got %d, want 16000", rate)
	}
	return pcm
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewJSONHandler(io.Discard, nil))
}

// viewedFrame is one decoded video frame as a viewer saw it.
type viewedFrame struct {
	at    time.Time
	mouth float64 // mean |Y - still image| over the mouth rectangle
}

// viewer is a real participant that subscribes to the avatar, depacketizes
// and decodes its VP8 and Opus, and measures the mouth in every frame.
type viewer struct {
	t     *testing.T
	room  *lksdk.Room
	rest  *render.Frame
	mouth image.Rectangle

	mu          sync.Mutex
	frames      []viewedFrame
	audioPkts   int
	loudPkts    int
	decodeFails int
	width       int
	height      int
}

func joinViewer(t *testing.T, lk *localstack.LiveKit, roomName string, av *avatar.Prepared) *viewer {
	t.Helper()
	rest := render.NewFrame(av.Image.Rect.Dx(), av.Image.Rect.Dy())
	render.RGBAToI420(av.Image, rest)
	v := &viewer{t: t, rest: rest, mouth: av.Mouth}
	cb := lksdk.NewRoomCallback()
	cb.OnTrackSubscribed = func(track *webrtc.TrackRemote, _ *lksdk.RemoteTrackPublication, rp *lksdk.RemoteParticipant) {
		if rp.Identity() != room.AgentIdentity {
			return
		}
		switch track.Kind() {
		case webrtc.RTPCodecTypeVideo:
			go v.readVideo(track)
		case webrtc.RTPCodecTypeAudio:
			go v.readAudio(track)
		}
	}
	token, err := room.Token(lk.APIKey, lk.APISecret, roomName, "viewer", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	lkr, err := lksdk.ConnectToRoomWithToken(lk.URL, token, cb)
	if err != nil {
		t.Fatalf("viewer join: %v", err)
	}
	v.room = lkr
	return v
}

func (v *viewer) readVideo(track *webrtc.TrackRemote) {
	sb := samplebuilder.New(128, &codecs.VP8Packet{}, 90000)
	dec, err := vp8.NewDecoder()
	if err != nil {
		panic(err)
	}
	defer dec.Close()
	for {
		pkt, _, err := track.ReadRTP()
		if err != nil {
			return
		}
		sb.Push(pkt)
		for s := sb.Pop(); s != nil; s = sb.Pop() {
			frame, err := dec.Decode(s.Data)
			now := time.Now()
			v.mu.Lock()
			if err != nil || frame == nil {
				v.decodeFails++ // frames before the first keyframe
			} else {
				v.width, v.height = frame.Width, frame.Height
				v.frames = append(v.frames, viewedFrame{at: now, mouth: v.mouthDiff(frame)})
			}
			v.mu.Unlock()
		}
	}
}

func (v *viewer) mouthDiff(f *render.Frame) float64 {
	if f.Width != v.rest.Width || f.Height != v.rest.Height {
		return -1
	}
	sum, n := 0, 0
	for y := v.mouth.Min.Y; y < v.mouth.Max.Y; y++ {
		for x := v.mouth.Min.X; x < v.mouth.Max.X; x++ {
			d := int(f.Y[y*f.Width+x]) - int(v.rest.Y[y*f.Width+x])
			sum += max(d, -d)
			n++
		}
	}
	return float64(sum) / float64(n)
}

func (v *viewer) readAudio(track *webrtc.TrackRemote) {
	dec, err := opus.NewDecoder(48000, 1)
	if err != nil {
		panic(err)
	}
	defer dec.Close()
	for {
		pkt, _, err := track.ReadRTP()
		if err != nil {
			return
		}
		pcm, err := dec.Decode(pkt.Payload)
		peak := 0
		for _, s := range pcm {
			peak = max(peak, int(s), -int(s))
		}
		v.mu.Lock()
		v.audioPkts++
		if err == nil && peak > 2000 {
			v.loudPkts++
		}
		v.mu.Unlock()
	}
}

func (v *viewer) framesBetween(from, to time.Time) []viewedFrame {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []viewedFrame
	for _, f := range v.frames {
		if !f.at.Before(from) && f.at.Before(to) {
			out = append(out, f)
		}
	}
	return out
}

func (v *viewer) counts() (frames, audioPkts, loudPkts int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.frames), v.audioPkts, v.loudPkts
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// wsClient is the ws_uri client: it collects server messages with the time
// they arrived.
type wsClient struct {
	t    *testing.T
	ws   *websocket.Conn
	msgs chan wsMsg
}

type wsMsg struct {
	at   time.Time
	body map[string]any
}

func (m wsMsg) typ() string { s, _ := m.body["type"].(string); return s }

func dialWS(t *testing.T, url, sessionID, token string) *wsClient {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	c := &wsClient{t: t, ws: ws, msgs: make(chan wsMsg, 4096)}
	go func() {
		defer close(c.msgs)
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			m := wsMsg{at: time.Now()}
			if json.Unmarshal(data, &m.body) != nil {
				panic("invalid JSON from server: " + string(data))
			}
			c.msgs <- m
		}
	}()
	c.send(map[string]any{"type": "session.init", "session_id": sessionID, "session_token": token})
	c.await(audiows.TypeConnectionEstablished)
	return c
}

func (c *wsClient) send(v any) {
	c.t.Helper()
	if err := c.ws.WriteJSON(v); err != nil {
		c.t.Fatal(err)
	}
}

func (c *wsClient) sendPCM(pcm []int16) {
	c.t.Helper()
	b := make([]byte, 2*len(pcm))
	for i, s := range pcm {
		b[2*i], b[2*i+1] = byte(s), byte(uint16(s)>>8)
	}
	if err := c.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		c.t.Fatal(err)
	}
}

// await skips confirmations until a message of type typ arrives; an error
// message fails the test.
func (c *wsClient) await(typ string) wsMsg {
	c.t.Helper()
	timeout := time.After(liveness)
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				c.t.Fatalf("websocket closed while waiting for %s", typ)
			}
			if m.typ() == typ {
				return m
			}
			if m.typ() == audiows.TypeError {
				c.t.Fatalf("server error while waiting for %s: %v", typ, m.body)
			}
		case <-timeout:
			c.t.Fatalf("no %s from server", typ)
		}
	}
}

type stack struct {
	lk    *localstack.LiveKit
	audio *audiows.Server
	wsURL string
	log   *slog.Logger
}

func newStack(t *testing.T) *stack {
	lk := localstack.LiveKitT(t)
	log := testLogger(t)
	srv := audiows.NewServer(log, audiows.Limits{})
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return &stack{lk: lk, audio: srv, log: log, wsURL: "ws" + strings.TrimPrefix(hs.URL, "http") + "/ws/"}
}

func (st *stack) start(t *testing.T, sessionID, roomName string, av *avatar.Prepared, rc room.Config) *rendersession.Session {
	t.Helper()
	token, err := room.Token(st.lk.APIKey, st.lk.APISecret, roomName, room.AgentIdentity, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rc.URL, rc.Token = st.lk.URL, token
	ctx, cancel := context.WithTimeout(context.Background(), liveness)
	defer cancel()
	s, err := rendersession.Start(ctx, rendersession.Config{
		SessionID: sessionID,
		TokenHash: audiows.HashToken("tok-" + sessionID),
		Room:      rc,
		Renderer:  render.NewCPURenderer(av),
		Audio:     st.audio,
		Logger:    st.log,
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
	waitFor(t, "first decoded frames", func() bool { n, _, _ := v.counts(); return n >= 10 })

	t.Run("idle frames keep coming at about 25 fps with the mouth at rest", func(t *testing.T) {
		from := time.Now()
		time.Sleep(2 * time.Second)
		frames := v.framesBetween(from, time.Now())
		// 50 expected; generous bounds, this is liveness, not speed.
		if len(frames) < 25 || len(frames) > 80 {
			t.Fatalf("frames in 2 s idle: got %d, want about 50", len(frames))
		}
		worst := 0.0
		for i, f := range frames {
			if f.mouth < 0 || f.mouth > restMax {
				t.Fatalf("idle frame %d mouth difference: got %.1f, want <= %.1f", i, f.mouth, restMax)
			}
			worst = max(worst, f.mouth)
		}
		t.Logf("idle: %d frames in 2 s, mouth difference at most %.1f", len(frames), worst)
		if v.width != 512 || v.height != 512 {
			t.Fatalf("decoded size: got %dx%d, want 512x512", v.width, v.height)
		}
	})

	ws := dialWS(t, st.wsURL+sessionID, sessionID, "tok-"+sessionID)

	t.Run("speech moves the mouth and finishes after the last frame", func(t *testing.T) {
		clip := speech[:3*16000]
		_, _, loudBefore := v.counts()
		for i := 0; i < len(clip); i += 3200 {
			ws.sendPCM(clip[i:min(i+3200, len(clip))])
		}
		ws.send(map[string]any{"type": "agent.speak_end"})
		started := ws.await(audiows.TypeSpeakStarted)
		ended := ws.await(audiows.TypeSpeakEnded)
		if got := ended.body["played_samples"]; got != float64(len(clip)) {
			t.Fatalf("played_samples: got %v, want %d", got, len(clip))
		}
		if ended.body["interrupted"] != false {
			t.Fatalf("interrupted: got %v, want false", ended.body["interrupted"])
		}
		// 3 s of audio is 75 frames: ended follows started by 74 frame
		// slots, less at most the backlog a late first frame can catch up.
		// Much earlier would mean "finished" was sent when the audio was
		// buffered rather than played.
		if played, least := ended.at.Sub(started.at), 74*rendersession.FrameDuration-rendersession.DefaultMaxBacklog; played < least {
			t.Fatalf("speak_started to speak_ended: got %v, want >= %v (the audio's length)", played, least)
		}
		moving := 0
		for _, f := range v.framesBetween(started.at, ended.at) {
			if f.mouth >= movingMin {
				moving++
			}
		}
		during := v.framesBetween(started.at, ended.at)
		if moving < 15 {
			t.Fatalf("frames with the mouth open during 3 s of speech: got %d of %d, want >= 15", moving, len(during))
		}
		t.Logf("speech: %d of %d frames with the mouth open, started->ended %v", moving, len(during), ended.at.Sub(started.at))
		time.Sleep(time.Second)
		for i, f := range v.framesBetween(ended.at.Add(500*time.Millisecond), time.Now()) {
			if f.mouth > restMax {
				t.Fatalf("frame %d after speech ended: mouth difference %.1f, want <= %.1f", i, f.mouth, restMax)
			}
		}
		_, _, loudAfter := v.counts()
		if loudAfter-loudBefore < 50 {
			t.Fatalf("loud Opus packets received during speech: got %d, want >= 50 of 150", loudAfter-loudBefore)
		}
	})

	t.Run("interrupt puts the mouth at rest at once", func(t *testing.T) {
		clip := speech[3*16000 : 6*16000]
		ws.sendPCM(clip)
		started := ws.await(audiows.TypeSpeakStarted)
		waitFor(t, "the mouth to open", func() bool {
			for _, f := range v.framesBetween(started.at, time.Now()) {
				if f.mouth >= movingMin {
					return true
				}
			}
			return false
		})
		ws.send(map[string]any{"type": "agent.interrupt"})
		ws.await(audiows.TypeInterruptConfirmed)
		ended := ws.await(audiows.TypeSpeakEnded)
		if ended.body["interrupted"] != true {
			t.Fatalf("speak_ended after interrupt: got %v, want interrupted", ended.body)
		}
		// speak_ended(interrupted) is emitted once the first frame at rest
		// was written; allow that frame's delivery and decode, then every
		// frame must be at rest.
		time.Sleep(time.Second)
		frames := v.framesBetween(ended.at.Add(2*rendersession.FrameDuration), time.Now())
		if len(frames) < 10 {
			t.Fatalf("frames after interrupt: got %d, want about 20", len(frames))
		}
		worst := 0.0
		for i, f := range frames {
			if f.mouth > restMax {
				t.Fatalf("frame %d after interrupt: mouth difference %.1f, want <= %.1f", i, f.mouth, restMax)
			}
			worst = max(worst, f.mouth)
		}
		first := v.framesBetween(ended.at, ended.at.Add(2*rendersession.FrameDuration))
		t.Logf("interrupt: %d frames after, mouth difference at most %.1f; frames right at the event: %v", len(frames), worst, first)
	})

	t.Run("session ends by itself when the viewer leaves", func(t *testing.T) {
		v.room.Disconnect()
		if got := waitEnd(t, s); got != room.ParticipantsLeft {
			t.Fatalf("end reason: got %v, want %v", got, room.ParticipantsLeft)
		}
		ended := ws.await(audiows.TypeSessionEnded)
		if got := ended.body["reason"]; got != "participants_left" {
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

	t.Run("a second session with the same id is refused", func(t *testing.T) {
		st.start(t, "sess_dup", "room-dup", av, room.Config{})
		token, _ := room.Token(st.lk.APIKey, st.lk.APISecret, "room-dup2", room.AgentIdentity, time.Hour)
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
