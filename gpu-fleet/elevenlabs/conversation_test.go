package elevenlabs

import (
	"avatarsvc/gpu-fleet/remoteagent"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"avatarsvc/gpu-fleet/audio"
)

func TestDialHandshake(t *testing.T) {
	// The docs' example initiation (docAsyncAPIExamples) minus
	// custom_llm_extra_body, which this client does not send.
	docInit := loadMessage(t, "conversation_initiation_client_data")
	delete(docInit, "custom_llm_extra_body")
	docOverride := docInit["conversation_config_override"].(map[string]any)

	tests := []struct {
		name     string
		mutate   func(*Config)
		wantInit map[string]any
	}{
		{
			name:     "no overrides sends type only",
			wantInit: map[string]any{"type": "conversation_initiation_client_data"},
		},
		{
			name: "dynamic variables and overrides as in the docs example",
			mutate: func(c *Config) {
				c.DynamicVariables = map[string]any{"user_name": "John", "account_type": "premium"}
				c.ConversationConfigOverride = docOverride
			},
			wantInit: docInit,
		},
		{
			name: "number and bool variables",
			mutate: func(c *Config) {
				c.DynamicVariables = map[string]any{"age": 42, "vip": true, "score": 0.5}
			},
			wantInit: map[string]any{
				"type":              "conversation_initiation_client_data",
				"dynamic_variables": map[string]any{"age": json.Number("42"), "vip": true, "score": json.Number("0.5")},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := (&fakeAgent{t: t}).start()
			conv := f.dial(t, tt.mutate)

			if got := waitFor(t, f.initiation, "initiation"); !reflect.DeepEqual(got, tt.wantInit) {
				t.Errorf("first message:\n got %v\nwant %v", got, tt.wantInit)
			}
			req := waitFor(t, f.wsRequest, "upgrade request")
			if got, want := req.URL.Path, "/v1/convai/conversation"; got != want {
				t.Errorf("path: got %q, want %q", got, want)
			}
			if got, want := req.URL.Query().Get("agent_id"), testAgentID; got != want {
				t.Errorf("agent_id: got %q, want %q", got, want)
			}
			if got, want := conv.ConversationID(), "conv_123"; got != want {
				t.Errorf("ConversationID: got %q, want %q", got, want)
			}
			if got, want := conv.AgentOutputFormat(), "pcm_44100"; got != want {
				t.Errorf("AgentOutputFormat: got %q, want %q", got, want)
			}
			if got, want := conv.UserInputFormat(), "pcm_16000"; got != want {
				t.Errorf("UserInputFormat: got %q, want %q", got, want)
			}
		})
	}
}

