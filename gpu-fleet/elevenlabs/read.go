package elevenlabs

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/remoteagent"
)

// touch extends the read deadline: something arrived. During the handshake
// the deadline stays as Dial set it, so that cancelling ctx is not undone.
func (c *Conversation) touch() {
	if c.live {
		c.ws.SetReadDeadline(time.Now().Add(c.idleTimeout))
	}
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
		werr := c.conn.WriteErr()
		c.mu.Lock()
		switch {
		case c.quitting() && !isLocal(err):
			c.err = nil // Close was called; whatever the read saw is its echo
		case werr != nil && !isCloseError(err) && !isLocal(err):
			c.err = fmt.Errorf("elevenlabs: %w", werr) // the writer failed first and closed the connection
		default:
			var le *localError
			if errors.As(err, &le) {
				err = le.err
			}
			c.err = err
		}
		final := c.err
		c.mu.Unlock()
		// Err is final before senders are refused, so they can say why.
		c.conn.Close(c.closeCode, c.closeText)
		c.conn.ReaderDone()
		// Log before signalling: once Close returns nothing may log.
		if final != nil {
			c.log.Info("elevenlabs: conversation ended", "conversation_id", c.conversationID, "err", final)
		} else {
			c.log.Info("elevenlabs: conversation closed", "conversation_id", c.conversationID)
		}
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
	c.closeCode, c.closeText = code, err.Error()
	return &localError{err: err}
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
		return c.onAudio(m.Audio)
	case typeInterruption:
		return c.onInterruption(m.Interruption)
	case typeAgentResponse:
		if r := m.AgentResponse; r != nil {
			return c.emitText(remoteagent.AgentResponse, r.AgentResponse, r.EventID)
		}
	case typeAgentResponseCorrection:
		if r := m.AgentResponseCorrection; r != nil {
			return c.emitText(remoteagent.AgentResponseCorrection, r.CorrectedAgentResponse, r.EventID)
		}
	case typeUserTranscript:
		if t := m.UserTranscription; t != nil {
			return c.emitText(remoteagent.UserTranscript, t.UserTranscript, t.EventID)
		}
	case typeTentativeUserTranscript:
		if t := m.TentativeUserTranscription; t != nil {
			return c.emitText(remoteagent.TentativeUserTranscript, t.UserTranscript, t.EventID)
		}
	case typePing:
		return c.onPing(m.Ping)
	case typeClientToolCall:
		return c.onClientToolCall(m.ClientToolCall)
	case typeError:
		c.onError(m.Error)
	default:
		// vad_score, internal_tentative_agent_response, agent_tool_response
		// and the rest carry nothing the avatar uses.
		c.log.Debug("elevenlabs: ignoring message", "type", m.Type)
	}
	return nil
}

// onAudio delivers agent speech, unless an interruption made it stale.
func (c *Conversation) onAudio(ev *audioEvent) error {
	if ev == nil {
		return c.fail(websocket.CloseProtocolError, protocolErrorf("audio message without audio_event"))
	}
	if c.interrupted && ev.EventID <= c.lastInterrupt {
		c.mu.Lock()
		c.dropped++
		c.mu.Unlock()
		c.log.Debug("elevenlabs: dropped stale audio", "event_id", ev.EventID, "interrupted_at", c.lastInterrupt)
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(ev.AudioBase64)
	if err != nil {
		return c.fail(websocket.CloseProtocolError, protocolErrorf("audio event %d: bad base64: %v", ev.EventID, err))
	}
	pcm := c.decodeAgentAudio(raw)
	if len(pcm) == 0 {
		return nil // all of it is held back as resampler lookahead
	}
	return c.emit(remoteagent.Event{Kind: remoteagent.AgentAudio, PCM: pcm, EventID: ev.EventID})
}

// onInterruption remembers the interrupted event, so that audio up to it
// still in flight is dropped, and forgets partial audio.
func (c *Conversation) onInterruption(ev *eventRef) error {
	id := 0
	if ev != nil {
		id = ev.EventID
	}
	if !c.interrupted || id > c.lastInterrupt {
		c.lastInterrupt = id
	}
	c.interrupted = true
	c.resetAgentAudio()
	return c.emit(remoteagent.Event{Kind: remoteagent.Interruption, EventID: id})
}

func (c *Conversation) emitText(kind remoteagent.EventKind, text string, eventID int) error {
	return c.emit(remoteagent.Event{Kind: kind, Text: strings.TrimSpace(text), EventID: eventID})
}

// onPing answers the server's JSON ping with the same event_id.
func (c *Conversation) onPing(ev *pingEvent) error {
	if ev == nil || ev.EventID == "" {
		c.log.Warn("elevenlabs: ping without event_id ignored")
		return nil
	}
	return c.reply(pongMessage{Type: typePong, EventID: ev.EventID})
}

// onClientToolCall says at once that there is no such tool: the agent waits
// for a result, and the official JS client answers the same for a tool it
// does not have.
func (c *Conversation) onClientToolCall(call *clientToolCall) error {
	if call == nil {
		return nil
	}
	c.log.Warn("elevenlabs: agent called a client tool this client does not have", "tool", call.ToolName)
	return c.reply(clientToolResultMessage{
		Type:       typeClientToolResult,
		ToolCallID: call.ToolCallID,
		Result:     fmt.Sprintf("Client tool %q is not available on this client", call.ToolName),
		IsError:    true,
	})
}

// onError keeps the server's error to report with the close that follows.
func (c *Conversation) onError(e *ServerError) {
	if e == nil {
		return
	}
	c.pendingServerErr = e
	c.log.Warn("elevenlabs: server error", "code", e.Code, "error_type", e.ErrorType, "message", e.Message)
}

// emit hands an event to the consumer without ever blocking the reader.
func (c *Conversation) emit(ev remoteagent.Event) error {
	select {
	case c.events <- ev:
		return nil
	default:
		return c.fail(websocket.CloseGoingAway, ErrEventOverflow)
	}
}

// reply queues a message to the server ahead of user audio. Once the
// conversation is ending it is dropped: the read fails next.
func (c *Conversation) reply(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_ = c.conn.SendUrgent(data)
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
