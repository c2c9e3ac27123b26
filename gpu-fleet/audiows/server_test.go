package audiows_test

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/playout"
)

const (
	sessionID = "sess_01TEST"
	token     = "tok_correct-horse-battery-staple"
	// wait bounds how long a test waits for a message it expects; it is
	// a liveness guard, never a speed assertion.
	wait = 10 * time.Second
)

type fixture struct {
	srv    *httptest.Server
	ep     *audiows.Endpoint
	buffer *playout.Buffer
}

func newFixture(t *testing.T, limits audiows.Limits) *fixture {
	t.Helper()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	s := audiows.NewServer(log, limits)
	buffer := playout.New(0)
	ep, err := s.Register(sessionID, audiows.HashToken(token), buffer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Register(sessionID, audiows.HashToken(token), buffer); !errors.Is(err, audiows.ErrDuplicateSession) {
		t.Fatalf("second Register: got %v, want ErrDuplicateSession", err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &fixture{srv: srv, ep: ep, buffer: buffer}
}

func (f *fixture) url(id string) string {
	return "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/ws/" + id
}

type message map[string]any

func (m message) str(k string) string { s, _ := m[k].(string); return s }
func (m message) num(k string) int    { n, _ := m[k].(float64); return int(n) }

type client struct {
	t    *testing.T
	ws   *websocket.Conn
	msgs chan message
	done chan error // the read error that ended the connection
}

func dial(t *testing.T, url string) *client {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	return newClient(t, ws)
}

// newClient reads ws's messages into the client's queue.
func newClient(t *testing.T, ws *websocket.Conn) *client {
	c := &client{t: t, ws: ws, msgs: make(chan message, 1024), done: make(chan error, 1)}
	go func() {
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				close(c.msgs)
				c.done <- err
				return
			}
			var m message
			if err := json.Unmarshal(data, &m); err != nil {
				panic("server sent invalid JSON: " + string(data))
			}
			c.msgs <- m
		}
	}()
	t.Cleanup(func() { ws.Close() })
	return c
}

func (c *client) send(v any) {
	c.t.Helper()
	if s, ok := v.(string); ok {
		if err := c.ws.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
			c.t.Fatal(err)
		}
		return
	}
	if err := c.ws.WriteJSON(v); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) sendBinary(b []byte) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, b); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) next() message {
	c.t.Helper()
	select {
	case m, ok := <-c.msgs:
		if !ok {
			c.t.Fatalf("connection closed while a message was expected: %v", <-c.done)
		}
		return m
	case <-time.After(wait):
		c.t.Fatal("no message from server")
	}
	return nil
}

func (c *client) expect(typ string) message {
	c.t.Helper()
	m := c.next()
	if got := m.str("type"); got != typ {
		c.t.Fatalf("message type: got %q (%v), want %q", got, m, typ)
	}
	return m
}

// closed waits for the server to close the connection and returns the
// close code (or -1 for a connection dropped without a close frame).
func (c *client) closed() int {
	c.t.Helper()
	for {
		select {
		case _, ok := <-c.msgs:
			if ok {
				continue
			}
			err := <-c.done
			var ce *websocket.CloseError
			if errors.As(err, &ce) {
				return ce.Code
			}
			return -1
		case <-time.After(wait):
			c.t.Fatal("server did not close the connection")
		}
	}
}

func (c *client) init() {
	c.t.Helper()
	c.send(message{"type": "session.init", "session_id": sessionID, "session_token": token})
	m := c.expect(audiows.TypeConnectionEstablished)
	if got := m.str("session_id"); got != sessionID {
		c.t.Fatalf("connection.established session_id: got %q, want %q", got, sessionID)
	}
}

// isTimeout reports a read that hit the test's own deadline: the server
// never closed the connection.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func pcmBytes(n int, v int16) []byte {
	b := make([]byte, 2*n)
	for i := range n {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(v))
	}
	return b
}

func speakMsg(n, rate int) message {
	return message{"type": "agent.speak", "audio": base64.StdEncoding.EncodeToString(pcmBytes(n, 1000)), "sample_rate": rate}
}

