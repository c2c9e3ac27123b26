package audiows

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/gorilla/websocket"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/playout"
	"avatarsvc/gpu-fleet/wsconn"
)

// commonRates are the input sample rates agent.speak accepts.
var commonRates = map[int]bool{
	8000: true, 11025: true, 12000: true, 16000: true, 22050: true,
	24000: true, 32000: true, 44100: true, 48000: true,
}

// closeGrace is how long the writer waits, after sending a close frame, for
// the client's close reply before dropping the TCP connection. Closing at
// once could reset the connection while the client still reads our error.
const closeGrace = time.Second

// conn is one client connection: the handler goroutine reads; out (a
// gpu-fleet/wsconn writer) writes everything, from a bounded queue.
type conn struct {
	ws     *websocket.Conn
	out    *wsconn.Conn
	limits Limits
	log    *slog.Logger

	// reader-goroutine state
	resampler *audio.Resampler
	inRate    int
}

func (s *Server) serveWS(w http.ResponseWriter, r *http.Request) {
	pathID := r.PathValue("session_id")
	// Refuse before upgrading when the process is full: an HTTP 503 costs
	// nothing to keep, a WebSocket does.
	if s.open.Add(1) > int64(s.limits.MaxConnections) {
		s.open.Add(-1)
		http.Error(w, "too many connections, retry later", http.StatusServiceUnavailable)
		return
	}
	defer s.open.Add(-1)
	// Per client first: a client at its own cap must not use up a place
	// of the global one on the way to being refused.
	client := clientOf(r, s.limits.TrustedProxies)
	if !s.pending.acquire(client, s.limits.MaxPendingPerClient) {
		http.Error(w, "too many connections from your address awaiting session.init, retry later", http.StatusServiceUnavailable)
		return
	}
	if s.unauthenticated.Add(1) > int64(s.limits.MaxUnauthenticated) {
		s.unauthenticated.Add(-1)
		s.pending.release(client)
		http.Error(w, "too many connections awaiting session.init, retry later", http.StatusServiceUnavailable)
		return
	}
	authenticating := true
	settle := func() {
		if authenticating {
			authenticating = false
			s.unauthenticated.Add(-1)
			s.pending.release(client)
		}
	}
	defer settle()
	ws, err := s.upgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader already answered with an HTTP error
	}
	c := &conn{
		ws:     ws,
		limits: s.limits,
		log:    s.log.With("session_id", pathID, "remote", r.RemoteAddr),
		out: wsconn.Start(ws, wsconn.Options{
			Queue: s.limits.SendQueue, WriteTimeout: s.limits.WriteTimeout,
			PingInterval: s.limits.PingInterval, CloseGrace: closeGrace,
			FlushOnClose: true, // a refused client gets its error before the close
		}),
	}
	// Until session.init proves the client holds a token, read only a few
	// KB; gorilla closes with 1009 past that.
	ws.SetReadLimit(s.limits.InitMessageBytes)
	defer func() {
		c.out.ReaderDone()
		c.closeWith(websocket.CloseNormalClosure, "")
		<-c.out.WriterDone()
	}()

	ep := c.handshake(s, pathID)
	settle()
	if ep == nil {
		c.discardUntilClosed()
		return
	}
	ws.SetReadLimit(s.limits.HardMessageBytes)
	defer ep.detach(c)
	c.log.Info("audio websocket connected")
	c.readLoop(ep)
	c.log.Info("audio websocket disconnected")
}

