package elevenlabs

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"avatarsvc/gpu-fleet/audio"
)

// DefaultBaseURL is the ElevenLabs API origin. The WebSocket URL is derived
// from it (https -> wss).
const DefaultBaseURL = "https://api.elevenlabs.io"

const (
	conversationPath = "v1/convai/conversation"
	signedURLPath    = "v1/convai/conversation/get-signed-url"

	defaultEventBuffer      = 512
	defaultWriteTimeout     = 10 * time.Second
	defaultIdleTimeout      = 60 * time.Second
	defaultPingInterval     = 20 * time.Second
	defaultHandshakeTimeout = 15 * time.Second

	// sendQueue bounds the user audio and text waiting for the writer;
	// SendUserAudio blocks (for at most the write timeout) when it is full.
	sendQueue = 64
	// controlQueue holds replies to the server (pongs, tool results), which
	// the writer sends ahead of queued audio.
	controlQueue = 16
	// maxMessageBytes caps one server message, as the Python client does.
	maxMessageBytes = 16 << 20
	// closeGrace is how long Close waits for the server's close reply
	// before dropping the TCP connection.
	closeGrace = time.Second
)

var defaultHTTPClient = &http.Client{Timeout: 30 * time.Second}

// Config says which agent to talk to and how.
type Config struct {
	// AgentID is the agent's id ("agent_..." for current agents). Required.
	AgentID string
	// APIKey, when set, makes Dial fetch a signed URL first (private
	// agents); empty means a public agent. The key is only ever sent to
	// BaseURL's get-signed-url endpoint, never on the WebSocket.
	APIKey string
	// BaseURL is the API origin, DefaultBaseURL when empty. An http:// base
	// (tests) gives ws:// WebSockets; an https:// base requires wss://,
	// including for the signed URL the API returns.
	BaseURL string
	// HTTPClient makes the signed-URL request; a client with a 30 s
	// timeout when nil.
	HTTPClient *http.Client
	// Dialer opens the WebSocket; one with a 15 s handshake timeout and
	// the environment's proxy when nil.
	Dialer *websocket.Dialer
	// DynamicVariables fill the agent's {{variables}}; values must be
	// strings, numbers or booleans. Sent in
	// conversation_initiation_client_data.
	DynamicVariables map[string]any
	// ConversationConfigOverride is sent as conversation_config_override,
	// e.g. {"agent": {"first_message": "Hi"}, "tts": {"voice_id": "..."}}.
	// The agent must allow each override in its security settings.
	ConversationConfigOverride map[string]any
	// Logger gets connection life-cycle and protocol anomalies; nothing is
	// logged when nil. The API key and signed-URL token are never logged.
	Logger *slog.Logger

	// EventBuffer is the capacity of the Events channel (default 512). When
	// it fills up the conversation ends with ErrEventOverflow.
	EventBuffer int
	// WriteTimeout bounds every WebSocket write (default 10 s).
	WriteTimeout time.Duration
	// IdleTimeout ends the conversation when nothing at all (message, ping
	// or pong frame) arrives for this long (default 60 s). It also bounds
	// the wait for conversation_initiation_metadata in Dial.
	IdleTimeout time.Duration
	// PingInterval is how often the client sends a WebSocket ping frame so
	// that a silent but healthy connection keeps refreshing IdleTimeout
	// (default 20 s; negative disables).
	PingInterval time.Duration
}

// Conversation is one live session with an agent. Its methods are safe for
// concurrent use. Exactly two goroutines serve it, one reading and one
// writing the WebSocket; both are gone once Close returns.
type Conversation struct {
	ws  *websocket.Conn
	log *slog.Logger

	conversationID string
	outFmt, inFmt  audioFormat

	writeTimeout time.Duration
	idleTimeout  time.Duration
	pingInterval time.Duration

	events     chan Event
	send       chan []byte   // user audio and messages, in order
	control    chan []byte   // replies to the server, sent first
	quit       chan struct{} // closed by Close
	writerGone chan struct{} // closed when the writer stops writing
	writerDone chan struct{} // closed when the writer goroutine returns
	ended      chan struct{} // closed once Err is final, before Events closes
	readerDone chan struct{} // closed after Events is closed
	closeOnce  sync.Once

	mu         sync.Mutex
	err        error
	writeErr   error
	closeCode  int // close frame the writer sends when the reader fails locally
	closeText  string
	dropped    int // stale audio messages dropped after interruptions
	userPacing sync.Mutex

	// live is set before the goroutines start; until then (the handshake)
	// only ctx and the initial deadline bound reads.
	live bool

	// Reader goroutine state.
	pendingServerErr *ServerError
	interrupted      bool
	lastInterrupt    int
	outResampler     *audio.Resampler
	oddByte          []byte // a PCM byte split from its pair across messages

	// SendUserAudio state, under userPacing.
	inResampler *audio.Resampler
}

