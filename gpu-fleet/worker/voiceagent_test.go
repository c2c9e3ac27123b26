package worker

import (
	"context"
	"strings"
	"testing"

	"avatarsvc/shared/domain"
)

// agentsOf is a fake Agents: one agent and its owner.
type agentsOf struct {
	agent domain.Agent
	owner domain.User
}

func (f agentsOf) GetAgent(context.Context, string, string) (domain.Agent, error) {
	return f.agent, nil
}
func (f agentsOf) GetUser(context.Context, string) (domain.User, error) { return f.owner, nil }

// TestRevokedVoiceAgentIsNotUsed: a session whose agent names a voice agent
// the operator has since revoked for its account does not get it (the
// ElevenLabs URL would be signed with the operator's key).
func TestRevokedVoiceAgentIsNotUsed(t *testing.T) {
	sess := domain.Session{ID: "sess_1", UserID: "u1", AgentID: "agnt_1", RoomName: "avatar-link-sess_1"}
	el := domain.VoiceAgent{Provider: domain.ProviderElevenLabs, AgentID: "el_1", AuthMethod: domain.AuthSignedURL}
	lk := domain.VoiceAgent{Provider: domain.ProviderLiveKit, AgentID: "concierge", AuthMethod: domain.AuthNone}
	for _, tc := range []struct {
		name    string
		voice   domain.VoiceAgent
		allowed []string
		wantErr bool
	}{
		{"elevenlabs revoked", el, nil, true},
		{"livekit revoked", lk, []string{domain.VoiceAgentKey(domain.ProviderElevenLabs, "el_1")}, true},
		{"livekit allowed", lk, []string{domain.VoiceAgentKey(domain.ProviderLiveKit, "concierge")}, false},
		{"local needs nothing", domain.VoiceAgent{Provider: domain.ProviderLocal, AgentID: "demo"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &RoomLauncher{Agents: agentsOf{
				agent: domain.Agent{ID: "agnt_1", UserID: "u1", VoiceAgent: tc.voice},
				owner: domain.User{ID: "u1", VoiceAgents: tc.allowed},
			}}
			_, err := l.conversationFor(context.Background(), sess)
			if got := err != nil && strings.Contains(err.Error(), "is not enabled for this account"); got != tc.wantErr {
				t.Errorf("refused: got %v (err %v), want %v", got, err, tc.wantErr)
			}
		})
	}
}
