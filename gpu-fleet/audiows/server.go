// Package audiows serves the ws_uri WebSocket through which a client drives
// an avatar: it sends speech audio and control commands and receives
// confirmations and speech events. PROTOCOL.md beside this file is the
// protocol's reference.
//
// One Server serves many sessions in one process, each on its own path
// /ws/{session_id}. A session registers itself with the hash of its token
// and the Speaker (its playout buffer) that audio goes to, and gets an
// Endpoint back through which it emits speech events.
package audiows

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"avatarsvc/gpu-fleet/playout"
)

// Speaker receives a session's audio and commands. *playout.Buffer
// implements it.
type Speaker interface {
	Push(pcm []int16, arrived time.Time) (uint64, error)
	End() (uint64, bool)
	Interrupt() int
	Buffered() int
}

// Limits bound what one connection may cost. Zero fields take the defaults.
type Limits struct {
	// MaxMessageBytes: larger messages are refused with an error and the
	// connection stays open (default 10 MiB).
	MaxMessageBytes int64
	// HardMessageBytes: larger messages close the connection, because
	// even discarding them costs too much (default 4 x MaxMessageBytes).
	HardMessageBytes int64
	// InitTimeout: time allowed for session.init after the upgrade
	// (default 5 s): a client sends it as soon as the socket opens.
	InitTimeout time.Duration
	// HeaderTimeout: time allowed for the upgrade request's headers
	// (default 5 s; HTTPServer). A socket that sends nothing is closed then.
	HeaderTimeout time.Duration
	// PingInterval: how often the server pings (default 20 s).
	PingInterval time.Duration
	// PongWait: a connection silent for this long (no message, no pong) is
	// closed (default 3 x PingInterval).
	PongWait time.Duration
	// WriteTimeout bounds every write (default 10 s).
	WriteTimeout time.Duration
	// SendQueue: outgoing messages a connection may have pending; a client
	// that falls further behind is disconnected (default 256).
	SendQueue int
	// InitMessageBytes bounds the first message (session.init): before a
	// client proves it holds a session token, the listener reads at most
	// this much of it (default 4 KiB). Larger closes with 1009.
	InitMessageBytes int64
	// MaxConnections caps concurrent connections per process; beyond it the
	// upgrade is refused with HTTP 503 (default 512).
	MaxConnections int
	// MaxUnauthenticated caps connections that have not yet sent a valid
	// session.init, from all clients together (default 128, at most
	// MaxConnections), so idle sockets cannot crowd out sessions.
	MaxUnauthenticated int
	// MaxPendingPerClient caps the connections one client (an IPv4
	// address, an IPv6 /64) may have waiting for session.init (default 4),
	// so one address cannot take the places MaxUnauthenticated leaves.
	MaxPendingPerClient int
	// TrustedProxies: connections from these addresses are proxies, and
	// the client is the nearest X-Forwarded-For entry outside them. Empty
	// (the default): the header is ignored, as any client can write it.
	TrustedProxies []netip.Prefix
}

func (l Limits) withDefaults() Limits {
	if l.MaxMessageBytes <= 0 {
		l.MaxMessageBytes = 10 << 20
	}
	if l.HardMessageBytes < l.MaxMessageBytes {
		l.HardMessageBytes = 4 * l.MaxMessageBytes
	}
	if l.InitTimeout <= 0 {
		l.InitTimeout = 5 * time.Second
	}
	if l.HeaderTimeout <= 0 {
		l.HeaderTimeout = 5 * time.Second
	}
	if l.PingInterval <= 0 {
		l.PingInterval = 20 * time.Second
	}
	if l.PongWait <= l.PingInterval {
		l.PongWait = 3 * l.PingInterval
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = 10 * time.Second
	}
	if l.SendQueue <= 0 {
		l.SendQueue = 256
	}
	if l.InitMessageBytes <= 0 {
		l.InitMessageBytes = 4 << 10
	}
	if l.MaxConnections <= 0 {
		l.MaxConnections = 512
	}
	if l.MaxUnauthenticated <= 0 {
		l.MaxUnauthenticated = min(128, l.MaxConnections)
	}
	if l.MaxPendingPerClient <= 0 {
		l.MaxPendingPerClient = 4
	}
	return l
}

// ErrDuplicateSession is returned by Register for a session id already
// registered.
var ErrDuplicateSession = errors.New("audiows: session already registered")

