package elevenlabs

import (
	"avatarsvc/gpu-fleet/remoteagent"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// Where the recorded message shapes in testdata/ come from. Each file is
// copied from a published example; test code patches only the values it
// asserts on (audio payloads, event ids, formats).
//
// docClientEvents: "Client events", https://elevenlabs.io/docs/conversational-ai/customization/events/client-events
// (also served as https://elevenlabs.io/docs/eleven-agents/customization/events/client-events.md;
// source: github.com/elevenlabs/elevenlabs-docs fern/conversational-ai/pages/customization/client-events.mdx
// @3557f0b1). Files: conversation_initiation_metadata.json, ping.json, audio.json,
// user_transcript.json, agent_response.json, agent_response_correction.json,
// client_tool_call.json, vad_score.json. The docs' "// comment" annotations
// were removed to make them JSON.
//
// docClientToServer: "Client to server events", https://elevenlabs.io/docs/conversational-ai/customization/events/client-to-server-events
// (elevenlabs-docs fern/conversational-ai/pages/customization/client-to-server-events.mdx).
// Files: contextual_update.json, user_message.json, user_activity.json.
//
// docAsyncAPIExamples: the x-fern-examples of the WebSocket reference,
// https://elevenlabs.io/docs/conversational-ai/api-reference/conversational-ai/websocket
// (elevenlabs-docs fern/apis/convai/asyncapi.yml). Files:
// conversation_initiation_client_data.json, pong.json, user_audio_chunk.json,
// internal_tentative_agent_response.json.
//
// docWebSocketGuide: "WebSocket", https://elevenlabs.io/docs/conversational-ai/api-reference/websocket
// (elevenlabs-docs fern/conversational-ai/pages/api-reference/websocket.mdx). File: signed_url.json.
//
// androidSDK: interruption.json is the payload quoted as "Matches payload" in
// github.com/elevenlabs/elevenlabs-android
// elevenlabs-sdk/src/main/java/io/elevenlabs/models/ConversationEvent.kt.
//
// asyncAPISchema: no published example exists for these; they follow the
// schemas ErrorPayload/ErrorData and TentativeUserTranscriptPayload of the
// AsyncAPI contract, github.com/elevenlabs/packages
// packages/types/schemas/agent.asyncapi.yaml, with values taken from its
// ErrorType descriptions. Files: error.json, tentative_user_transcript.json.

const testAgentID = "agent_3701k3ttaq12ewp8b7qv5rfyszkz" // the id used in elevenlabs-python's reference.md

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if n := settleConversationGoroutines(); n != 0 {
			fmt.Fprintf(os.Stderr, "leak: %d conversation goroutines still running after all tests\n%s", n, conversationStacks())
			code = 1
		}
	}
	os.Exit(code)
}

// conversationStacks returns the stacks of goroutines running a
// Conversation loop.
func conversationStacks() string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "elevenlabs.(*Conversation).readLoop") || strings.Contains(g, "elevenlabs.(*Conversation).writeLoop") {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}

// settleConversationGoroutines waits for Conversation goroutines to finish
// exiting and returns how many are left. Close returns once both loops have
// signalled that they are done, which is a few instructions before the
// goroutines are gone, hence the short settle loop.
func settleConversationGoroutines() int {
	var n int
	for range 200 {
		n = strings.Count(conversationStacks(), "goroutine ")
		if n == 0 {
			return 0
		}
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond)
	}
	return n
}

// loadMessage reads testdata/<name>.json.
func loadMessage(t testing.TB, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := decodeJSON(data)
	if err != nil {
		t.Fatalf("testdata/%s.json: %v", name, err)
	}
	return m
}

func decodeJSON(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return nil, err
	}
	return m, nil
}

// set returns m with the value at a dotted path replaced.
func set(m map[string]any, path string, v any) map[string]any {
	keys := strings.Split(path, ".")
	cur := m
	for _, k := range keys[:len(keys)-1] {
		next, ok := cur[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			cur[k] = next
		}
		cur = next
	}
	cur[keys[len(keys)-1]] = v
	return m
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// peer is the server's end of one test WebSocket.
type peer struct {
	t  testing.TB
	ws *websocket.Conn
}

func (p *peer) send(m map[string]any) {
	p.t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		p.t.Errorf("marshal: %v", err)
		return
	}
	p.sendRaw(websocket.TextMessage, data)
}

func (p *peer) sendRaw(kind int, data []byte) {
	p.t.Helper()
	if err := p.ws.WriteMessage(kind, data); err != nil {
		p.t.Errorf("server write: %v", err)
	}
}

// read returns the next text message from the client, nil when the
// connection ended.
func (p *peer) read() map[string]any {
	p.t.Helper()
	for {
		kind, data, err := p.ws.ReadMessage()
		if err != nil {
			return nil
		}
		if kind != websocket.TextMessage {
			p.t.Errorf("client sent message kind %d, want text", kind)
			continue
		}
		m, err := decodeJSON(data)
		if err != nil {
			p.t.Errorf("client sent unreadable JSON %q: %v", data, err)
			return nil
		}
		return m
	}
}

// drain reads until the connection ends and returns the close code the
// client sent, or -1 without one.
func (p *peer) drain() int {
	for {
		if _, _, err := p.ws.ReadMessage(); err != nil {
			if ce, ok := err.(*websocket.CloseError); ok {
				return ce.Code
			}
			return -1
		}
	}
}

