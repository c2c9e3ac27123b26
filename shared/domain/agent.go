package domain

import (
	"regexp"
	"time"
)

// Agent is an avatar plus the configuration of the voice agent that speaks
// through it. Like avatars it has an agnt_ id and an integer id.
type Agent struct {
	ID       string
	Number   int64
	UserID   string
	Name     string
	AvatarID string // primary avatar id ("" if its avatar was deleted)
	Language string
	Greeting string // the spec's custom_greeting
	Context  string
	// Properties, Memories and KnowledgeBase are the agent's own data; they
	// are stored as given and copied on duplicate.
	Properties    map[string]any
	Memories      []any
	KnowledgeBase []any
	VoiceAgent    VoiceAgent
	Status        string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// Temporary agents back avatar previews: not listed, gone after ExpiresAt.
	Temporary bool
	ExpiresAt time.Time
}

// VoiceAgent says which voice agent drives the avatar.
type VoiceAgent struct {
	Provider   string
	AgentID    string
	AuthMethod string
}

// AgentPrefix starts primary agent ids.
const AgentPrefix = "agnt_"

// AgentActive is the only agent status so far.
const AgentActive = "active"

// Voice-agent auth methods. Only agents that need no secret are supported:
// storing third-party secrets would need a secrets store this service does
// not have yet.
const AuthNone = "none"

// NewAgentID returns a new primary agent id.
func NewAgentID() string { return NewID(AgentPrefix) }

// ErrAgentNotFound answers a missing agent, or another tenant's.
var ErrAgentNotFound = Errorf(NotFound, "Agent not found")

// ParseAgentRef tells which form of agent id s is.
func ParseAgentRef(s string) (id string, number int64, err error) {
	return parseRef(s, AgentPrefix, ErrAgentNotFound, false)
}

var providerName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// Validate checks a voice-agent configuration.
func (v VoiceAgent) Validate() error {
	if !providerName.MatchString(v.Provider) {
		return Errorf(Invalid, "voice_agent.provider is required").
			WithSuggestion("Name the voice agent's provider in lower case, e.g. elevenlabs or livekit")
	}
	if v.AgentID == "" || len(v.AgentID) > 128 {
		return Errorf(Invalid, "voice_agent.agent_id is required").
			WithSuggestion("Pass the provider's id for the voice agent (at most 128 characters)")
	}
	if v.AuthMethod != AuthNone {
		return Errorf(Invalid, "Unsupported voice_agent.auth_method %q", v.AuthMethod).
			WithSuggestion(`Use "none": only voice agents that need no secret are supported`)
	}
	return nil
}