func TestHandshakeRefusals(t *testing.T) {
	tests := []struct {
		name     string
		path     string
		first    func(c *client)
		wantErr  string
		wantCode int
	}{
		{
			name:     "speak before init",
			path:     sessionID,
			first:    func(c *client) { c.send(speakMsg(100, 16000)) },
			wantErr:  "First message must be session.init",
			wantCode: websocket.ClosePolicyViolation,
		},
		{
			name:     "binary before init",
			path:     sessionID,
			first:    func(c *client) { c.sendBinary(pcmBytes(10, 1)) },
			wantErr:  "First message must be session.init",
			wantCode: websocket.ClosePolicyViolation,
		},
		{
			name:     "not JSON",
			path:     sessionID,
			first:    func(c *client) { c.send("hello") },
			wantErr:  "First message must be session.init",
			wantCode: websocket.ClosePolicyViolation,
		},
		{
			name: "wrong token",
			path: sessionID,
			first: func(c *client) {
				c.send(message{"type": "session.init", "session_id": sessionID, "session_token": "tok_wrong"})
			},
			wantErr:  "invalid session_id or session_token",
			wantCode: websocket.ClosePolicyViolation,
		},
		{
			name: "session id differs from the path",
			path: sessionID,
			first: func(c *client) {
				c.send(message{"type": "session.init", "session_id": "sess_other", "session_token": token})
			},
			wantErr:  "invalid session_id or session_token",
			wantCode: websocket.ClosePolicyViolation,
		},
		{
			name: "unknown session",
			path: "sess_unknown",
			first: func(c *client) {
				c.send(message{"type": "session.init", "session_id": "sess_unknown", "session_token": token})
			},
			wantErr:  "invalid session_id or session_token",
			wantCode: websocket.ClosePolicyViolation,
		},
		{
			name:     "nothing sent before the init timeout",
			path:     sessionID,
			first:    func(c *client) {},
			wantErr:  "First message must be session.init",
			wantCode: websocket.ClosePolicyViolation,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, audiows.Limits{InitTimeout: 300 * time.Millisecond})
			c := dial(t, f.url(tt.path))
			tt.first(c)
			m := c.expect(audiows.TypeError)
			if got := m.str("error"); got != tt.wantErr {
				t.Fatalf("error: got %q, want %q", got, tt.wantErr)
			}
			if got := c.closed(); got != tt.wantCode {
				t.Fatalf("close code: got %d, want %d", got, tt.wantCode)
			}
			if got := f.buffer.Buffered(); got != 0 {
				t.Fatalf("audio buffered by a refused connection: got %d samples, want 0", got)
			}
		})
	}
}

func TestCommandErrorsKeepTheConnectionUsable(t *testing.T) {
	const maxMessage = 64 << 10
	tests := []struct {
		name     string
		send     func(c *client)
		wantCode string
	}{
		{"bad base64", func(c *client) { c.send(message{"type": "agent.speak", "audio": "!!not base64!!"}) }, audiows.CodeBadAudio},
		{"empty audio", func(c *client) { c.send(message{"type": "agent.speak", "audio": ""}) }, audiows.CodeBadAudio},
		{"odd byte count", func(c *client) {
			c.send(message{"type": "agent.speak", "audio": base64.StdEncoding.EncodeToString([]byte{1, 2, 3})})
		}, audiows.CodeBadAudio},
		{"odd binary frame", func(c *client) { c.sendBinary([]byte{1, 2, 3}) }, audiows.CodeBadAudio},
		{"unknown type", func(c *client) { c.send(message{"type": "agent.dance"}) }, audiows.CodeUnknownType},
		{"missing type", func(c *client) { c.send(message{"audio": "AAAA"}) }, audiows.CodeBadJSON},
		{"bad JSON", func(c *client) { c.send(`{"type": "agent.speak", "audio": `) }, audiows.CodeBadJSON},
		{"rate too low", func(c *client) { c.send(speakMsg(100, 4000)) }, audiows.CodeBadSampleRate},
		{"rate too high", func(c *client) { c.send(speakMsg(100, 96000)) }, audiows.CodeBadSampleRate},
		{"uncommon rate", func(c *client) { c.send(speakMsg(100, 17000)) }, audiows.CodeBadSampleRate},
		{"oversized text message", func(c *client) { c.send(speakMsg(maxMessage, 16000)) }, audiows.CodeMessageTooLarge},
		{"oversized binary message", func(c *client) { c.sendBinary(pcmBytes(maxMessage, 1)) }, audiows.CodeMessageTooLarge},
		{"speak_end with nothing to end", func(c *client) { c.send(message{"type": "agent.speak_end"}) }, audiows.CodeNothingToEnd},
		{"second init", func(c *client) {
			c.send(message{"type": "session.init", "session_id": sessionID, "session_token": token})
		}, audiows.CodeAlreadyInitiated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, audiows.Limits{MaxMessageBytes: maxMessage})
			c := dial(t, f.url(sessionID))
			c.init()
			tt.send(c)
			m := c.expect(audiows.TypeError)
			if got := m.str("code"); got != tt.wantCode {
				t.Fatalf("error code: got %q (%q), want %q", got, m.str("error"), tt.wantCode)
			}
			if m.str("error") == "" {
				t.Fatal("error text: got empty, want a reason")
			}
			// The connection still works.
			c.send(speakMsg(320, 16000))
			if got := c.expect(audiows.TypeSpeakConfirmed).num("audio_samples"); got != 320 {
				t.Fatalf("audio_samples after the error: got %d, want 320", got)
			}
		})
	}
}