// fakeAgent is a local stand-in for api.elevenlabs.io.
type fakeAgent struct {
	t testing.TB

	// metadata is sent after the client's first message; the recorded
	// conversation_initiation_metadata when nil.
	metadata map[string]any
	// beforeMetadata runs after the first message, before metadata; it
	// returns false to end the connection there.
	beforeMetadata func(p *peer) bool
	// script runs after metadata; the connection is then drained and closed.
	script func(p *peer)

	// apiKey, when set, enables get-signed-url, which answers signedURL
	// (or a URL to this server with token when signedURL is nil).
	apiKey    string
	token     string
	signedURL func(srv *httptest.Server) map[string]any
	tls       bool

	srv        *httptest.Server
	handlers   sync.WaitGroup
	initiation chan map[string]any // the client's first message
	wsRequest  chan *http.Request  // the upgrade request
	closeCode  chan int            // the close code the client sent at the end
}

func (f *fakeAgent) start() *fakeAgent {
	f.initiation = make(chan map[string]any, 1)
	f.wsRequest = make(chan *http.Request, 1)
	f.closeCode = make(chan int, 1)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/convai/conversation/get-signed-url", f.serveSignedURL)
	mux.HandleFunc("GET /v1/convai/conversation", f.serveWS)
	if f.tls {
		f.srv = httptest.NewTLSServer(mux)
	} else {
		f.srv = httptest.NewServer(mux)
	}
	f.t.Cleanup(func() {
		f.srv.Close()
		f.handlers.Wait() // hijacked connections are not waited for by Close
	})
	return f
}

func (f *fakeAgent) serveSignedURL(w http.ResponseWriter, r *http.Request) {
	if f.apiKey == "" {
		http.Error(w, "signed URLs not enabled in this test", http.StatusNotFound)
		return
	}
	if got := r.Header.Get("xi-api-key"); got != f.apiKey {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"detail":{"status":"invalid_api_key","message":"Invalid API key"}}`)
		return
	}
	if got := r.URL.Query().Get("agent_id"); got != testAgentID {
		f.t.Errorf("get-signed-url agent_id: got %q, want %q", got, testAgentID)
	}
	var answer map[string]any
	if f.signedURL != nil {
		answer = f.signedURL(f.srv)
	} else {
		answer = loadMessage(f.t, "signed_url")
		u := "ws" + strings.TrimPrefix(f.srv.URL, "http") + "/v1/convai/conversation?" +
			url.Values{"agent_id": {testAgentID}, "token": {f.token}}.Encode()
		set(answer, "signed_url", u)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(answer)
}

var upgrader = websocket.Upgrader{}

func (f *fakeAgent) serveWS(w http.ResponseWriter, r *http.Request) {
	f.handlers.Add(1)
	defer f.handlers.Done()
	f.wsRequest <- r.Clone(context.Background())
	if got := r.URL.Query().Get("agent_id"); got != testAgentID {
		f.t.Errorf("websocket agent_id: got %q, want %q", got, testAgentID)
	}
	if f.apiKey != "" && r.URL.Query().Get("token") != f.token {
		http.Error(w, "bad token", http.StatusForbidden)
		return
	}
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	defer ws.Close()
	p := &peer{t: f.t, ws: ws}
	first := p.read()
	if first == nil {
		return
	}
	f.initiation <- first
	if f.beforeMetadata != nil && !f.beforeMetadata(p) {
		return
	}
	md := f.metadata
	if md == nil {
		md = loadMessage(f.t, "conversation_initiation_metadata")
	}
	p.send(md)
	if f.script != nil {
		f.script(p)
	}
	f.closeCode <- p.drain()
}

// metadataWith is the recorded metadata with the given formats.
func metadataWith(t testing.TB, output, input string) map[string]any {
	m := loadMessage(t, "conversation_initiation_metadata")
	set(m, "conversation_initiation_metadata_event.agent_output_audio_format", output)
	set(m, "conversation_initiation_metadata_event.user_input_audio_format", input)
	return m
}

// dial connects to the fake agent and closes the conversation at cleanup.
func (f *fakeAgent) dial(t testing.TB, mutate func(*Config)) *Conversation {
	t.Helper()
	cfg := Config{AgentID: testAgentID, BaseURL: f.srv.URL, Logger: testLogger(t)}
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conv, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { conv.Close() })
	return conv
}

// next returns the next event; the timeout only guards against a hung test.
func next(t testing.TB, conv *Conversation) (remoteagent.Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-conv.Events():
		return ev, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10 s")
		return remoteagent.Event{}, false
	}
}

// collectUntil reads events up to and including the first one stop
// accepts (or until Events closes).
func collectUntil(t testing.TB, conv *Conversation, stop func(remoteagent.Event) bool) []remoteagent.Event {
	t.Helper()
	var evs []remoteagent.Event
	for {
		ev, ok := next(t, conv)
		if !ok {
			return evs
		}
		evs = append(evs, ev)
		if stop(ev) {
			return evs
		}
	}
}

// endMarker is an agent_response the scripts send last, so the test knows
// every earlier message has been handled.
const endMarkerText = "END OF SCRIPT"

func endMarker(t testing.TB) map[string]any {
	return set(loadMessage(t, "agent_response"), "agent_response_event.agent_response", endMarkerText)
}

func isEndMarker(ev remoteagent.Event) bool {
	return ev.Kind == remoteagent.AgentResponse && ev.Text == endMarkerText
}

func waitFor[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
		var zero T
		return zero
	}
}