// Dial connects to the agent, sends conversation_initiation_client_data and
// waits for conversation_initiation_metadata. ctx bounds only the dialling
// and that handshake; the conversation then lives until Close or the
// server ends it.
func Dial(ctx context.Context, cfg Config) (*Conversation, error) {
	if cfg.AgentID == "" {
		return nil, errors.New("elevenlabs: Config.AgentID is empty")
	}
	if err := checkDynamicVariables(cfg.DynamicVariables); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	base, err := parseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	var wsURL *url.URL
	if cfg.APIKey != "" {
		wsURL, err = fetchSignedURL(ctx, cfg, base)
		if err != nil {
			return nil, err
		}
	} else {
		wsURL = publicURL(base, cfg.AgentID)
	}

	dialer := cfg.Dialer
	if dialer == nil {
		dialer = &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: defaultHandshakeTimeout}
	}
	log = log.With("provider", Provider, "agent_id", cfg.AgentID)
	log.Info("elevenlabs: connecting", "host", wsURL.Host, "path", wsURL.Path, "signed", cfg.APIKey != "")
	ws, resp, err := dialer.DialContext(ctx, wsURL.String(), nil)
	if err != nil {
		return nil, handshakeError(err, resp)
	}

	bufferSize := cfg.EventBuffer
	if bufferSize <= 0 {
		bufferSize = defaultEventBuffer
	}
	c := &Conversation{
		ws:           ws,
		log:          log,
		writeTimeout: orDefault(cfg.WriteTimeout, defaultWriteTimeout),
		idleTimeout:  orDefault(cfg.IdleTimeout, defaultIdleTimeout),
		pingInterval: orDefault(cfg.PingInterval, defaultPingInterval),
		events:       make(chan Event, bufferSize),
		send:         make(chan []byte, sendQueue),
		control:      make(chan []byte, controlQueue),
		quit:         make(chan struct{}),
		writerGone:   make(chan struct{}),
		writerDone:   make(chan struct{}),
		ended:        make(chan struct{}),
		readerDone:   make(chan struct{}),
		closeCode:    websocket.CloseNormalClosure,
	}
	ws.SetReadLimit(maxMessageBytes)
	ws.SetPongHandler(func(string) error {
		c.touch()
		return nil
	})
	ws.SetPingHandler(func(data string) error {
		c.touch()
		err := ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(c.writeTimeout))
		var netErr net.Error
		if errors.Is(err, websocket.ErrCloseSent) || (errors.As(err, &netErr) && netErr.Timeout()) {
			return nil // as gorilla's default handler: the read loop finds out
		}
		return err
	})

	first := initiationMessage{
		Type:                       typeInitiation,
		ConversationConfigOverride: cfg.ConversationConfigOverride,
		DynamicVariables:           cfg.DynamicVariables,
	}
	if err := c.handshake(ctx, first); err != nil {
		ws.Close()
		return nil, err
	}
	log.Info("elevenlabs: conversation started", "conversation_id", c.conversationID,
		"agent_output_audio_format", c.outFmt.name, "user_input_audio_format", c.inFmt.name)
	c.live = true
	go c.readLoop()
	go c.writeLoop()
	return c, nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

func parseBaseURL(s string) (*url.URL, error) {
	if s == "" {
		s = DefaultBaseURL
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("elevenlabs: Config.BaseURL: %w", err)
	}
	if (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("elevenlabs: Config.BaseURL %q: want an http(s)://host origin", s)
	}
	u.RawQuery, u.Fragment = "", ""
	if u.Path == "" {
		u.Path = "/"
	}
	return u, nil
}

