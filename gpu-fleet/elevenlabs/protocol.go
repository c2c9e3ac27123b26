package elevenlabs

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Message type names of the ElevenLabs Agents WebSocket protocol.
const (
	// client -> server
	typeInitiation       = "conversation_initiation_client_data"
	typePong             = "pong"
	typeClientToolResult = "client_tool_result"
	typeContextualUpdate = "contextual_update"
	typeUserMessage      = "user_message"
	typeUserActivity     = "user_activity"

	// server -> client
	typeMetadata                = "conversation_initiation_metadata"
	typeAudio                   = "audio"
	typeInterruption            = "interruption"
	typeAgentResponse           = "agent_response"
	typeAgentResponseCorrection = "agent_response_correction"
	typeUserTranscript          = "user_transcript"
	typeTentativeUserTranscript = "tentative_user_transcript"
	typePing                    = "ping"
	typeClientToolCall          = "client_tool_call"
	typeError                   = "error"
)

// initiationMessage is conversation_initiation_client_data, the first
// message the client sends. Every field but type is optional.
type initiationMessage struct {
	Type                       string         `json:"type"`
	ConversationConfigOverride map[string]any `json:"conversation_config_override,omitempty"`
	DynamicVariables           map[string]any `json:"dynamic_variables,omitempty"`
}

// userAudioMessage carries one chunk of user audio. It has no type field:
// the server recognises it by the user_audio_chunk key.
type userAudioMessage struct {
	UserAudioChunk string `json:"user_audio_chunk"`
}

type pongMessage struct {
	Type    string      `json:"type"`
	EventID json.Number `json:"event_id"` // echoed exactly as the ping carried it
}

type textMessage struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type typeOnlyMessage struct {
	Type string `json:"type"`
}

type clientToolResultMessage struct {
	Type       string `json:"type"`
	ToolCallID string `json:"tool_call_id"`
	Result     string `json:"result"`
	IsError    bool   `json:"is_error"`
}

// serverMessage is the union of the server messages this client reads; each
// type fills the one payload object named after it.
type serverMessage struct {
	Type string `json:"type"`

	Metadata *struct {
		ConversationID         string `json:"conversation_id"`
		AgentOutputAudioFormat string `json:"agent_output_audio_format"`
		UserInputAudioFormat   string `json:"user_input_audio_format"`
	} `json:"conversation_initiation_metadata_event"`

	Audio *audioEvent `json:"audio_event"`

	Interruption *eventRef `json:"interruption_event"`

	AgentResponse *struct {
		AgentResponse string `json:"agent_response"`
		EventID       int    `json:"event_id"`
	} `json:"agent_response_event"`

	AgentResponseCorrection *struct {
		OriginalAgentResponse  string `json:"original_agent_response"`
		CorrectedAgentResponse string `json:"corrected_agent_response"`
		EventID                int    `json:"event_id"`
	} `json:"agent_response_correction_event"`

	UserTranscription *struct {
		UserTranscript string `json:"user_transcript"`
		EventID        int    `json:"event_id"`
	} `json:"user_transcription_event"`

	TentativeUserTranscription *struct {
		UserTranscript string `json:"user_transcript"`
		EventID        int    `json:"event_id"`
	} `json:"tentative_user_transcription_event"`

	Ping *pingEvent `json:"ping_event"`

	ClientToolCall *clientToolCall `json:"client_tool_call"`

	Error *ServerError `json:"error_event"`
}

type audioEvent struct {
	AudioBase64 string `json:"audio_base_64"`
	EventID     int    `json:"event_id"`
}

type eventRef struct {
	EventID int `json:"event_id"`
}

type pingEvent struct {
	EventID json.Number `json:"event_id"`
	PingMS  *float64    `json:"ping_ms"`
}

type clientToolCall struct {
	ToolName   string `json:"tool_name"`
	ToolCallID string `json:"tool_call_id"`
}

// ServerError is the payload of the server's "error" message, which the
// AsyncAPI contract describes as sent when the connection is closing because
// of an error. Code is the WebSocket close code that follows it.
type ServerError struct {
	Code      int    `json:"code"`
	Message   string `json:"message,omitempty"`
	ErrorType string `json:"error_type,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

func (e *ServerError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = e.Reason
	}
	if msg == "" {
		msg = "unknown error"
	}
	if e.ErrorType != "" {
		return fmt.Sprintf("elevenlabs: server error %s (code %d): %s", e.ErrorType, e.Code, msg)
	}
	return fmt.Sprintf("elevenlabs: server error (code %d): %s", e.Code, msg)
}

// ErrUnsupportedFormat is returned (wrapped) by Dial when the agent's audio
// format is not one this client can convert.
var ErrUnsupportedFormat = errors.New("elevenlabs: unsupported audio format")

// Audio encodings named by the protocol's format strings.
const (
	encodingPCM  = "pcm"  // 16-bit signed little-endian mono
	encodingULaw = "ulaw" // G.711 μ-law, one byte a sample
)

// audioFormat is a parsed format string such as "pcm_16000" or "ulaw_8000".
type audioFormat struct {
	name     string
	encoding string
	rate     int
}

// parseAudioFormat accepts the formats the AsyncAPI contract lists
// (pcm_8000, pcm_16000, pcm_22050, pcm_24000, pcm_44100, pcm_48000,
// ulaw_8000) and, so that a new rate does not break the client, any other
// pcm_ or ulaw_ rate from 8 to 48 kHz. Compressed formats (mp3_..., opus_...)
// are refused.
func parseAudioFormat(s string) (audioFormat, error) {
	enc, rateText, ok := strings.Cut(s, "_")
	if !ok || (enc != encodingPCM && enc != encodingULaw) {
		return audioFormat{}, fmt.Errorf("%w %q (want pcm_<rate> or ulaw_<rate>)", ErrUnsupportedFormat, s)
	}
	rate, err := strconv.Atoi(rateText)
	if err != nil || rate < 8000 || rate > 48000 {
		return audioFormat{}, fmt.Errorf("%w %q (sample rate must be 8000..48000)", ErrUnsupportedFormat, s)
	}
	return audioFormat{name: s, encoding: enc, rate: rate}, nil
}

// bytesPerSample is the width of one sample on the wire.
func (f audioFormat) bytesPerSample() int {
	if f.encoding == encodingULaw {
		return 1
	}
	return 2
}

// checkDynamicVariables refuses values the protocol does not carry: the
// official JS client types them as string | number | boolean.
func checkDynamicVariables(vars map[string]any) error {
	for k, v := range vars {
		switch v.(type) {
		case string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64,
			float32, float64, json.Number:
		default:
			return fmt.Errorf("elevenlabs: dynamic variable %q has type %T; want string, number or bool", k, v)
		}
	}
	return nil
}