func TestSpeakConfirmsSamplesAt16k(t *testing.T) {
	tests := []struct {
		name     string
		send     func(c *client)
		min, max int // audio_samples expected (resampling holds back ~1 ms)
	}{
		{"16 kHz JSON", func(c *client) { c.send(speakMsg(1600, 16000)) }, 1600, 1600},
		{"default rate is 16 kHz", func(c *client) {
			c.send(message{"type": "agent.speak", "audio": base64.StdEncoding.EncodeToString(pcmBytes(800, 5))})
		}, 800, 800},
		{"48 kHz JSON", func(c *client) { c.send(speakMsg(4800, 48000)) }, 1600 - 40, 1600},
		{"8 kHz JSON", func(c *client) { c.send(speakMsg(800, 8000)) }, 1600 - 40, 1600},
		{"44.1 kHz JSON", func(c *client) { c.send(speakMsg(4410, 44100)) }, 1600 - 40, 1600},
		{"binary 16 kHz", func(c *client) { c.sendBinary(pcmBytes(640, 7)) }, 640, 640},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, audiows.Limits{})
			c := dial(t, f.url(sessionID))
			c.init()
			tt.send(c)
			m := c.expect(audiows.TypeSpeakConfirmed)
			if got := m.num("audio_samples"); got < tt.min || got > tt.max {
				t.Fatalf("audio_samples: got %d, want %d..%d", got, tt.min, tt.max)
			}
			if got, want := f.buffer.Buffered(), m.num("audio_samples"); got != want {
				t.Fatalf("buffered: got %d, want %d (what was confirmed)", got, want)
			}
			if m.num("utterance_id") == 0 {
				t.Fatalf("utterance_id: got 0, want an id (%v)", m)
			}
		})
	}
}

// tick plays one frame the way a session does: take the frame's audio,
// "send" it, then emit the events the frame completed.
func tick(f *fixture) playout.Frame {
	pcm := make([]int16, playout.FrameSamples)
	frame := f.buffer.Next(pcm)
	for _, ev := range frame.Events {
		f.ep.Emit(ev)
	}
	return frame
}

// probe sends a command that always fails and waits for its error: every
// event emitted before the probe was sent arrives before that error.
func probe(c *client) []message {
	c.t.Helper()
	c.send(message{"type": "probe"})
	var got []message
	for {
		m := c.next()
		if m.str("type") == audiows.TypeError && m.str("code") == audiows.CodeUnknownType {
			return got
		}
		got = append(got, m)
	}
}

func TestSpeechEventsFollowTheFramesSent(t *testing.T) {
	f := newFixture(t, audiows.Limits{})
	c := dial(t, f.url(sessionID))
	c.init()

	// 3 frames of audio in two binary chunks, then the end of the utterance.
	c.sendBinary(pcmBytes(2*playout.FrameSamples, 500))
	id := c.expect(audiows.TypeSpeakConfirmed).num("utterance_id")
	c.sendBinary(pcmBytes(playout.FrameSamples, 500))
	c.expect(audiows.TypeSpeakConfirmed)
	c.send(message{"type": "agent.speak_end"})
	if got := c.expect(audiows.TypeSpeakEndConfirmed).num("utterance_id"); got != id {
		t.Fatalf("speak_end utterance_id: got %d, want %d", got, id)
	}
	if got := probe(c); len(got) != 0 {
		t.Fatalf("events before any frame was sent: got %v, want none", got)
	}

	tick(f)
	got := probe(c)
	if len(got) != 1 || got[0].str("type") != audiows.TypeSpeakStarted || got[0].num("utterance_id") != id {
		t.Fatalf("after frame 1: got %v, want one %s for utterance %d", got, audiows.TypeSpeakStarted, id)
	}
	tick(f)
	if got := probe(c); len(got) != 0 {
		t.Fatalf("after frame 2 of 3: got %v, want no event", got)
	}
	tick(f)
	got = probe(c)
	if len(got) != 1 || got[0].str("type") != audiows.TypeSpeakEnded {
		t.Fatalf("after the last frame: got %v, want one %s", got, audiows.TypeSpeakEnded)
	}
	ended := got[0]
	if ended.num("utterance_id") != id || ended.num("played_samples") != 3*playout.FrameSamples ||
		ended.num("played_ms") != 120 || ended["interrupted"] != false {
		t.Fatalf("%s: got %v, want utterance %d, 1920 samples, 120 ms, not interrupted", audiows.TypeSpeakEnded, ended, id)
	}
}

