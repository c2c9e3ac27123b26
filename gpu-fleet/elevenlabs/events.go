package elevenlabs

import (
	"errors"
	"fmt"

	"github.com/gorilla/websocket"
)

// Provider is the name this integration goes by in configuration.
const Provider = "elevenlabs"

// EventKind says what an Event carries.
type EventKind int

const (
	// AgentAudio: PCM holds agent speech, 16 kHz mono; EventID is the
	// server's audio event id.
	AgentAudio EventKind = iota + 1
	// Interruption: the user interrupted the agent. Audio already delivered
	// for the interrupted response should stop playing; stale audio still in
	// flight is dropped by the client. EventID is the interrupted event.
	Interruption
	// AgentResponse: Text is the agent's reply (sent with its first audio).
	AgentResponse
	// AgentResponseCorrection: Text is the agent's reply truncated to what
	// was spoken before an interruption.
	AgentResponseCorrection
	// UserTranscript: Text is a final transcript of the user's speech.
	UserTranscript
	// TentativeUserTranscript: Text is an in-progress transcript that may
	// still change.
	TentativeUserTranscript
)

func (k EventKind) String() string {
	switch k {
	case AgentAudio:
		return "AgentAudio"
	case Interruption:
		return "Interruption"
	case AgentResponse:
		return "AgentResponse"
	case AgentResponseCorrection:
		return "AgentResponseCorrection"
	case UserTranscript:
		return "UserTranscript"
	case TentativeUserTranscript:
		return "TentativeUserTranscript"
	}
	return fmt.Sprintf("EventKind(%d)", int(k))
}

// Event is one thing the agent side of the conversation did.
type Event struct {
	Kind EventKind
	// PCM is set for AgentAudio: 16 kHz mono samples, owned by the receiver.
	PCM []int16
	// Text is set for the transcript and response kinds.
	Text string
	// EventID is the server's event id, when the message carried one.
	EventID int
}

// ErrEventOverflow is the conversation's error when the consumer fell so far
// behind that the Events buffer filled up: the client closes the
// conversation rather than drop audio or stall the connection.
var ErrEventOverflow = errors.New("elevenlabs: events buffer full (consumer too slow); conversation closed")

// ErrClosed is returned (wrapped with the cause, if any) by the Send methods
// once the conversation has ended.
var ErrClosed = errors.New("elevenlabs: conversation closed")

// CloseError reports that the server closed the conversation. Code 1000
// (Normal) means the agent ended it, e.g. with its end_call tool or at the
// maximum duration; the AsyncAPI contract uses 1002 for operational errors
// (timeouts, LLM/TTS/ASR failures, policy violations), 1008 for invalid input
// or authorisation, 1011 for internal errors.
type CloseError struct {
	Code   int
	Reason string
	// Server is the "error" message the server sent before closing, if any.
	Server *ServerError
}

func (e *CloseError) Error() string {
	s := fmt.Sprintf("elevenlabs: server closed the conversation (code %d", e.Code)
	if e.Reason != "" {
		s += ", reason " + fmt.Sprintf("%q", e.Reason)
	}
	s += ")"
	if e.Server != nil {
		s += ": " + e.Server.Error()
	}
	return s
}

// Unwrap gives the server's error message to errors.As.
func (e *CloseError) Unwrap() error {
	if e.Server == nil {
		return nil
	}
	return e.Server
}

// Normal reports whether the server ended the conversation with a normal
// closure (1000), i.e. the agent hung up rather than something failing.
func (e *CloseError) Normal() bool {
	return e.Code == websocket.CloseNormalClosure
}
