package domain

import (
	"slices"
	"strings"
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

// Voice-agent auth methods. The service stores no third-party secrets:
// AuthNone needs none (public agents); AuthSignedURL (elevenlabs only)
// has the renderer fetch a signed conversation URL with the operator's own
// ElevenLabs API key, which it reads from AWS Secrets Manager.
const (
	AuthNone      = "none"
	AuthSignedURL = "signed_url"
)

// NewAgentID returns a new primary agent id.
func NewAgentID() string { return NewID(AgentPrefix) }

// ErrAgentNotFound answers a missing agent, or another tenant's.
var ErrAgentNotFound = Errorf(NotFound, "Agent not found")

// ParseAgentRef tells which form of agent id s is.
func ParseAgentRef(s string) (id string, number int64, err error) {
	return parseRef(s, AgentPrefix, ErrAgentNotFound, false)
}

// Voice-agent providers: who drives the avatar's speech in a link session
// or an initiated room.
const (
	// ProviderLocal is the built-in offline demo partner: it greets, listens
	// and answers each utterance by speaking back what it heard.
	ProviderLocal = "local"
	// ProviderLiveKit is a LiveKit Agents worker of the customer's: the
	// service dispatches voice_agent.agent_id (its registered agent_name)
	// into the room, and it drives the avatar by LiveKit's avatar protocol.
	ProviderLiveKit = "livekit"
	// ProviderElevenLabs bridges the room to an ElevenLabs Conversational
	// AI agent (voice_agent.agent_id).
	ProviderElevenLabs = "elevenlabs"
)

// Providers lists the voice-agent providers, in the order errors name them.
var Providers = []string{ProviderLocal, ProviderLiveKit, ProviderElevenLabs}

// Validate checks a voice-agent configuration.
func (v VoiceAgent) Validate() error {
	if v.Provider == "" {
		return Errorf(Invalid, "voice_agent.provider is required").
			WithSuggestion("Use one of " + strings.Join(Providers, ", "))
	}
	if !slices.Contains(Providers, v.Provider) {
		return Errorf(Invalid, "Unsupported voice_agent.provider %q", truncate(v.Provider, 40)).
			WithSuggestion("Use one of " + strings.Join(Providers, ", "))
	}
	if v.AgentID == "" || len(v.AgentID) > 128 {
		return Errorf(Invalid, "voice_agent.agent_id is required").
			WithSuggestion("Pass the provider's id for the voice agent (at most 128 characters)")
	}
	switch {
	case v.AuthMethod == AuthNone:
	case v.AuthMethod == AuthSignedURL && v.Provider == ProviderElevenLabs:
	default:
		hint := `Use "none"`
		if v.Provider == ProviderElevenLabs {
			hint = `Use "none" for public agents or "signed_url" for private ones (the service's ElevenLabs key signs the URL)`
		}
		return Errorf(Invalid, "Unsupported voice_agent.auth_method %q", truncate(v.AuthMethod, 40)).WithSuggestion(hint)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// AgentJob is what a dispatched LiveKit agent finds in its job's metadata
// (JSON): whom to stream its speech to, and the agent's settings.
type AgentJob struct {
	AvatarIdentity string         `json:"avatar_identity"`
	SessionID      string         `json:"session_id"`
	AgentID        string         `json:"agent_id"`
	Language       string         `json:"language"`
	CustomGreeting string         `json:"custom_greeting"`
	Context        string         `json:"context"`
	Properties     map[string]any `json:"properties,omitempty"`
}

// Job is the job metadata for dispatching a's LiveKit agent to drive the
// avatar participant avatarIdentity in session sessionID.
func (a Agent) Job(sessionID, avatarIdentity string) AgentJob {
	return AgentJob{
		AvatarIdentity: avatarIdentity, SessionID: sessionID, AgentID: a.ID, Language: a.Language,
		CustomGreeting: a.Greeting, Context: a.Context, Properties: a.Properties,
	}
}