// publicURL is the WebSocket URL of a public agent.
func publicURL(base *url.URL, agentID string) *url.URL {
	u := base.JoinPath(conversationPath)
	u.Scheme = "wss"
	if base.Scheme == "http" {
		u.Scheme = "ws"
	}
	u.RawQuery = url.Values{"agent_id": {agentID}}.Encode()
	return u
}

// fetchSignedURL asks the API for a WebSocket URL that authorises one
// conversation with a private agent.
func fetchSignedURL(ctx context.Context, cfg Config, base *url.URL) (*url.URL, error) {
	u := base.JoinPath(signedURLPath)
	u.RawQuery = url.Values{"agent_id": {cfg.AgentID}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("elevenlabs: get signed URL: %w", err)
	}
	req.Header.Set("xi-api-key", cfg.APIKey)
	req.Header.Set("Accept", "application/json")
	client := cfg.HTTPClient
	if client == nil {
		client = defaultHTTPClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("elevenlabs: get signed URL: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("elevenlabs: get signed URL: reading the answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("elevenlabs: get signed URL: %s: %s", resp.Status, snippet(body))
	}
	var out struct {
		SignedURL string `json:"signed_url"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("elevenlabs: get signed URL: unreadable answer: %w", err)
	}
	if out.SignedURL == "" {
		return nil, errors.New("elevenlabs: get signed URL: answer has no signed_url")
	}
	su, err := url.Parse(out.SignedURL)
	if err != nil || su.Host == "" {
		return nil, errors.New("elevenlabs: get signed URL: signed_url is not a URL")
	}
	// Never downgrade: a TLS API must hand out a TLS WebSocket.
	if su.Scheme != "wss" && !(su.Scheme == "ws" && base.Scheme == "http") {
		return nil, fmt.Errorf("elevenlabs: get signed URL: signed_url has scheme %q, want wss", su.Scheme)
	}
	return su, nil
}

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		s = "(empty body)"
	}
	return s
}

func handshakeError(err error, resp *http.Response) error {
	if resp == nil {
		return fmt.Errorf("elevenlabs: websocket dial: %w", err)
	}
	var body []byte
	if resp.Body != nil {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
	}
	return fmt.Errorf("elevenlabs: websocket handshake: %s: %w: %s", resp.Status, err, snippet(body))
}

// handshake sends the initiation message and reads until the metadata.
// It runs before the reader and writer goroutines start, so it may use the
// connection from this goroutine alone.
func (c *Conversation) handshake(ctx context.Context, first initiationMessage) error {
	// Cancelling ctx fails the blocked read or write at once.
	stop := context.AfterFunc(ctx, func() {
		past := time.Unix(1, 0)
		c.ws.SetReadDeadline(past)
		c.ws.SetWriteDeadline(past)
	})
	defer stop()
	wrap := func(step string, err error) error {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("elevenlabs: %s: %w", step, ctxErr)
		}
		return fmt.Errorf("elevenlabs: %s: %w", step, err)
	}

	data, err := json.Marshal(first)
	if err != nil {
		return fmt.Errorf("elevenlabs: encoding %s: %w", typeInitiation, err)
	}
	if err := c.writeText(data); err != nil {
		return wrap("sending "+typeInitiation, err)
	}
	c.ws.SetReadDeadline(time.Now().Add(c.idleTimeout))
	if ctx.Err() != nil { // cancelled between the write and the line above
		return wrap("waiting for "+typeMetadata, ctx.Err())
	}
	for {
		kind, data, err := c.ws.ReadMessage()
		if err != nil {
			return wrap("waiting for "+typeMetadata, c.readError(err))
		}
		if kind != websocket.TextMessage {
			continue
		}
		var m serverMessage
		if err := json.Unmarshal(data, &m); err != nil {
			c.log.Warn("elevenlabs: unreadable message before metadata", "err", err, "bytes", len(data))
			continue
		}
		switch m.Type {
		case typeMetadata:
			if err := c.applyMetadata(&m); err != nil {
				return err
			}
			if !stop() {
				return wrap("waiting for "+typeMetadata, context.Cause(ctx))
			}
			return nil
		case typePing:
			if m.Ping != nil && m.Ping.EventID != "" {
				pong, _ := json.Marshal(pongMessage{Type: typePong, EventID: m.Ping.EventID})
				if err := c.writeText(pong); err != nil {
					return wrap("answering ping", err)
				}
			}
		case typeError:
			c.pendingServerErr = m.Error
		case typeAudio:
			return fmt.Errorf("elevenlabs: protocol error: audio before %s", typeMetadata)
		default:
			c.log.Debug("elevenlabs: ignoring message before metadata", "type", m.Type)
		}
	}
}

func (c *Conversation) applyMetadata(m *serverMessage) error {
	md := m.Metadata
	if md == nil {
		return fmt.Errorf("elevenlabs: protocol error: %s without conversation_initiation_metadata_event", typeMetadata)
	}
	out, err := parseAudioFormat(md.AgentOutputAudioFormat)
	if err != nil {
		return fmt.Errorf("agent_output_audio_format: %w", err)
	}
	inName := md.UserInputAudioFormat
	if inName == "" {
		inName = "pcm_16000" // what the JS client assumes when it is missing
	}
	in, err := parseAudioFormat(inName)
	if err != nil {
		return fmt.Errorf("user_input_audio_format: %w", err)
	}
	c.conversationID = md.ConversationID
	c.outFmt, c.inFmt = out, in
	c.resetAgentAudio()
	if in.rate != audio.SampleRate {
		c.inResampler = audio.NewResampler(audio.SampleRate, in.rate)
	}
	return nil
}

// ConversationID is the server's id for this conversation.
func (c *Conversation) ConversationID() string { return c.conversationID }

// AgentOutputFormat is the agent's audio format as the server named it,
// e.g. "pcm_16000". Events always carry 16 kHz PCM regardless.
func (c *Conversation) AgentOutputFormat() string { return c.outFmt.name }

// UserInputFormat is the format the server expects user audio in.
// SendUserAudio converts 16 kHz PCM to it.
func (c *Conversation) UserInputFormat() string { return c.inFmt.name }

// Events delivers what the agent says and does. It is closed when the
// conversation ends, after which Err says why.
func (c *Conversation) Events() <-chan Event { return c.events }

// Done is closed when the conversation has ended (Events is closed and
// Err is final).
func (c *Conversation) Done() <-chan struct{} { return c.readerDone }

// Err is nil while the conversation runs and after Close; otherwise it
// says why the conversation ended: a *CloseError when the server closed it
// (CloseError.Normal for the agent hanging up), ErrEventOverflow, a
// protocol error, or a connection error.
func (c *Conversation) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// DroppedAudio is how many stale audio messages were discarded after
// interruptions so far.
func (c *Conversation) DroppedAudio() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dropped
}

// Close ends the conversation: it sends a close frame, waits briefly for the
// server's reply, closes the connection and waits for both goroutines to
// exit. Audio still queued is discarded. Close is idempotent and always
// returns nil; Err reports how the conversation ended.
func (c *Conversation) Close() error {
	c.closeOnce.Do(func() { close(c.quit) })
	<-c.readerDone
	<-c.writerDone
	return nil
}

// SendUserAudio sends 16 kHz mono PCM from the user, converted to the
// agent's user_input_audio_format. It blocks while the send queue is full
// (bounded by the write timeout of the chunks ahead) and returns an error
// wrapping ErrClosed once the conversation has ended. The documentation
// recommends chunks of about 250 ms (4000 samples).
func (c *Conversation) SendUserAudio(pcm []int16) error {
	if len(pcm) == 0 {
		return nil
	}
	// One lock around conversion and queueing keeps the resampler's state
	// and the queue in the same order when callers race.
	c.userPacing.Lock()
	defer c.userPacing.Unlock()
	samples := pcm
	if c.inResampler != nil {
		samples = c.inResampler.Process(pcm)
		if len(samples) == 0 {
			return nil
		}
	}
	var raw []byte
	if c.inFmt.encoding == encodingULaw {
		raw = ulawEncode(samples)
	} else {
		raw = audio.EncodePCM16(samples)
	}
	data, err := json.Marshal(userAudioMessage{UserAudioChunk: base64.StdEncoding.EncodeToString(raw)})
	if err != nil {
		return err
	}
	return c.enqueue(data)
}

// SendContextualUpdate gives the agent background information without
// interrupting it (a contextual_update message).
func (c *Conversation) SendContextualUpdate(text string) error {
	return c.sendJSON(textMessage{Type: typeContextualUpdate, Text: text})
}

// SendUserMessage sends text as if the user had said it (user_message).
func (c *Conversation) SendUserMessage(text string) error {
	return c.sendJSON(textMessage{Type: typeUserMessage, Text: text})
}

// SendUserActivity tells the agent the user is present, resetting its turn
// timeout (user_activity).
func (c *Conversation) SendUserActivity() error {
	return c.sendJSON(typeOnlyMessage{Type: typeUserActivity})
}

func (c *Conversation) sendJSON(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	c.userPacing.Lock()
	defer c.userPacing.Unlock()
	return c.enqueue(data)
}

func (c *Conversation) enqueue(data []byte) error {
	select {
	case <-c.ended:
		return c.closedErr()
	case <-c.writerGone:
		return c.closedErr()
	default:
	}
	select {
	case c.send <- data:
		return nil
	case <-c.ended:
		return c.closedErr()
	case <-c.writerGone:
		return c.closedErr()
	}
}

func (c *Conversation) closedErr() error {
	if err := c.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return ErrClosed
}

// touch extends the read deadline: something arrived. During the handshake
// the deadline stays as Dial set it, so that cancelling ctx is not undone.
func (c *Conversation) touch() {
	if c.live {
		c.ws.SetReadDeadline(time.Now().Add(c.idleTimeout))
	}
}

func (c *Conversation) writeText(data []byte) error {
	c.ws.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, data)
}

// readError turns a read failure into the error the conversation ends with.
func (c *Conversation) readError(err error) error {
	var ce *websocket.CloseError
	// 1006 is never sent: gorilla reports a connection that ended without
	// a close frame that way.
	if errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure {
		return &CloseError{Code: ce.Code, Reason: ce.Text, Server: c.pendingServerErr}
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() {
		err = fmt.Errorf("elevenlabs: nothing received for %s: %w", c.idleTimeout, err)
	} else {
		err = fmt.Errorf("elevenlabs: connection lost: %w", err)
	}
	if c.pendingServerErr != nil {
		return errors.Join(c.pendingServerErr, err)
	}
	return err
}

func (c *Conversation) quitting() bool {
	select {
	case <-c.quit:
		return true
	default:
		return false
	}
}

// readLoop is the only reader of the connection and the only sender on
// Events.
func (c *Conversation) readLoop() {
	var err error
	defer func() {
		c.mu.Lock()
		switch {
		case c.quitting() && !isLocal(err):
			c.err = nil // Close was called; whatever the read saw is its echo
		case c.writeErr != nil && !isCloseError(err) && !isLocal(err):
			c.err = c.writeErr // the writer failed first and closed the connection
		default:
			var le *localError
			if errors.As(err, &le) {
				err = le.err
			}
			c.err = err
		}
		final := c.err
		c.mu.Unlock()
		// Log before signalling: once Close returns nothing may log.
		if final != nil {
			c.log.Info("elevenlabs: conversation ended", "conversation_id", c.conversationID, "err", final)
		} else {
			c.log.Info("elevenlabs: conversation closed", "conversation_id", c.conversationID)
		}
		close(c.ended)
		close(c.events)
		close(c.readerDone)
	}()
	c.touch()
	for {
		kind, data, rerr := c.ws.ReadMessage()
		if rerr != nil {
			err = c.readError(rerr)
			return
		}
		c.touch()
		if kind != websocket.TextMessage {
			c.log.Debug("elevenlabs: ignoring binary message", "bytes", len(data))
			continue
		}
		if err = c.handle(data); err != nil {
			return
		}
	}
}

// localError marks errors the client itself ends the conversation with,
// which Close must not hide.
type localError struct{ err error }

func (e *localError) Error() string { return e.err.Error() }
func (e *localError) Unwrap() error { return e.err }

func isLocal(err error) bool {
	var le *localError
	return errors.As(err, &le)
}

func isCloseError(err error) bool {
	var ce *CloseError
	return errors.As(err, &ce)
}

// fail ends the conversation from the reader with a local error; the writer
// then sends a close frame with the given code.
func (c *Conversation) fail(code int, err error) error {
	c.mu.Lock()
	c.closeCode, c.closeText = code, truncateCloseText(err.Error())
	c.mu.Unlock()
	return &localError{err: err}
}

func truncateCloseText(s string) string {
	const maxLen = 120 // a close frame's reason must fit in 123 bytes
	if len(s) > maxLen {
		s = strings.ToValidUTF8(s[:maxLen], "")
	}
	return s
}

func protocolErrorf(format string, args ...any) error {
	return fmt.Errorf("elevenlabs: protocol error: "+format, args...)
}

// handle processes one server message; a non-nil result ends the
// conversation.
func (c *Conversation) handle(data []byte) error {
	var m serverMessage
	if err := json.Unmarshal(data, &m); err != nil {
		var t typeOnlyMessage
		if json.Unmarshal(data, &t) == nil && t.Type == typeAudio {
			// Never lose audio quietly.
			return c.fail(websocket.CloseProtocolError, protocolErrorf("unreadable audio message: %v", err))
		}
		c.log.Warn("elevenlabs: unreadable message ignored", "err", err, "bytes", len(data))
		return nil
	}
	switch m.Type {
	case typeAudio:
		if m.Audio == nil {
			return c.fail(websocket.CloseProtocolError, protocolErrorf("audio message without audio_event"))
		}
		if c.interrupted && m.Audio.EventID <= c.lastInterrupt {
			c.mu.Lock()
			c.dropped++
			c.mu.Unlock()
			c.log.Debug("elevenlabs: dropped stale audio", "event_id", m.Audio.EventID, "interrupted_at", c.lastInterrupt)
			return nil
		}
		raw, err := base64.StdEncoding.DecodeString(m.Audio.AudioBase64)
		if err != nil {
			return c.fail(websocket.CloseProtocolError, protocolErrorf("audio event %d: bad base64: %v", m.Audio.EventID, err))
		}
		pcm := c.decodeAgentAudio(raw)
		if len(pcm) == 0 {
			return nil // all of it is held back as resampler lookahead
		}
		return c.emit(Event{Kind: AgentAudio, PCM: pcm, EventID: m.Audio.EventID})

	case typeInterruption:
		id := 0
		if m.Interruption != nil {
			id = m.Interruption.EventID
		}
		if !c.interrupted || id > c.lastInterrupt {
			c.lastInterrupt = id
		}
		c.interrupted = true
		c.resetAgentAudio()
		return c.emit(Event{Kind: Interruption, EventID: id})

	case typeAgentResponse:
		if m.AgentResponse == nil {
			return nil
		}
		return c.emit(Event{Kind: AgentResponse, Text: strings.TrimSpace(m.AgentResponse.AgentResponse), EventID: m.AgentResponse.EventID})

	case typeAgentResponseCorrection:
		if m.AgentResponseCorrection == nil {
			return nil
		}
		return c.emit(Event{Kind: AgentResponseCorrection, Text: strings.TrimSpace(m.AgentResponseCorrection.CorrectedAgentResponse), EventID: m.AgentResponseCorrection.EventID})

	case typeUserTranscript:
		if m.UserTranscription == nil {
			return nil
		}
		return c.emit(Event{Kind: UserTranscript, Text: strings.TrimSpace(m.UserTranscription.UserTranscript), EventID: m.UserTranscription.EventID})

	case typeTentativeUserTranscript:
		if m.TentativeUserTranscription == nil {
			return nil
		}
		return c.emit(Event{Kind: TentativeUserTranscript, Text: strings.TrimSpace(m.TentativeUserTranscription.UserTranscript), EventID: m.TentativeUserTranscription.EventID})

	case typePing:
		if m.Ping == nil || m.Ping.EventID == "" {
			c.log.Warn("elevenlabs: ping without event_id ignored")
			return nil
		}
		return c.reply(pongMessage{Type: typePong, EventID: m.Ping.EventID})

	case typeClientToolCall:
		if m.ClientToolCall == nil {
			return nil
		}
		// The agent waits for a result; say at once that there is none,
		// as the official JS client does for a tool it does not have.
		c.log.Warn("elevenlabs: agent called a client tool this client does not have", "tool", m.ClientToolCall.ToolName)
		return c.reply(clientToolResultMessage{
			Type:       typeClientToolResult,
			ToolCallID: m.ClientToolCall.ToolCallID,
			Result:     fmt.Sprintf("Client tool %q is not available on this client", m.ClientToolCall.ToolName),
			IsError:    true,
		})

	case typeError:
		if m.Error != nil {
			c.pendingServerErr = m.Error
			c.log.Warn("elevenlabs: server error", "code", m.Error.Code, "error_type", m.Error.ErrorType, "message", m.Error.Message)
		}
		return nil

	default:
		// vad_score, internal_tentative_agent_response, agent_tool_response
		// and the rest carry nothing the avatar uses.
		c.log.Debug("elevenlabs: ignoring message", "type", m.Type)
		return nil
	}
}

// emit hands an event to the consumer without ever blocking the reader.
func (c *Conversation) emit(ev Event) error {
	select {
	case c.events <- ev:
		return nil
	default:
		return c.fail(websocket.CloseGoingAway, ErrEventOverflow)
	}
}

// reply queues a message to the server ahead of user audio.
func (c *Conversation) reply(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	select {
	case c.control <- data:
	case <-c.writerGone: // the conversation is ending; the read will fail next
	}
	return nil
}

// decodeAgentAudio turns one audio payload into 16 kHz PCM.
func (c *Conversation) decodeAgentAudio(raw []byte) []int16 {
	var samples []int16
	if c.outFmt.encoding == encodingULaw {
		samples = ulawDecode(raw)
	} else {
		if len(c.oddByte) > 0 {
			raw = append(c.oddByte, raw...)
			c.oddByte = nil
		}
		if len(raw)%2 == 1 {
			c.oddByte = []byte{raw[len(raw)-1]}
			raw = raw[:len(raw)-1]
		}
		samples = audio.DecodePCM16(raw, 1)
	}
	if c.outResampler != nil {
		samples = c.outResampler.Process(samples)
	}
	return samples
}

// resetAgentAudio forgets partial agent audio: after an interruption the
// resampler's lookahead and any split byte belong to the stale response.
func (c *Conversation) resetAgentAudio() {
	c.oddByte = nil
	c.outResampler = nil
	if c.outFmt.rate != audio.SampleRate {
		c.outResampler = audio.NewResampler(c.outFmt.rate, audio.SampleRate)
	}
}

// writeLoop is the only writer of data messages on the connection.
func (c *Conversation) writeLoop() {
	defer close(c.writerDone)
	var tick <-chan time.Time
	if c.pingInterval > 0 {
		t := time.NewTicker(c.pingInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		// Replies to the server go before queued user audio.
		select {
		case data := <-c.control:
			if !c.write(data) {
				return
			}
			continue
		default:
		}
		select {
		case <-c.quit:
			c.shutdown(websocket.CloseNormalClosure, "", true)
			return
		case <-c.readerDone:
			c.mu.Lock()
			code, text := c.closeCode, c.closeText
			c.mu.Unlock()
			c.shutdown(code, text, false)
			return
		case data := <-c.control:
			if !c.write(data) {
				return
			}
		case data := <-c.send:
			if !c.write(data) {
				return
			}
		case <-tick:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.writeTimeout)); err != nil {
				c.writeFailed(fmt.Errorf("elevenlabs: write ping: %w", err))
				return
			}
		}
	}
}

func (c *Conversation) write(data []byte) bool {
	if err := c.writeText(data); err != nil {
		c.writeFailed(fmt.Errorf("elevenlabs: write: %w", err))
		return false
	}
	return true
}

// writeFailed records a write error and closes the connection so that the
// reader ends too. If the reader saw a close frame, that is the reason
// reported instead.
func (c *Conversation) writeFailed(err error) {
	c.mu.Lock()
	c.writeErr = err
	c.mu.Unlock()
	close(c.writerGone)
	c.ws.Close()
	<-c.readerDone
}

// shutdown sends a close frame (a no-op if one was already exchanged),
// optionally waits for the reader to see the server's reply, then closes
// the connection.
func (c *Conversation) shutdown(code int, text string, waitReader bool) {
	close(c.writerGone)
	msg := websocket.FormatCloseMessage(code, text)
	_ = c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(c.writeTimeout))
	if waitReader {
		t := time.NewTimer(closeGrace)
		select {
		case <-c.readerDone:
		case <-t.C:
		}
		t.Stop()
	}
	c.ws.Close()
	<-c.readerDone
}