// handshake reads session.init and attaches the connection to its session.
func (c *conn) handshake(s *Server, pathID string) *Endpoint {
	c.ws.SetReadDeadline(time.Now().Add(c.limits.InitTimeout))
	kind, data, tooLarge, err := c.readMessage()
	if err != nil {
		var netErr interface{ Timeout() bool }
		if errors.As(err, &netErr) && netErr.Timeout() {
			c.sendError(CodeInitTimeout, ErrFirstMessage)
			c.closeWith(websocket.ClosePolicyViolation, "no session.init")
		}
		return nil
	}
	var msg clientMessage
	if tooLarge || kind != websocket.TextMessage || json.Unmarshal(data, &msg) != nil || msg.Type != TypeSessionInit {
		c.sendError(CodeNotInitialized, ErrFirstMessage)
		c.closeWith(websocket.ClosePolicyViolation, "first message must be session.init")
		return nil
	}
	// One answer for a wrong id, a wrong token or an unknown session, so
	// the reply tells an attacker nothing about which sessions exist.
	ep := s.lookup(pathID)
	if ep == nil || msg.SessionID != pathID || !ep.authorize(msg.SessionToken) {
		c.log.Warn("session.init refused", "claimed_session_id", msg.SessionID)
		c.sendError(CodeUnauthorized, "invalid session_id or session_token")
		c.closeWith(websocket.ClosePolicyViolation, "unauthorized")
		return nil
	}
	c.log = ep.log.With("remote", c.ws.RemoteAddr().String())
	if !ep.attach(c) {
		c.sendJSON(sessionEnded{Type: TypeSessionEnded, Reason: "ended"})
		c.closeWith(websocket.CloseNormalClosure, "session ended")
		return nil
	}
	c.sendJSON(connectionEstablished{Type: TypeConnectionEstablished, SessionID: pathID})
	return ep
}

func (c *conn) readLoop(ep *Endpoint) {
	c.ws.SetReadDeadline(time.Now().Add(c.limits.PongWait))
	c.ws.SetPongHandler(func(string) error {
		return c.ws.SetReadDeadline(time.Now().Add(c.limits.PongWait))
	})
	for {
		kind, data, tooLarge, err := c.readMessage()
		if err != nil {
			var netErr interface{ Timeout() bool }
			if errors.As(err, &netErr) && netErr.Timeout() {
				c.log.Info("audio websocket silent past the pong wait, closing")
				c.closeWith(websocket.CloseGoingAway, "ping timeout")
				return
			}
			if !websocket.IsCloseError(err, websocket.CloseNormalClosure, websocket.CloseGoingAway, websocket.CloseNoStatusReceived) && !c.isClosing() {
				c.log.Info("audio websocket read ended", "err", err)
			}
			return
		}
		if c.isClosing() {
			continue // the close handshake is under way; ignore late commands
		}
		c.ws.SetReadDeadline(time.Now().Add(c.limits.PongWait))
		arrived := time.Now()
		if tooLarge {
			c.sendError(CodeMessageTooLarge, fmt.Sprintf("message larger than %d bytes", c.limits.MaxMessageBytes))
			continue
		}
		switch kind {
		case websocket.BinaryMessage:
			c.speakBinary(ep, data, arrived)
		case websocket.TextMessage:
			c.handleText(ep, data, arrived)
		}
	}
}

// readMessage reads one message, keeping at most MaxMessageBytes of it. A
// larger one is read to its end and discarded so the connection stays in
// step; one beyond HardMessageBytes fails the connection (gorilla's limit).
func (c *conn) readMessage() (kind int, data []byte, tooLarge bool, err error) {
	kind, r, err := c.ws.NextReader()
	if err != nil {
		return 0, nil, false, err
	}
	data, err = io.ReadAll(io.LimitReader(r, c.limits.MaxMessageBytes+1))
	if err != nil {
		return 0, nil, false, err
	}
	if int64(len(data)) > c.limits.MaxMessageBytes {
		if _, err := io.Copy(io.Discard, r); err != nil {
			return 0, nil, false, err
		}
		return kind, nil, true, nil
	}
	return kind, data, false, nil
}

func (c *conn) handleText(ep *Endpoint, data []byte, arrived time.Time) {
	var msg clientMessage
	if err := json.Unmarshal(data, &msg); err != nil {
		c.sendError(CodeBadJSON, "invalid JSON: "+err.Error())
		return
	}
	switch msg.Type {
	case TypeSpeak:
		c.speak(ep, msg, arrived)
	case TypeSpeakEnd:
		c.flushResampler(ep, arrived)
		id, ok := ep.speaker.End()
		if !ok {
			c.sendError(CodeNothingToEnd, "agent.speak_end without audio: send agent.speak first")
			return
		}
		c.sendJSON(speakEndConfirmed{Type: TypeSpeakEndConfirmed, UtteranceID: id})
	case TypeInterrupt:
		c.resampler = nil
		dropped := ep.speaker.Interrupt()
		c.sendJSON(interruptConfirmed{Type: TypeInterruptConfirmed, DroppedSamples: dropped})
	case TypeKeepAlive:
		// Reading it already extended the read deadline.
	case TypeSessionInit:
		c.sendError(CodeAlreadyInitiated, "session already initialized")
	case "":
		c.sendError(CodeBadJSON, `message has no "type"`)
	default:
		c.sendError(CodeUnknownType, fmt.Sprintf("unknown message type %q", msg.Type))
	}
}

