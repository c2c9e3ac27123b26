// Package remoteagent is what a voice agent running elsewhere tells the
// avatar, whichever provider runs it: the provider's client
// (gpu-fleet/elevenlabs) turns its protocol into these events, and the
// session's conversation (gpu-fleet/conversation) plays and captions them
// without knowing the provider.
package remoteagent

import "fmt"

// EventKind says what an Event carries.
type EventKind int

const (
	// AgentAudio: PCM holds agent speech, 16 kHz mono; EventID is the
	// provider's audio event id.
	AgentAudio EventKind = iota + 1
	// Interruption: the user interrupted the agent. Audio already delivered
	// for the interrupted response should stop playing; the provider's
	// client drops stale audio still in flight. EventID is the interrupted
	// event.
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
	// EventID is the provider's event id, when the message carried one.
	EventID int
}
