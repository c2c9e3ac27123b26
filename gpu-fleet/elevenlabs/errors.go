package elevenlabs

import (
	"errors"
	"fmt"

	"github.com/gorilla/websocket"
)

// Provider is the name this integration goes by in configuration.
const Provider = "elevenlabs"

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