func TestInterrupt(t *testing.T) {
	f := newFixture(t, audiows.Limits{})
	c := dial(t, f.url(sessionID))
	c.init()
	c.send(speakMsg(10*playout.FrameSamples, 16000))
	id := c.expect(audiows.TypeSpeakConfirmed).num("utterance_id")
	tick(f)
	c.expect(audiows.TypeSpeakStarted)

	c.send(message{"type": "agent.interrupt"})
	if got := c.expect(audiows.TypeInterruptConfirmed).num("dropped_samples"); got != 9*playout.FrameSamples {
		t.Fatalf("dropped_samples: got %d, want %d", got, 9*playout.FrameSamples)
	}
	frame := tick(f)
	if frame.Speaking {
		t.Fatal("frame after interrupt: got speaking, want rest")
	}
	m := c.expect(audiows.TypeSpeakEnded)
	if m.num("utterance_id") != id || m["interrupted"] != true || m.num("played_samples") != playout.FrameSamples {
		t.Fatalf("%s after interrupt: got %v, want utterance %d interrupted after 640 samples", audiows.TypeSpeakEnded, m, id)
	}
}

func TestResampledUtteranceKeepsItsTail(t *testing.T) {
	f := newFixture(t, audiows.Limits{})
	c := dial(t, f.url(sessionID))
	c.init()
	confirmed := 0
	for range 4 {
		c.send(speakMsg(2400, 48000)) // 50 ms each
		confirmed += c.expect(audiows.TypeSpeakConfirmed).num("audio_samples")
	}
	c.send(message{"type": "agent.speak_end"})
	c.expect(audiows.TypeSpeakEndConfirmed)
	if got := f.buffer.Buffered(); got < 3200-2 || got > 3200+2 {
		t.Fatalf("buffered after speak_end: got %d (confirmed %d), want about 3200 (200 ms at 16 kHz)", got, confirmed)
	}
}

func TestSessionCloseTellsTheClient(t *testing.T) {
	f := newFixture(t, audiows.Limits{})
	c := dial(t, f.url(sessionID))
	c.init()
	f.ep.Close("participants_left")
	if got := c.expect(audiows.TypeSessionEnded).str("reason"); got != "participants_left" {
		t.Fatalf("session.ended reason: got %q, want participants_left", got)
	}
	if got := c.closed(); got != websocket.CloseNormalClosure {
		t.Fatalf("close code: got %d, want %d", got, websocket.CloseNormalClosure)
	}
	// The session is gone: a new connection is refused.
	c2 := dial(t, f.url(sessionID))
	c2.send(message{"type": "session.init", "session_id": sessionID, "session_token": token})
	c2.expect(audiows.TypeError)
}

func TestReconnectReplacesTheOldConnection(t *testing.T) {
	f := newFixture(t, audiows.Limits{})
	first := dial(t, f.url(sessionID))
	first.init()
	second := dial(t, f.url(sessionID))
	second.init()
	if got := first.closed(); got != websocket.ClosePolicyViolation {
		t.Fatalf("old connection close code: got %d, want %d", got, websocket.ClosePolicyViolation)
	}
	second.sendBinary(pcmBytes(640, 1))
	second.expect(audiows.TypeSpeakConfirmed)
	tick(f)
	second.expect(audiows.TypeSpeakStarted)
}