func (c *conn) speak(ep *Endpoint, msg clientMessage, arrived time.Time) {
	rate := msg.SampleRate
	if rate == 0 {
		rate = playout.SampleRate
	}
	if !commonRates[rate] {
		c.sendError(CodeBadSampleRate, fmt.Sprintf(
			"unsupported sample_rate %d: use 8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100 or 48000", rate))
		return
	}
	raw, err := base64.StdEncoding.DecodeString(msg.Audio)
	if err != nil {
		c.sendError(CodeBadAudio, "audio is not valid base64: "+err.Error())
		return
	}
	pcm, err := decodePCM16(raw)
	if err != nil {
		c.sendError(CodeBadAudio, err.Error())
		return
	}
	if rate != playout.SampleRate {
		if c.resampler == nil || c.inRate != rate {
			c.flushResampler(ep, arrived)
			c.resampler = audio.NewResampler(rate, playout.SampleRate)
			c.inRate = rate
		}
		pcm = c.resampler.Process(pcm)
	} else {
		c.flushResampler(ep, arrived)
	}
	c.push(ep, pcm, arrived)
}

func (c *conn) speakBinary(ep *Endpoint, data []byte, arrived time.Time) {
	pcm, err := decodePCM16(data)
	if err != nil {
		c.sendError(CodeBadAudio, err.Error())
		return
	}
	c.flushResampler(ep, arrived)
	c.push(ep, pcm, arrived)
}

func (c *conn) push(ep *Endpoint, pcm []int16, arrived time.Time) {
	id, err := ep.speaker.Push(pcm, arrived)
	if err != nil {
		if errors.Is(err, playout.ErrBufferFull) {
			c.sendError(CodeBufferFull, err.Error())
			return
		}
		c.sendError(CodeBadAudio, err.Error())
		return
	}
	c.sendJSON(speakConfirmed{
		Type:         TypeSpeakConfirmed,
		AudioSamples: len(pcm),
		UtteranceID:  id,
		BufferedMS:   int64(ep.speaker.Buffered()) * 1000 / playout.SampleRate,
	})
}

// flushResampler pushes the resampler's lookahead tail, so an utterance's
// last milliseconds are not lost when it ends or its rate changes.
func (c *conn) flushResampler(ep *Endpoint, arrived time.Time) {
	if c.resampler == nil {
		return
	}
	tail := c.resampler.Flush()
	c.resampler = nil
	if len(tail) > 0 {
		// The tail belongs to audio already confirmed; a full buffer here
		// loses a millisecond, which is not worth a second error.
		ep.speaker.Push(tail, arrived)
	}
}

func decodePCM16(raw []byte) ([]int16, error) {
	if len(raw) == 0 {
		return nil, errors.New("audio is empty")
	}
	if len(raw)%2 != 0 {
		return nil, fmt.Errorf("audio must be 16-bit PCM: %d bytes is an odd count", len(raw))
	}
	return audio.DecodePCM16(raw, 1), nil
}

func (c *conn) sendError(code, text string) {
	c.sendJSON(errorMessage{Type: TypeError, Error: text, Code: code})
}

func (c *conn) sendJSON(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		c.log.Error("encode message", "err", err)
		return
	}
	if errors.Is(c.out.TrySend(data), wsconn.ErrQueueFull) {
		// Never block the session's frame clock or grow memory for a
		// client that does not read.
		c.log.Warn("client too slow to read its messages, disconnecting", "queued", c.limits.SendQueue)
		c.out.Abort()
	}
}

// closeWith asks the writer to flush what is queued, send a close frame with
// code and text, and drop the connection. Only the first call counts.
func (c *conn) closeWith(code int, text string) { c.out.Close(code, text) }

func (c *conn) isClosing() bool {
	select {
	case <-c.out.Closing():
		return true
	default:
		return false
	}
}

// discardUntilClosed keeps reading after a refused handshake so the
// client's close reply is consumed before the connection drops.
func (c *conn) discardUntilClosed() {
	c.ws.SetReadDeadline(time.Now().Add(closeGrace))
	for {
		if _, _, err := c.ws.NextReader(); err != nil {
			return
		}
	}
}
