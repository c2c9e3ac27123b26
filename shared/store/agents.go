package store

import (
	"context"
	"errors"
	"time"

	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

type agentItem struct {
	AgentID       string         `dynamo:"agent_id,hash"`
	Number        int64          `dynamo:"number,omitempty"`
	UserID        string         `dynamo:"user_id,omitempty"`
	Name          string         `dynamo:"name,omitempty"`
	AvatarID      string         `dynamo:"avatar_id,omitempty"`
	Language      string         `dynamo:"language,omitempty"`
	Greeting      string         `dynamo:"custom_greeting,omitempty"`
	Context       string         `dynamo:"context,omitempty"`
	Properties    map[string]any `dynamo:"properties,omitempty"`
	Memories      []any          `dynamo:"memories,omitempty"`
	KnowledgeBase []any          `dynamo:"knowledge_base,omitempty"`
	Provider      string         `dynamo:"va_provider,omitempty"`
	VoiceAgentID  string         `dynamo:"va_agent_id,omitempty"`
	AuthMethod    string         `dynamo:"va_auth_method,omitempty"`
	Status        string         `dynamo:"status,omitempty"`
	CreatedAt     string         `dynamo:"created_at,omitempty"`
	UpdatedAt     string         `dynamo:"updated_at,omitempty"`
	// Temporary agents (avatar previews) are hidden from lists and removed
	// by DynamoDB's TTL after TTL (epoch seconds).
	Temporary bool   `dynamo:"temporary,omitempty"`
	TTL       int64  `dynamo:"ttl,omitempty"`
	Target    string `dynamo:"target,omitempty"` // alias items only
}

func toAgentItem(a domain.Agent) agentItem {
	return agentItem{
		AgentID: a.ID, Number: a.Number, UserID: a.UserID, Name: a.Name, AvatarID: a.AvatarID, Language: a.Language,
		Greeting: a.Greeting, Context: a.Context, Properties: a.Properties, Memories: a.Memories,
		KnowledgeBase: a.KnowledgeBase, Provider: a.VoiceAgent.Provider, VoiceAgentID: a.VoiceAgent.AgentID,
		AuthMethod: a.VoiceAgent.AuthMethod, Status: a.Status, CreatedAt: formatTime(a.CreatedAt),
		UpdatedAt: formatTime(a.UpdatedAt), Temporary: a.Temporary, TTL: ttlOf(a.ExpiresAt),
	}
}

func (it agentItem) domain() domain.Agent {
	return domain.Agent{
		ID: it.AgentID, Number: it.Number, UserID: it.UserID, Name: it.Name, AvatarID: it.AvatarID, Language: it.Language,
		Greeting: it.Greeting, Context: it.Context, Properties: it.Properties, Memories: it.Memories,
		KnowledgeBase: it.KnowledgeBase,
		VoiceAgent:    domain.VoiceAgent{Provider: it.Provider, AgentID: it.VoiceAgentID, AuthMethod: it.AuthMethod},
		Status:        it.Status, CreatedAt: parseTime(it.CreatedAt), UpdatedAt: parseTime(it.UpdatedAt),
		Temporary: it.Temporary,
	}
}

func ttlOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	// DynamoDB deletes expired items within days; readers check expiry
	// themselves, the TTL only cleans up.
	return t.Add(24 * time.Hour).Unix()
}

// NumberAgent allocates an agent's integer id.
func (s *Store) NumberAgent(ctx context.Context) (int64, error) { return s.nextNumber(ctx, "agent") }

// agentPuts are the writes that store a new agent and its integer alias.
func (s *Store) agentPuts(tx *dynamo.WriteTx, a domain.Agent) *dynamo.WriteTx {
	return tx.
		Put(s.agents.Put(toAgentItem(a)).If("attribute_not_exists($)", "agent_id")).
		Put(s.agents.Put(agentItem{AgentID: aliasKey(a.Number), Number: a.Number, Target: a.ID, TTL: ttlOf(a.ExpiresAt)}).
			If("attribute_not_exists($)", "agent_id"))
}

// CreateAgent stores a new agent and its integer alias.
func (s *Store) CreateAgent(ctx context.Context, a domain.Agent) error {
	if err := s.runTx(ctx, s.agentPuts(s.db.WriteTx(), a)); err != nil {
		return unavailable(err, "create agent")
	}
	return nil
}

// GetAgent reads one of the user's agents; another tenant's is reported
// exactly like a missing one.
func (s *Store) GetAgent(ctx context.Context, userID, id string) (domain.Agent, error) {
	var it agentItem
	err := s.agents.Get("agent_id", id).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) || (err == nil && (it.Target != "" || it.UserID != userID)) {
		return domain.Agent{}, domain.ErrAgentNotFound
	}
	if err != nil {
		return domain.Agent{}, unavailable(err, "get agent")
	}
	return it.domain(), nil
}

// AgentIDForNumber resolves an integer agent id to its primary id.
func (s *Store) AgentIDForNumber(ctx context.Context, n int64) (string, error) {
	var it agentItem
	err := s.agents.Get("agent_id", aliasKey(n)).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) {
		return "", domain.ErrAgentNotFound
	}
	if err != nil {
		return "", unavailable(err, "get agent alias")
	}
	return it.Target, nil
}

// ListAgents returns a page of the user's agents, newest first, without the
// temporary ones.
func (s *Store) ListAgents(ctx context.Context, userID string, page domain.Page) ([]domain.Agent, string, error) {
	start, err := decodeCursor(page.Cursor, userID, "user_id", "created_at", "agent_id")
	if err != nil {
		return nil, "", err
	}
	var items []agentItem
	next, err := s.agents.Get("user_id", userID).Index(byUserIndex).Order(dynamo.Descending).
		Filter("attribute_not_exists($)", "temporary").
		StartFrom(start).Limit(page.Limit).AllWithLastEvaluatedKey(ctx, &items)
	if err != nil {
		return nil, "", unavailable(err, "list agents")
	}
	out := make([]domain.Agent, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	return out, encodeCursor(next), nil
}

// AgentsUsingAvatar lists the user's agents whose avatar is avatarID.
func (s *Store) AgentsUsingAvatar(ctx context.Context, userID, avatarID string) ([]domain.Agent, error) {
	var items []agentItem
	err := s.agents.Get("user_id", userID).Index(byUserIndex).Filter("$ = ?", "avatar_id", avatarID).All(ctx, &items)
	if err != nil {
		return nil, unavailable(err, "list agents")
	}
	out := make([]domain.Agent, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	return out, nil
}

// PutAgent replaces one of the user's agents with a (the caller read it
// first and changed it). updatedWas guards against a concurrent change.
func (s *Store) PutAgent(ctx context.Context, a domain.Agent, updatedWas time.Time) error {
	err := s.agents.Put(toAgentItem(a)).
		If("$ = ? AND $ = ?", "user_id", a.UserID, "updated_at", formatTime(updatedWas)).Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return ErrChanged
	}
	if err != nil {
		return unavailable(err, "update agent")
	}
	return nil
}

// DeleteAgent removes one of the user's agents and its alias.
func (s *Store) DeleteAgent(ctx context.Context, a domain.Agent) error {
	err := s.runTx(ctx, s.db.WriteTx().
		Delete(s.agents.Delete("agent_id", a.ID).If("$ = ?", "user_id", a.UserID)).
		Delete(s.agents.Delete("agent_id", aliasKey(a.Number))))
	if _, ok := cancelReasons(err); ok {
		return domain.ErrAgentNotFound
	}
	if err != nil {
		return unavailable(err, "delete agent")
	}
	return nil
}
