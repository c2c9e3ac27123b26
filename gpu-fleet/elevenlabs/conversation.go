package elevenlabs

import (
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/remoteagent"
	"avatarsvc/gpu-fleet/wsconn"
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
	// replyQueue holds replies to the server (pongs, tool results), which
	// the writer sends ahead of queued audio.
	replyQueue = 16
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
// concurrent use. Exactly two goroutines serve it, one reading the
// WebSocket (read.go) and one writing it (gpu-fleet/wsconn); both are gone
// once Close returns. Dialling is in dial.go, sending in write.go.
type Conversation struct {
	ws   *websocket.Conn // read by readLoop; written by conn after Dial
	conn *wsconn.Conn
	log  *slog.Logger

	conversationID string
	outFmt, inFmt  audioFormat

	writeTimeout time.Duration
	idleTimeout  time.Duration
	pingInterval time.Duration

	events     chan remoteagent.Event
	quit       chan struct{} // closed by Close
	readerDone chan struct{} // closed after Events is closed
	closeOnce  sync.Once

	mu         sync.Mutex
	err        error
	dropped    int // stale audio messages dropped after interruptions
	userPacing sync.Mutex

	// live is set before the goroutines start; until then (the handshake)
	// only ctx and the initial deadline bound reads.
	live bool

	// Reader goroutine state.
	closeCode        int // the close frame to send when the reader fails locally
	closeText        string
	pendingServerErr *ServerError
	interrupted      bool
	lastInterrupt    int
	outResampler     *audio.Resampler
	oddByte          []byte // a PCM byte split from its pair across messages

	// SendUserAudio state, under userPacing.
	inResampler *audio.Resampler
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
func (c *Conversation) Events() <-chan remoteagent.Event { return c.events }

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
	c.closeOnce.Do(func() {
		close(c.quit)
		c.conn.Close(websocket.CloseNormalClosure, "")
	})
	<-c.readerDone
	<-c.conn.WriterDone()
	return nil
}