func TestDialFails(t *testing.T) {
	tests := []struct {
		name           string
		agent          *fakeAgent // nil: no server needed
		mutate         func(*Config)
		wantIs         error
		wantSubstrings []string
		wantCloseCode  int
	}{
		{
			name:           "empty agent id",
			mutate:         func(c *Config) { c.AgentID = "" },
			wantSubstrings: []string{"AgentID is empty"},
		},
		{
			name:           "unsupported dynamic variable",
			mutate:         func(c *Config) { c.DynamicVariables = map[string]any{"user": struct{}{}} },
			wantSubstrings: []string{`dynamic variable "user"`},
		},
		{
			name:           "base URL not http",
			mutate:         func(c *Config) { c.BaseURL = "ftp://example.com" },
			wantSubstrings: []string{"BaseURL"},
		},
		{
			name:           "handshake refused",
			agent:          &fakeAgent{apiKey: "k", token: "right"}, // no token on a public URL
			wantSubstrings: []string{"403"},
		},
		{
			name:           "compressed output format",
			agent:          &fakeAgent{metadata: metadataWith(t, "mp3_44100_128", "pcm_16000")},
			wantIs:         ErrUnsupportedFormat,
			wantSubstrings: []string{"agent_output_audio_format", "mp3_44100_128"},
		},
		{
			name:   "opus output format",
			agent:  &fakeAgent{metadata: metadataWith(t, "opus_48000", "pcm_16000")},
			wantIs: ErrUnsupportedFormat,
		},
		{
			name:           "missing output format",
			agent:          &fakeAgent{metadata: metadataWith(t, "", "pcm_16000")},
			wantIs:         ErrUnsupportedFormat,
			wantSubstrings: []string{"agent_output_audio_format"},
		},
		{
			name:           "bad input rate",
			agent:          &fakeAgent{metadata: metadataWith(t, "pcm_16000", "pcm_abc")},
			wantIs:         ErrUnsupportedFormat,
			wantSubstrings: []string{"user_input_audio_format"},
		},
		{
			name: "server closes before metadata",
			agent: &fakeAgent{beforeMetadata: func(p *peer) bool {
				p.sendRaw(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.ClosePolicyViolation, "Invalid agent"))
				p.drain()
				return false
			}},
			wantCloseCode:  websocket.ClosePolicyViolation,
			wantSubstrings: []string{"Invalid agent"},
		},
		{
			name: "audio before metadata",
			agent: &fakeAgent{beforeMetadata: func(p *peer) bool {
				p.send(set(loadMessage(p.t, "audio"), "audio_event.audio_base_64", "AAAA"))
				p.drain()
				return false
			}},
			wantSubstrings: []string{"protocol error", "audio before"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Config{AgentID: testAgentID, BaseURL: "http://127.0.0.1:1", Logger: testLogger(t)}
			if tt.agent != nil {
				tt.agent.t = t
				tt.agent.start()
				cfg.BaseURL = tt.agent.srv.URL
			}
			if tt.mutate != nil {
				tt.mutate(&cfg)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conv, err := Dial(ctx, cfg)
			if err == nil {
				conv.Close()
				t.Fatal("Dial succeeded, want an error")
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("error %q: not %v", err, tt.wantIs)
			}
			for _, s := range tt.wantSubstrings {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if tt.wantCloseCode != 0 {
				var ce *CloseError
				if !errors.As(err, &ce) {
					t.Fatalf("error %q: not a *CloseError", err)
				}
				if got, want := ce.Code, tt.wantCloseCode; got != want {
					t.Errorf("close code: got %d, want %d", got, want)
				}
			}
		})
	}
}

func TestDialCancelledWhileWaitingForMetadata(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := (&fakeAgent{t: t, beforeMetadata: func(p *peer) bool {
		cancel() // the client is now blocked waiting for metadata
		p.drain()
		return false
	}}).start()
	conv, err := Dial(ctx, Config{AgentID: testAgentID, BaseURL: f.srv.URL, Logger: testLogger(t)})
	if err == nil {
		conv.Close()
		t.Fatal("Dial succeeded, want an error")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %q: got not context.Canceled", err)
	}
}

func TestPingIsAnsweredWithPong(t *testing.T) {
	docPing := loadMessage(t, "ping") // docClientEvents
	docPong := loadMessage(t, "pong") // docAsyncAPIExamples
	docPingID := docPong["event_id"]  // 12345 in the docs' exchange
	tests := []struct {
		name     string
		ping     map[string]any
		wantPong map[string]any
	}{
		{
			name:     "docs ping",
			ping:     docPing,
			wantPong: map[string]any{"type": "pong", "event_id": json.Number("123456")},
		},
		{
			name:     "docs ping and pong exchange",
			ping:     set(loadMessage(t, "ping"), "ping_event.event_id", docPingID),
			wantPong: docPong,
		},
		{
			name:     "ping_ms null",
			ping:     set(set(loadMessage(t, "ping"), "ping_event.ping_ms", nil), "ping_event.event_id", 7),
			wantPong: map[string]any{"type": "pong", "event_id": json.Number("7")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pongs := make(chan map[string]any, 1)
			f := (&fakeAgent{t: t, script: func(p *peer) {
				p.send(tt.ping)
				pongs <- p.read()
			}}).start()
			f.dial(t, nil)
			if got := waitFor(t, pongs, "pong"); !reflect.DeepEqual(got, tt.wantPong) {
				t.Errorf("pong: got %v, want %v", got, tt.wantPong)
			}
		})
	}
}

func TestPingBeforeMetadataIsAnswered(t *testing.T) {
	pongs := make(chan map[string]any, 1)
	f := (&fakeAgent{t: t, beforeMetadata: func(p *peer) bool {
		p.send(loadMessage(t, "ping"))
		pongs <- p.read()
		return true
	}}).start()
	f.dial(t, nil)
	want := map[string]any{"type": "pong", "event_id": json.Number("123456")}
	if got := waitFor(t, pongs, "pong"); !reflect.DeepEqual(got, want) {
		t.Errorf("pong: got %v, want %v", got, want)
	}
}

func TestWebSocketControlFrames(t *testing.T) {
	pongData := make(chan string, 1)
	f := (&fakeAgent{t: t, script: func(p *peer) {
		p.ws.SetPongHandler(func(s string) error {
			pongData <- s
			return nil
		})
		if err := p.ws.WriteControl(websocket.PingMessage, []byte("hb-1"), time.Now().Add(5*time.Second)); err != nil {
			t.Errorf("server ping: %v", err)
		}
		// The harness drains next, which processes the pong.
	}}).start()
	conv := f.dial(t, func(c *Config) { c.PingInterval = -1 })
	if got, want := waitFor(t, pongData, "pong frame"), "hb-1"; got != want {
		t.Errorf("pong payload: got %q, want %q", got, want)
	}
	conv.Close()
	if got, want := waitFor(t, f.closeCode, "close code"), websocket.CloseNormalClosure; got != want {
		t.Errorf("close code after Close: got %d, want %d", got, want)
	}
}

func TestClientPingsKeepConnectionAlive(t *testing.T) {
	pings := make(chan string, 1)
	f := (&fakeAgent{t: t, script: func(p *peer) {
		p.ws.SetPingHandler(func(s string) error {
			select {
			case pings <- s:
			default:
			}
			return p.ws.WriteControl(websocket.PongMessage, []byte(s), time.Now().Add(5*time.Second))
		})
	}}).start()
	f.dial(t, func(c *Config) { c.PingInterval = 10 * time.Millisecond })
	waitFor(t, pings, "client ping frame")
}

// audioMessage is the recorded audio event carrying raw bytes.
func audioMessage(t testing.TB, eventID int, raw []byte) map[string]any {
	m := loadMessage(t, "audio")
	set(m, "audio_event.audio_base_64", base64.StdEncoding.EncodeToString(raw))
	set(m, "audio_event.event_id", eventID)
	return m
}

func sine(freq float64, rate, n int, amp float64) []int16 {
	out := make([]int16, n)
	for i := range out {
		out[i] = int16(amp * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
	}
	return out
}

// splitBytes cuts b into pieces of the given sizes (the last takes the rest).
func splitBytes(b []byte, sizes ...int) [][]byte {
	var out [][]byte
	for _, n := range sizes {
		n = min(n, len(b))
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

// audioCase is agent audio in some format and the 16 kHz audio the whole
// stream converts to; the client may hold back up to lookahead samples of
// its end (resampler lookahead).
type audioCase struct {
	name      string
	format    string
	chunks    [][]byte
	want      []int16
	lookahead int
}

// resampledCase streams 0.1 s of a 440 Hz tone at rate in uneven chunks.
func resampledCase(format string, rate int) audioCase {
	src := sine(440, rate, rate/10, 16000)
	return audioCase{
		name:      format + " is resampled to 16 kHz",
		format:    format,
		chunks:    splitBytes(audio.EncodePCM16(src), 2*(rate/50), 2*(rate/30)+2),
		want:      audio.Resample(src, rate, audio.SampleRate),
		lookahead: 40,
	}
}

func ulawCase() audioCase {
	src := ulawEncode(sine(440, 8000, 1600, 12000))
	return audioCase{
		name:      "ulaw_8000 is expanded then resampled",
		format:    "ulaw_8000",
		chunks:    splitBytes(src, 400, 801),
		want:      audio.Resample(ulawDecode(src), 8000, audio.SampleRate),
		lookahead: 40,
	}
}

func TestAgentAudioIsDecodedTo16kHz(t *testing.T) {
	exact := []int16{0, 1, -1, 32767, -32768, 1234, -4321, 42}
	tests := []audioCase{
		{
			name:   "pcm_16000 passes samples through",
			format: "pcm_16000",
			chunks: [][]byte{audio.EncodePCM16(exact[:3]), audio.EncodePCM16(exact[3:])},
			want:   exact,
		},
		{
			name:   "pcm_16000 sample split across messages",
			format: "pcm_16000",
			chunks: splitBytes(audio.EncodePCM16(exact), 3, 5, 1),
			want:   exact,
		},
		resampledCase("pcm_22050", 22050),
		resampledCase("pcm_44100", 44100),
		resampledCase("pcm_24000", 24000),
		resampledCase("pcm_48000", 48000),
		resampledCase("pcm_8000", 8000),
		ulawCase(),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := (&fakeAgent{t: t, metadata: metadataWith(t, tt.format, "pcm_16000"), script: func(p *peer) {
				for i, c := range tt.chunks {
					p.send(audioMessage(t, i+1, c))
				}
				p.send(endMarker(t))
			}}).start()
			conv := f.dial(t, nil)
			evs := collectUntil(t, conv, isEndMarker)
			var got []int16
			lastID := 0
			for _, ev := range evs[:len(evs)-1] {
				if ev.Kind != remoteagent.AgentAudio {
					t.Fatalf("event %+v: got kind %v, want AgentAudio", ev, ev.Kind)
				}
				if ev.EventID <= lastID {
					t.Errorf("event ids not increasing: %d after %d", ev.EventID, lastID)
				}
				lastID = ev.EventID
				got = append(got, ev.PCM...)
			}
			if len(got) > len(tt.want) || len(tt.want)-len(got) > tt.lookahead {
				t.Fatalf("samples: got %d, want %d (less at most %d lookahead)", len(got), len(tt.want), tt.lookahead)
			}
			for i := range got {
				if d := int(got[i]) - int(tt.want[i]); d < -1 || d > 1 {
					t.Fatalf("sample %d: got %d, want %d", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestInterruptionDropsStaleAudio(t *testing.T) {
	a := []int16{1, 2, 3}
	b := []int16{4, 5, 6}
	stale := []int16{-7, -7, -7}
	fresh := []int16{8, 9, 10}
	tests := []struct {
		name        string
		send        func(p *peer)
		want        []remoteagent.Event
		wantDropped int
	}{
		{
			name: "audio at or below the interrupted event id is dropped",
			send: func(p *peer) {
				p.send(audioMessage(t, 1, audio.EncodePCM16(a)))
				p.send(audioMessage(t, 2, audio.EncodePCM16(b)))
				p.send(set(loadMessage(t, "interruption"), "interruption_event.event_id", 2))
				p.send(audioMessage(t, 2, audio.EncodePCM16(stale)))
				p.send(audioMessage(t, 1, audio.EncodePCM16(stale)))
				p.send(audioMessage(t, 3, audio.EncodePCM16(fresh)))
			},
			want: []remoteagent.Event{
				{Kind: remoteagent.AgentAudio, PCM: a, EventID: 1},
				{Kind: remoteagent.AgentAudio, PCM: b, EventID: 2},
				{Kind: remoteagent.Interruption, EventID: 2},
				{Kind: remoteagent.AgentAudio, PCM: fresh, EventID: 3},
			},
			wantDropped: 2,
		},
		{
			name: "recorded interruption payload",
			send: func(p *peer) {
				p.send(audioMessage(t, 118, audio.EncodePCM16(a)))
				p.send(loadMessage(t, "interruption")) // event_id 119
				p.send(audioMessage(t, 119, audio.EncodePCM16(stale)))
				p.send(audioMessage(t, 120, audio.EncodePCM16(fresh)))
			},
			want: []remoteagent.Event{
				{Kind: remoteagent.AgentAudio, PCM: a, EventID: 118},
				{Kind: remoteagent.Interruption, EventID: 119},
				{Kind: remoteagent.AgentAudio, PCM: fresh, EventID: 120},
			},
			wantDropped: 1,
		},
		{
			name: "an older interruption does not lower the bar",
			send: func(p *peer) {
				p.send(set(loadMessage(t, "interruption"), "interruption_event.event_id", 10))
				p.send(set(loadMessage(t, "interruption"), "interruption_event.event_id", 5))
				p.send(audioMessage(t, 8, audio.EncodePCM16(stale)))
				p.send(audioMessage(t, 11, audio.EncodePCM16(fresh)))
			},
			want: []remoteagent.Event{
				{Kind: remoteagent.Interruption, EventID: 10},
				{Kind: remoteagent.Interruption, EventID: 5},
				{Kind: remoteagent.AgentAudio, PCM: fresh, EventID: 11},
			},
			wantDropped: 1,
		},
		{
			name: "event id 0 before any interruption is delivered",
			send: func(p *peer) {
				p.send(audioMessage(t, 0, audio.EncodePCM16(a)))
			},
			want: []remoteagent.Event{{Kind: remoteagent.AgentAudio, PCM: a, EventID: 0}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := (&fakeAgent{t: t, metadata: metadataWith(t, "pcm_16000", "pcm_16000"), script: func(p *peer) {
				tt.send(p)
				p.send(endMarker(t))
			}}).start()
			conv := f.dial(t, nil)
			evs := collectUntil(t, conv, isEndMarker)
			got := evs[:len(evs)-1]
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("events:\n got %+v\nwant %+v", got, tt.want)
			}
			if got, want := conv.DroppedAudio(), tt.wantDropped; got != want {
				t.Errorf("DroppedAudio: got %d, want %d", got, want)
			}
		})
	}
}

func TestInterruptionDiscardsResamplerTail(t *testing.T) {
	// At 44.1 kHz the resampler holds back lookahead; after an interruption
	// none of the stale tail may come out in front of the fresh audio.
	const rate = 44100
	loud := sine(440, rate, rate/20, 30000)
	silence := make([]int16, rate/20)
	f := (&fakeAgent{t: t, metadata: metadataWith(t, "pcm_44100", "pcm_16000"), script: func(p *peer) {
		p.send(audioMessage(t, 1, audio.EncodePCM16(loud)))
		p.send(set(loadMessage(t, "interruption"), "interruption_event.event_id", 1))
		p.send(audioMessage(t, 2, audio.EncodePCM16(silence)))
		p.send(endMarker(t))
	}}).start()
	conv := f.dial(t, nil)
	evs := collectUntil(t, conv, isEndMarker)
	var after []int16
	seenInterruption := false
	for _, ev := range evs {
		switch {
		case ev.Kind == remoteagent.Interruption:
			seenInterruption = true
		case ev.Kind == remoteagent.AgentAudio && seenInterruption:
			after = append(after, ev.PCM...)
		}
	}
	if len(after) == 0 {
		t.Fatal("no audio after the interruption")
	}
	for i, s := range after {
		if s != 0 {
			t.Fatalf("sample %d after the interruption: got %d, want 0 (stale tail leaked)", i, s)
		}
	}
}

func TestTextEventsAndIgnoredMessages(t *testing.T) {
	f := (&fakeAgent{t: t, script: func(p *peer) {
		p.send(loadMessage(t, "vad_score"))                         // ignored
		p.send(loadMessage(t, "tentative_user_transcript"))         //
		p.send(loadMessage(t, "user_transcript"))                   //
		p.send(loadMessage(t, "internal_tentative_agent_response")) // ignored
		p.send(set(loadMessage(t, "agent_response"), "agent_response_event.event_id", 4))
		p.send(loadMessage(t, "agent_response_correction"))
		p.send(map[string]any{"type": "some_future_event", "some_future_event": map[string]any{"x": 1}}) // ignored
		p.send(set(loadMessage(t, "conversation_initiation_metadata"), "type", "conversation_initiation_metadata"))
		p.sendRaw(websocket.TextMessage, []byte("not json")) // logged, ignored
		p.sendRaw(websocket.BinaryMessage, []byte{1, 2, 3})  // ignored
		p.send(endMarker(t))
	}}).start()
	conv := f.dial(t, nil)
	evs := collectUntil(t, conv, isEndMarker)
	want := []remoteagent.Event{
		{Kind: remoteagent.TentativeUserTranscript, Text: "I need help with", EventID: 3},
		{Kind: remoteagent.UserTranscript, Text: "Hello, how can you help me today?"},
		{Kind: remoteagent.AgentResponse, Text: "Hello, how can I assist you today?", EventID: 4},
		{Kind: remoteagent.AgentResponseCorrection, Text: "Let me tell you about..."},
		{Kind: remoteagent.AgentResponse, Text: endMarkerText},
	}
	if !reflect.DeepEqual(evs, want) {
		t.Errorf("events:\n got %+v\nwant %+v", evs, want)
	}
}

func TestClientToolCallIsAnsweredWithError(t *testing.T) {
	results := make(chan map[string]any, 1)
	f := (&fakeAgent{t: t, script: func(p *peer) {
		p.send(loadMessage(t, "client_tool_call"))
		results <- p.read()
	}}).start()
	f.dial(t, nil)
	got := waitFor(t, results, "client_tool_result")
	if got["type"] != "client_tool_result" || got["tool_call_id"] != "call_123456" || got["is_error"] != true {
		t.Errorf("tool result: got %v, want type client_tool_result, tool_call_id call_123456, is_error true", got)
	}
	if s, _ := got["result"].(string); !strings.Contains(s, "search_database") {
		t.Errorf("tool result text %q does not name the tool", s)
	}
}

func TestSendUserAudio(t *testing.T) {
	docChunk := loadMessage(t, "user_audio_chunk")  // docAsyncAPIExamples
	src := sine(300, audio.SampleRate, 4000, 10000) // 250 ms, the recommended chunk
	tests := []struct {
		name   string
		input  string
		decode func([]byte) []int16
		want   []int16
		// tolerance of each sample; lookahead: samples the client may hold back.
		tolerance func(want int16) int
		lookahead int
	}{
		{
			name:      "pcm_16000 sent as is",
			input:     "pcm_16000",
			decode:    mono16,
			want:      append(append([]int16{}, src...), src...),
			tolerance: func(int16) int { return 0 },
		},
		{
			name:      "pcm_8000 resampled",
			input:     "pcm_8000",
			decode:    mono16,
			want:      audio.Resample(append(append([]int16{}, src...), src...), audio.SampleRate, 8000),
			tolerance: func(int16) int { return 1 },
			lookahead: 20,
		},
		{
			name:      "pcm_44100 resampled",
			input:     "pcm_44100",
			decode:    mono16,
			want:      audio.Resample(append(append([]int16{}, src...), src...), audio.SampleRate, 44100),
			tolerance: func(int16) int { return 1 },
			lookahead: 120,
		},
		{
			name:   "ulaw_8000 resampled and compressed",
			input:  "ulaw_8000",
			decode: ulawDecode,
			want:   audio.Resample(append(append([]int16{}, src...), src...), audio.SampleRate, 8000),
			// μ-law keeps about 4 bits of mantissa.
			tolerance: func(w int16) int { return 8 + int(math.Abs(float64(w)))/16 },
			lookahead: 20,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			chunks := make(chan map[string]any, 2)
			f := (&fakeAgent{t: t, metadata: metadataWith(t, "pcm_16000", tt.input), script: func(p *peer) {
				for range 2 {
					chunks <- p.read()
				}
			}}).start()
			conv := f.dial(t, nil)
			for range 2 {
				if err := conv.SendUserAudio(src); err != nil {
					t.Fatalf("SendUserAudio: %v", err)
				}
			}
			var got []int16
			for i := range 2 {
				m := waitFor(t, chunks, "user audio")
				if gotKeys, wantKeys := keys(m), keys(docChunk); !reflect.DeepEqual(gotKeys, wantKeys) {
					t.Fatalf("chunk %d keys: got %v, want %v", i, gotKeys, wantKeys)
				}
				raw, err := base64.StdEncoding.DecodeString(m["user_audio_chunk"].(string))
				if err != nil {
					t.Fatalf("chunk %d: %v", i, err)
				}
				got = append(got, tt.decode(raw)...)
			}
			if len(got) > len(tt.want) || len(tt.want)-len(got) > tt.lookahead {
				t.Fatalf("samples: got %d, want %d (less at most %d lookahead)", len(got), len(tt.want), tt.lookahead)
			}
			for i := range got {
				if d := int(got[i]) - int(tt.want[i]); d < -tt.tolerance(tt.want[i]) || d > tt.tolerance(tt.want[i]) {
					t.Fatalf("sample %d: got %d, want %d", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestSendTextMessages(t *testing.T) {
	tests := []struct {
		name string
		send func(*Conversation) error
		want map[string]any // docClientToServer
	}{
		{
			name: "contextual update",
			send: func(c *Conversation) error {
				return c.SendContextualUpdate("User appears to be looking at pricing page")
			},
			want: loadMessage(t, "contextual_update"),
		},
		{
			name: "user message",
			send: func(c *Conversation) error { return c.SendUserMessage("I would like to upgrade my account") },
			want: loadMessage(t, "user_message"),
		},
		{
			name: "user activity",
			send: func(c *Conversation) error { return c.SendUserActivity() },
			want: loadMessage(t, "user_activity"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msgs := make(chan map[string]any, 1)
			f := (&fakeAgent{t: t, script: func(p *peer) { msgs <- p.read() }}).start()
			conv := f.dial(t, nil)
			if err := tt.send(conv); err != nil {
				t.Fatal(err)
			}
			if got := waitFor(t, msgs, "message"); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("message: got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSignedURL(t *testing.T) {
	const key = "sk_test_secret_key_123"
	tests := []struct {
		name           string
		agent          *fakeAgent
		key            string
		wantErr        []string // substrings; nil means success
		wantNotInError string
	}{
		{
			name:  "valid key",
			agent: &fakeAgent{apiKey: key, token: "tok-abc"},
			key:   key,
		},
		{
			name:           "wrong key",
			agent:          &fakeAgent{apiKey: key, token: "tok-abc"},
			key:            "sk_wrong_key",
			wantErr:        []string{"401", "invalid_api_key"},
			wantNotInError: "sk_wrong_key",
		},
		{
			name: "answer without signed_url",
			agent: &fakeAgent{apiKey: key, signedURL: func(*httptest.Server) map[string]any {
				return map[string]any{"detail": "nothing"}
			}},
			key:     key,
			wantErr: []string{"no signed_url"},
		},
		{
			name: "https API handing out ws://",
			agent: &fakeAgent{apiKey: key, tls: true, signedURL: func(*httptest.Server) map[string]any {
				return map[string]any{"signed_url": "ws://127.0.0.1:1/v1/convai/conversation?agent_id=x&token=y"}
			}},
			key:     key,
			wantErr: []string{"want wss"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.agent.t = t
			f := tt.agent.start()
			var logs syncBuffer
			cfg := Config{AgentID: testAgentID, APIKey: tt.key, BaseURL: f.srv.URL,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			if tt.agent.tls {
				cfg.HTTPClient = f.srv.Client()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conv, err := Dial(ctx, cfg)
			if tt.wantErr != nil {
				if err == nil {
					conv.Close()
					t.Fatal("Dial succeeded, want an error")
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				if tt.wantNotInError != "" && strings.Contains(err.Error(), tt.wantNotInError) {
					t.Errorf("error %q leaks %q", err, tt.wantNotInError)
				}
				return
			}
			if err != nil {
				t.Fatalf("Dial: %v", err)
			}
			defer conv.Close()
			req := waitFor(t, f.wsRequest, "upgrade request")
			if got, want := req.URL.Query().Get("token"), "tok-abc"; got != want {
				t.Errorf("token: got %q, want %q", got, want)
			}
			if got := req.Header.Get("xi-api-key"); got != "" {
				t.Errorf("the WebSocket upgrade carried xi-api-key %q; the key must only go to get-signed-url", got)
			}
			if got, want := conv.ConversationID(), "conv_123"; got != want {
				t.Errorf("ConversationID: got %q, want %q", got, want)
			}
			conv.Close()
			for _, secret := range []string{key, "tok-abc"} {
				if strings.Contains(logs.String(), secret) {
					t.Errorf("logs contain the secret %q:\n%s", secret, logs.String())
				}
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test to share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestServerEndsConversation(t *testing.T) {
	tests := []struct {
		name       string
		end        func(p *peer)
		wantCode   int // 0: want a non-close error
		wantNormal bool
		wantServer string // error_type of the server's error message
	}{
		{
			name: "error message then close 1002",
			end: func(p *peer) {
				p.send(loadMessage(t, "error"))
				p.sendRaw(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseProtocolError, "Conversation timed out"))
			},
			wantCode:   websocket.CloseProtocolError,
			wantServer: "transport_receive_timeout",
		},
		{
			name: "agent hangs up with 1000",
			end: func(p *peer) {
				p.sendRaw(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""))
			},
			wantCode:   websocket.CloseNormalClosure,
			wantNormal: true,
		},
		{
			name: "connection dropped without close frame",
			end: func(p *peer) {
				p.ws.UnderlyingConn().Close()
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := (&fakeAgent{t: t, script: func(p *peer) {
				p.send(loadMessage(t, "agent_response"))
				tt.end(p)
			}}).start()
			conv := f.dial(t, nil)

			// Events delivered before the end still arrive, then the channel closes.
			var kinds []remoteagent.EventKind
			for {
				ev, ok := next(t, conv)
				if !ok {
					break
				}
				kinds = append(kinds, ev.Kind)
			}
			if want := []remoteagent.EventKind{remoteagent.AgentResponse}; !reflect.DeepEqual(kinds, want) {
				t.Errorf("events: got %v, want %v", kinds, want)
			}
			err := conv.Err()
			if err == nil {
				t.Fatal("Err: got nil, want the server's reason")
			}
			var ce *CloseError
			isClose := errors.As(err, &ce)
			if tt.wantCode == 0 {
				if isClose {
					t.Errorf("Err: got %v, want a connection error, not a close", err)
				}
			} else {
				if !isClose {
					t.Fatalf("Err: got %v (%T), want *CloseError", err, err)
				}
				if got, want := ce.Code, tt.wantCode; got != want {
					t.Errorf("close code: got %d, want %d", got, want)
				}
				if got, want := ce.Normal(), tt.wantNormal; got != want {
					t.Errorf("Normal: got %v, want %v", got, want)
				}
			}
			if tt.wantServer != "" {
				var se *ServerError
				if !errors.As(err, &se) {
					t.Fatalf("Err %v carries no *ServerError", err)
				}
				if got, want := se.ErrorType, tt.wantServer; got != want {
					t.Errorf("error_type: got %q, want %q", got, want)
				}
			}
			if err := conv.SendUserAudio([]int16{1, 2, 3}); !errors.Is(err, ErrClosed) {
				t.Errorf("SendUserAudio after the end: got %v, want ErrClosed", err)
			}
			if err := conv.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
}

func TestEventOverflowClosesConversation(t *testing.T) {
	f := (&fakeAgent{t: t, script: func(p *peer) {
		for range 3 {
			p.send(loadMessage(t, "agent_response"))
		}
	}}).start()
	conv := f.dial(t, func(c *Config) { c.EventBuffer = 2 })
	// Read nothing until the client has given up.
	waitFor(t, conv.Done(), "end of conversation")
	if got, want := waitFor(t, f.closeCode, "close code"), websocket.CloseGoingAway; got != want {
		t.Errorf("close code sent to the server: got %d, want %d", got, want)
	}
	var n int
	for range conv.Events() {
		n++
	}
	if got, want := n, 2; got != want {
		t.Errorf("buffered events delivered: got %d, want %d", got, want)
	}
	if err := conv.Err(); !errors.Is(err, ErrEventOverflow) {
		t.Errorf("Err: got %v, want ErrEventOverflow", err)
	}
}

func TestCloseIsIdempotentAndStopsGoroutines(t *testing.T) {
	f := (&fakeAgent{t: t}).start()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conv, err := Dial(ctx, Config{AgentID: testAgentID, BaseURL: f.srv.URL, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := conv.Close(); err != nil {
			t.Errorf("Close #%d: got %v, want nil", i+1, err)
		}
	}
	if _, ok := <-conv.Events(); ok {
		t.Error("Events still open after Close")
	}
	if err := conv.Err(); err != nil {
		t.Errorf("Err after Close: got %v, want nil", err)
	}
	if err := conv.SendUserAudio([]int16{1}); !errors.Is(err, ErrClosed) {
		t.Errorf("SendUserAudio after Close: got %v, want ErrClosed", err)
	}
	if err := conv.SendUserMessage("hi"); !errors.Is(err, ErrClosed) {
		t.Errorf("SendUserMessage after Close: got %v, want ErrClosed", err)
	}
	if got, want := waitFor(t, f.closeCode, "close code"), websocket.CloseNormalClosure; got != want {
		t.Errorf("close code sent to the server: got %d, want %d", got, want)
	}
	if n := settleConversationGoroutines(); n != 0 {
		t.Errorf("goroutines after Close: got %d, want 0\n%s", n, conversationStacks())
	}
}

func TestConcurrentSendAndClose(t *testing.T) {
	// Run with -race: senders racing Close must neither panic nor hang.
	f := (&fakeAgent{t: t}).start()
	conv := f.dial(t, nil)
	done := make(chan struct{})
	for range 4 {
		go func() {
			defer func() { done <- struct{}{} }()
			for {
				if err := conv.SendUserAudio(make([]int16, 160)); err != nil {
					if !errors.Is(err, ErrClosed) {
						t.Errorf("SendUserAudio: %v", err)
					}
					return
				}
			}
		}()
	}
	conv.Close()
	for range 4 {
		waitFor(t, done, "sender to stop")
	}
}

func TestHTTPStatusOnSignedURLIsReported(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream down", http.StatusBadGateway)
	}))
	defer srv.Close()
	_, err := Dial(context.Background(), Config{AgentID: testAgentID, APIKey: "k", BaseURL: srv.URL})
	if err == nil || !strings.Contains(err.Error(), "502") || !strings.Contains(err.Error(), "upstream down") {
		t.Errorf("Dial error: got %v, want one naming 502 and the body", err)
	}
}

func TestMalformedAudioEndsConversation(t *testing.T) {
	// Audio is never dropped quietly: an audio message the client cannot
	// read ends the conversation with a protocol error.
	tests := []struct {
		name    string
		msg     map[string]any
		wantErr string
	}{
		{
			name:    "bad base64",
			msg:     set(loadMessage(t, "audio"), "audio_event.event_id", 1), // docs placeholder "base64_encoded_audio_string"
			wantErr: "bad base64",
		},
		{
			name:    "event id not a number",
			msg:     set(audioMessage(t, 1, []byte{0, 0}), "audio_event.event_id", "one"),
			wantErr: "unreadable audio message",
		},
		{
			name:    "no audio_event",
			msg:     map[string]any{"type": "audio"},
			wantErr: "without audio_event",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := (&fakeAgent{t: t, script: func(p *peer) { p.send(tt.msg) }}).start()
			conv := f.dial(t, nil)
			waitFor(t, conv.Done(), "end of conversation")
			if err := conv.Err(); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Err: got %v, want one mentioning %q", err, tt.wantErr)
			}
			if got, want := waitFor(t, f.closeCode, "close code"), websocket.CloseProtocolError; got != want {
				t.Errorf("close code sent to the server: got %d, want %d", got, want)
			}
		})
	}
}

// mono16 decodes what the client sent as 16-bit mono PCM.
func mono16(b []byte) []int16 { return audio.DecodePCM16(b, 1) }