func TestSlowClientIsDisconnected(t *testing.T) {
	f := newFixture(t, audiows.Limits{SendQueue: 8, WriteTimeout: time.Second})
	ws, _, err := websocket.DefaultDialer.Dial(f.url(sessionID), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteJSON(message{"type": "session.init", "session_id": sessionID, "session_token": token}); err != nil {
		t.Fatal(err)
	}
	// Events emitted before the server attached this connection would be
	// dropped unsent, and the client below would then wait for nothing.
	ws.SetReadDeadline(time.Now().Add(wait))
	var established message
	if err := ws.ReadJSON(&established); err != nil || established.str("type") != audiows.TypeConnectionEstablished {
		t.Fatalf("first message: got %v (%v), want %s", established, err, audiows.TypeConnectionEstablished)
	}
	// The client reads nothing while the server emits far more than the
	// socket buffers and the queue hold.
	const emitted = 200000
	for i := range emitted {
		f.ep.Emit(playout.Event{Type: playout.SpeechStarted, UtteranceID: uint64(i)})
	}
	received := 0
	for {
		_, _, err := ws.ReadMessage()
		if isTimeout(err) {
			t.Fatalf("server still connected to a client that did not read, after %d messages", received)
		}
		if err != nil {
			break
		}
		received++
	}
	if received >= emitted {
		t.Fatalf("messages received by a client that did not read: got %d, want fewer than %d", received, emitted)
	}
}

func TestPingKeepsAnIdleClientConnected(t *testing.T) {
	limits := audiows.Limits{PingInterval: 50 * time.Millisecond, PongWait: 200 * time.Millisecond}
	f := newFixture(t, limits)
	c := dial(t, f.url(sessionID)) // its read loop answers pings
	c.init()
	time.Sleep(5 * limits.PongWait)
	c.sendBinary(pcmBytes(64, 1))
	c.expect(audiows.TypeSpeakConfirmed)
}

func TestSilentClientTimesOut(t *testing.T) {
	limits := audiows.Limits{PingInterval: 50 * time.Millisecond, PongWait: 200 * time.Millisecond}
	f := newFixture(t, limits)
	ws, _, err := websocket.DefaultDialer.Dial(f.url(sessionID), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	ws.WriteJSON(message{"type": "session.init", "session_id": sessionID, "session_token": token})
	// A client whose pong handler never answers looks dead to the server.
	ws.SetPingHandler(func(string) error { return nil })
	ws.SetReadDeadline(time.Now().Add(wait))
	var lastErr error
	for lastErr == nil {
		_, _, lastErr = ws.ReadMessage()
	}
	if isTimeout(lastErr) {
		t.Fatal("server kept a client that never answered pings")
	}
	if websocket.IsCloseError(lastErr, websocket.CloseNormalClosure) {
		t.Fatalf("read error: got normal closure, want the connection dropped for silence")
	}
}

// TestFirstMessageIsBounded: before session.init the listener reads only a
// few KB; a bigger first message closes the connection (1009) unread.
func TestFirstMessageIsBounded(t *testing.T) {
	f := newFixture(t, audiows.Limits{InitMessageBytes: 1024})
	c := dial(t, f.url(sessionID))
	// The server may refuse the frame while it is still being written, so
	// the write itself may fail; the close code below is what matters.
	c.ws.WriteJSON(message{"type": "session.init", "session_id": sessionID, "session_token": token, "padding": strings.Repeat("x", 8<<10)})
	if got := c.closed(); got != websocket.CloseMessageTooBig {
		t.Fatalf("close code: got %d, want %d (message too big)", got, websocket.CloseMessageTooBig)
	}
	// A normal init right after still works, and audio then gets the
	// normal message size.
	ok := dial(t, f.url(sessionID))
	ok.init()
	ok.send(speakMsg(16000, 16000)) // 1 s of audio: far over the init bound
	if m := ok.expect(audiows.TypeSpeakConfirmed); m.num("audio_samples") != 16000 {
		t.Fatalf("after init: got %v, want 16000 samples confirmed", m)
	}
}

// TestConnectionCaps: connections past MaxConnections, or past
// MaxUnauthenticated before session.init, are refused with HTTP 503 before
// the upgrade.
func TestConnectionCaps(t *testing.T) {
	dialStatus := func(url string) (int, *websocket.Conn) {
		ws, res, err := websocket.DefaultDialer.Dial(url, nil)
		if err != nil {
			if res == nil {
				t.Fatalf("dial: %v", err)
			}
			return res.StatusCode, nil
		}
		t.Cleanup(func() { ws.Close() })
		return 101, ws
	}
	t.Run("unauthenticated", func(t *testing.T) {
		f := newFixture(t, audiows.Limits{MaxUnauthenticated: 1, InitTimeout: 5 * time.Second})
		first := dial(t, f.url(sessionID)) // holds the one pre-init place
		if got, _ := dialStatus(f.url(sessionID)); got != 503 {
			t.Fatalf("second pre-init connection: got HTTP %d, want 503", got)
		}
		first.init()
		if got, _ := dialStatus(f.url(sessionID)); got != 101 {
			t.Fatalf("after the first one initialized: got HTTP %d, want 101", got)
		}
	})
	t.Run("total", func(t *testing.T) {
		f := newFixture(t, audiows.Limits{MaxConnections: 2, InitTimeout: 5 * time.Second})
		a := dial(t, f.url(sessionID))
		a.init()
		dial(t, f.url(sessionID))
		if got, _ := dialStatus(f.url(sessionID)); got != 503 {
			t.Fatalf("third connection: got HTTP %d, want 503", got)
		}
	})
}