// Server is an http.Handler for /ws/{session_id}.
type Server struct {
	log      *slog.Logger
	limits   Limits
	upgrader websocket.Upgrader
	mux      *http.ServeMux

	// open and unauthenticated count connections against the limits;
	// pending counts the unauthenticated ones per client.
	open, unauthenticated atomic.Int64
	pending               pendingByClient

	mu       sync.Mutex
	sessions map[string]*Endpoint
}

// NewServer returns a Server with no sessions.
func NewServer(log *slog.Logger, limits Limits) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		log:    log,
		limits: limits.withDefaults(),
		upgrader: websocket.Upgrader{
			ReadBufferSize:  16 << 10,
			WriteBufferSize: 4 << 10,
			// Clients are servers and browsers of other origins; the
			// session token, not the origin, authorises a connection.
			CheckOrigin: func(*http.Request) bool { return true },
		},
		mux:      http.NewServeMux(),
		sessions: make(map[string]*Endpoint),
	}
	s.mux.HandleFunc("GET /ws/{session_id}", s.serveWS)
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// HashToken is how a session token is stored: only its SHA-256.
func HashToken(token string) [32]byte { return sha256.Sum256([]byte(token)) }

// Register makes sessionID reachable at /ws/{sessionID} for clients that
// present the token whose SHA-256 is tokenHash. Audio goes to speaker.
func (s *Server) Register(sessionID string, tokenHash [32]byte, speaker Speaker) (*Endpoint, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.sessions[sessionID]; ok {
		return nil, ErrDuplicateSession
	}
	e := &Endpoint{
		server:    s,
		sessionID: sessionID,
		tokenHash: tokenHash,
		speaker:   speaker,
		log:       s.log.With("session_id", sessionID),
	}
	s.sessions[sessionID] = e
	return e, nil
}

func (s *Server) lookup(sessionID string) *Endpoint {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[sessionID]
}

func (s *Server) unregister(e *Endpoint) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[e.sessionID] == e {
		delete(s.sessions, e.sessionID)
	}
}

// Endpoint is one session's side of the server.
type Endpoint struct {
	server    *Server
	sessionID string
	tokenHash [32]byte
	speaker   Speaker
	log       *slog.Logger

	mu     sync.Mutex
	conn   *conn // the client now connected, if any
	closed bool
}

// authorize checks a presented token in constant time.
func (e *Endpoint) authorize(token string) bool {
	got := HashToken(token)
	return subtle.ConstantTimeCompare(got[:], e.tokenHash[:]) == 1
}

// attach makes c the session's connection. A client that reconnects
// replaces its previous connection, which is closed.
func (e *Endpoint) attach(c *conn) bool {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return false
	}
	old := e.conn
	e.conn = c
	e.mu.Unlock()
	if old != nil {
		old.closeWith(websocket.ClosePolicyViolation, "replaced by a new connection")
	}
	return true
}

func (e *Endpoint) detach(c *conn) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.conn == c {
		e.conn = nil
	}
}

// Emit sends a speech event to the connected client, if any. It never
// blocks: a client too slow to take it is disconnected.
func (e *Endpoint) Emit(ev playout.Event) {
	e.mu.Lock()
	c := e.conn
	e.mu.Unlock()
	if c == nil {
		return
	}
	switch ev.Type {
	case playout.SpeechStarted:
		c.sendJSON(speakStarted{Type: TypeSpeakStarted, UtteranceID: ev.UtteranceID})
	case playout.SpeechFinished:
		c.sendJSON(speakEnded{
			Type:          TypeSpeakEnded,
			UtteranceID:   ev.UtteranceID,
			PlayedSamples: ev.PlayedSamples,
			PlayedMS:      ev.Played().Milliseconds(),
			Interrupted:   ev.Interrupted,
		})
	}
}

// Warn sends a warning (SessionExpiring) to the connected client, if any.
func (e *Endpoint) Warn(w SessionExpiring) {
	e.mu.Lock()
	c := e.conn
	e.mu.Unlock()
	if c != nil {
		c.sendJSON(w)
	}
}

// Close unregisters the session and tells a connected client why it ended
// before closing the connection.
func (e *Endpoint) Close(reason string) {
	e.server.unregister(e)
	e.mu.Lock()
	c := e.conn
	e.conn = nil
	e.closed = true
	e.mu.Unlock()
	if c != nil {
		c.sendJSON(sessionEnded{Type: TypeSessionEnded, Reason: reason})
		c.closeWith(websocket.CloseNormalClosure, "session ended")
	}
}
