package elevenlabs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/remoteagent"
	"avatarsvc/gpu-fleet/wsconn"
)

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
	log = log.With("provider", Provider, "agent_id", cfg.AgentID)
	wsURL, err := conversationURL(ctx, cfg)
	if err != nil {
		return nil, err
	}
	dialer := cfg.Dialer
	if dialer == nil {
		dialer = &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: defaultHandshakeTimeout}
	}
	log.Info("elevenlabs: connecting", "host", wsURL.Host, "path", wsURL.Path, "signed", cfg.APIKey != "")
	ws, resp, err := dialer.DialContext(ctx, wsURL.String(), nil)
	if err != nil {
		return nil, handshakeError(err, resp)
	}
	c := newConversation(ws, cfg, log)
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
	c.conn = wsconn.Start(ws, wsconn.Options{
		Queue: sendQueue, Urgent: replyQueue,
		WriteTimeout: c.writeTimeout, PingInterval: c.pingInterval, CloseGrace: closeGrace,
	})
	go c.readLoop()
	return c, nil
}

// conversationURL is the WebSocket to open: a public agent's, or a signed
// one for a private agent.
func conversationURL(ctx context.Context, cfg Config) (*url.URL, error) {
	base, err := parseBaseURL(cfg.BaseURL)
	if err != nil {
		return nil, err
	}
	if cfg.APIKey != "" {
		return fetchSignedURL(ctx, cfg, base)
	}
	return publicURL(base, cfg.AgentID), nil
}

// newConversation wraps a dialled connection; every frame that arrives
// (message, ping or pong) keeps the idle deadline away.
func newConversation(ws *websocket.Conn, cfg Config, log *slog.Logger) *Conversation {
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
		events:       make(chan remoteagent.Event, bufferSize),
		quit:         make(chan struct{}),
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
	return c
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

// writeText writes one message during the handshake, before the writer
// goroutine owns the connection.
func (c *Conversation) writeText(data []byte) error {
	c.ws.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	return c.ws.WriteMessage(websocket.TextMessage, data)
}
