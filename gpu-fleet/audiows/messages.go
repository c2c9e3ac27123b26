package audiows

// Message types. PROTOCOL.md describes each one.
const (
	// client -> server
	TypeSessionInit = "session.init"
	TypeSpeak       = "agent.speak"
	TypeSpeakEnd    = "agent.speak_end"
	TypeInterrupt   = "agent.interrupt"
	TypeKeepAlive   = "session.keep_alive"

	// server -> client
	TypeConnectionEstablished = "connection.established"
	TypeSpeakConfirmed        = "agent.speak.confirmed"
	TypeSpeakEndConfirmed     = "agent.speak_end.confirmed"
	TypeInterruptConfirmed    = "agent.interrupt.confirmed"
	TypeSpeakStarted          = "agent.speak_started"
	TypeSpeakEnded            = "agent.speak_ended"
	TypeSessionEnded          = "session.ended"
	TypeSessionExpiring       = "session.expiring"
	TypeError                 = "error"
)

// Error codes carried beside the human-readable error text.
const (
	CodeNotInitialized   = "not_initialized"
	CodeUnauthorized     = "unauthorized"
	CodeInitTimeout      = "init_timeout"
	CodeBadJSON          = "bad_json"
	CodeUnknownType      = "unknown_type"
	CodeBadAudio         = "bad_audio"
	CodeBadSampleRate    = "bad_sample_rate"
	CodeMessageTooLarge  = "message_too_large"
	CodeBufferFull       = "buffer_full"
	CodeNothingToEnd     = "nothing_to_end"
	CodeAlreadyInitiated = "already_initialized"
)

// ErrFirstMessage is the reference protocol's exact text for a connection
// that does not start with session.init.
const ErrFirstMessage = "First message must be session.init"

// clientMessage is every client message's fields; Type says which apply.
type clientMessage struct {
	Type         string `json:"type"`
	SessionID    string `json:"session_id"`
	SessionToken string `json:"session_token"`
	Audio        string `json:"audio"`
	SampleRate   int    `json:"sample_rate"`
}

type connectionEstablished struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id"`
}

type speakConfirmed struct {
	Type         string `json:"type"`
	AudioSamples int    `json:"audio_samples"`
	UtteranceID  uint64 `json:"utterance_id"`
	// BufferedMS is the audio queued ahead of the avatar's mouth after
	// this message, so a client can pace itself.
	BufferedMS int64 `json:"buffered_ms"`
}

type speakEndConfirmed struct {
	Type        string `json:"type"`
	UtteranceID uint64 `json:"utterance_id"`
}

type interruptConfirmed struct {
	Type           string `json:"type"`
	DroppedSamples int    `json:"dropped_samples"`
}

type speakStarted struct {
	Type        string `json:"type"`
	UtteranceID uint64 `json:"utterance_id"`
}

type speakEnded struct {
	Type          string `json:"type"`
	UtteranceID   uint64 `json:"utterance_id"`
	PlayedSamples int    `json:"played_samples"`
	PlayedMS      int64  `json:"played_ms"`
	Interrupted   bool   `json:"interrupted"`
}

// SessionExpiring warns that the session ends at ExpiresAt (RFC 3339),
// SecondsLeft from when it was sent. The renderer sends the same JSON to
// ws_uri's client and into the room (topic ExpiringTopic).
type SessionExpiring struct {
	Type        string `json:"type"`
	ExpiresAt   string `json:"expires_at"`
	SecondsLeft int    `json:"seconds_left"`
}

type sessionEnded struct {
	Type   string `json:"type"`
	Reason string `json:"reason"`
}

type errorMessage struct {
	Type  string `json:"type"`
	Error string `json:"error"`
	Code  string `json:"code"`
}
