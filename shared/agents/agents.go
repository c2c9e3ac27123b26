// Package agents is the agent service: an avatar plus the voice agent that
// speaks through it. Agents keep only their avatar's id: image and voice are
// read from the avatar when the agent is shown or used, so an avatar change
// applies to every agent at once.
package agents

import (
	"context"
	"errors"
	"strings"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/retry"
	"avatarsvc/shared/store"
)

// Store is the persistence the service needs.
type Store interface {
	NumberAgent(ctx context.Context) (int64, error)
	CreateAgent(ctx context.Context, a domain.Agent) error
	GetAgent(ctx context.Context, userID, id string) (domain.Agent, error)
	AgentIDForNumber(ctx context.Context, n int64) (string, error)
	ListAgents(ctx context.Context, userID string, page domain.Page) ([]domain.Agent, string, error)
	PutAgent(ctx context.Context, a domain.Agent, updatedWas time.Time) error
	DeleteAgent(ctx context.Context, a domain.Agent) error
	// GetUser reads the account, for the voice agents it may use.
	GetUser(ctx context.Context, id string) (domain.User, error)
}

// Avatars resolves avatar ids (shared/avatars).
type Avatars interface {
	Get(ctx context.Context, userID, ref string) (domain.Avatar, error)
}

// Service manages agents.
type Service struct {
	store   Store
	avatars Avatars
	now     func() time.Time
}

// New returns a Service.
func New(st Store, av Avatars, now func() time.Time) *Service {
	return &Service{store: st, avatars: av, now: now}
}

// Bounds on agent fields; the JSON parts together stay far below
// DynamoDB's 400 KB item limit.
const (
	maxName     = 200
	maxText     = 16 << 10
	maxLanguage = 16
	DefaultLang = "en"
)

// Fields are an agent's settable fields. In an update nil means "leave as
// is"; in a create nil means empty.
type Fields struct {
	Name          *string
	AvatarID      *string
	Language      *string
	Greeting      *string
	Context       *string
	Properties    map[string]any
	Memories      []any
	KnowledgeBase []any
	VoiceAgent    **domain.VoiceAgent // set to a nil pointer to remove
}

// Agent is an agent with its avatar, as shown to callers.
type Agent struct {
	domain.Agent
	Avatar *domain.Avatar // nil when the avatar was deleted
}

func (s *Service) apply(ctx context.Context, userID string, a *domain.Agent, f Fields) error {
	if f.Name != nil {
		n := strings.TrimSpace(*f.Name)
		if n == "" || len(n) > maxName {
			return domain.Errorf(domain.Invalid, "name must be 1 to %d characters", maxName)
		}
		a.Name = n
	}
	if f.AvatarID != nil {
		av, err := s.avatars.Get(ctx, userID, *f.AvatarID)
		if err != nil {
			return err
		}
		a.AvatarID = av.ID
	}
	if f.Language != nil {
		if *f.Language == "" || len(*f.Language) > maxLanguage {
			return domain.Errorf(domain.Invalid, "language must be a language tag such as en or pt-BR")
		}
		a.Language = *f.Language
	}
	for _, t := range []struct {
		name string
		v    *string
		dst  *string
	}{{"custom_greeting", f.Greeting, &a.Greeting}, {"context", f.Context, &a.Context}} {
		if t.v == nil {
			continue
		}
		if len(*t.v) > maxText {
			return domain.Errorf(domain.Invalid, "%s is too long", t.name).WithSuggestion("Keep it under 16 KiB")
		}
		*t.dst = *t.v
	}
	if f.Properties != nil {
		a.Properties = f.Properties
	}
	if f.Memories != nil {
		a.Memories = f.Memories
	}
	if f.KnowledgeBase != nil {
		a.KnowledgeBase = f.KnowledgeBase
	}
	if f.VoiceAgent != nil {
		if *f.VoiceAgent == nil {
			a.VoiceAgent = domain.VoiceAgent{}
		} else {
			v := **f.VoiceAgent
			if err := v.Validate(); err != nil {
				return err
			}
			if v.Provider != domain.ProviderLocal {
				u, err := s.store.GetUser(ctx, userID)
				if err != nil {
					return err
				}
				if err := u.AllowsVoiceAgent(v); err != nil {
					return err
				}
			}
			a.VoiceAgent = v
		}
	}
	return nil
}

// Create makes an agent. name and avatar_id are required.
func (s *Service) Create(ctx context.Context, userID string, f Fields) (Agent, error) {
	if f.Name == nil {
		return Agent{}, domain.Errorf(domain.Invalid, "name is required")
	}
	if f.AvatarID == nil {
		return Agent{}, domain.Errorf(domain.Invalid, "avatar_id is required").
			WithSuggestion("Pass an avat_... id from avatar upload, its integer id, or a catalog avatar id")
	}
	now := s.now().UTC()
	a := domain.Agent{UserID: userID, Language: DefaultLang, Status: domain.AgentActive, CreatedAt: now, UpdatedAt: now}
	if err := s.apply(ctx, userID, &a, f); err != nil {
		return Agent{}, err
	}
	return s.insert(ctx, a)
}

func (s *Service) insert(ctx context.Context, a domain.Agent) (Agent, error) {
	n, err := s.store.NumberAgent(ctx)
	if err != nil {
		return Agent{}, err
	}
	a.ID, a.Number = domain.NewAgentID(), n
	if err := s.store.CreateAgent(ctx, a); err != nil {
		return Agent{}, err
	}
	return s.withAvatar(ctx, a)
}

// NewTemporary makes (without storing) a hidden agent for an avatar
// preview; the caller stores it with its link.
func (s *Service) NewTemporary(ctx context.Context, userID string, av domain.Avatar, expires time.Time) (domain.Agent, error) {
	n, err := s.store.NumberAgent(ctx)
	if err != nil {
		return domain.Agent{}, err
	}
	now := s.now().UTC()
	return domain.Agent{
		ID: domain.NewAgentID(), Number: n, UserID: userID, Name: "Preview of " + av.Name, AvatarID: av.ID,
		Language: DefaultLang, Status: domain.AgentActive, CreatedAt: now, UpdatedAt: now,
		Temporary: true, ExpiresAt: expires,
	}, nil
}

func (s *Service) withAvatar(ctx context.Context, a domain.Agent) (Agent, error) {
	out := Agent{Agent: a}
	if a.AvatarID == "" {
		return out, nil
	}
	av, err := s.avatars.Get(ctx, a.UserID, a.AvatarID)
	if errors.Is(err, domain.ErrAvatarNotFound) {
		return out, nil
	}
	if err != nil {
		return Agent{}, err
	}
	out.Avatar = &av
	return out, nil
}

// Get returns one of the user's agents by either id form.
func (s *Service) Get(ctx context.Context, userID, ref string) (Agent, error) {
	a, err := s.get(ctx, userID, ref)
	if err != nil {
		return Agent{}, err
	}
	return s.withAvatar(ctx, a)
}

func (s *Service) get(ctx context.Context, userID, ref string) (domain.Agent, error) {
	id, n, err := domain.ParseAgentRef(ref)
	if err != nil {
		return domain.Agent{}, err
	}
	if id == "" {
		if id, err = s.store.AgentIDForNumber(ctx, n); err != nil {
			return domain.Agent{}, err
		}
	}
	a, err := s.store.GetAgent(ctx, userID, id)
	if err == nil && a.Temporary {
		return domain.Agent{}, domain.ErrAgentNotFound
	}
	return a, err
}

// List returns a page of the user's agents, newest first.
func (s *Service) List(ctx context.Context, userID string, page domain.Page) ([]Agent, string, error) {
	list, next, err := s.store.ListAgents(ctx, userID, page)
	if err != nil {
		return nil, "", err
	}
	out := make([]Agent, len(list))
	for i, a := range list {
		if out[i], err = s.withAvatar(ctx, a); err != nil {
			return nil, "", err
		}
	}
	return out, next, nil
}

// Update changes the given fields of the user's agent.
func (s *Service) Update(ctx context.Context, userID, ref string, f Fields) (Agent, error) {
	var out Agent
	exhausted, err := retry.Service.Do(ctx, func(ctx context.Context) (bool, error) {
		a, err := s.get(ctx, userID, ref)
		if err != nil {
			return false, err
		}
		was := a.UpdatedAt
		if err := s.apply(ctx, userID, &a, f); err != nil {
			return false, err
		}
		a.UpdatedAt = s.now().UTC()
		err = s.store.PutAgent(ctx, a, was)
		if errors.Is(err, store.ErrChanged) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		out, err = s.withAvatar(ctx, a)
		return false, err
	})
	if exhausted {
		return Agent{}, domain.Errorf(domain.Unavailable, "The agent is changing concurrently, please retry")
	}
	return out, err
}

// Delete removes the user's agent. Links to it stop working.
func (s *Service) Delete(ctx context.Context, userID, ref string) error {
	a, err := s.get(ctx, userID, ref)
	if err != nil {
		return err
	}
	return s.store.DeleteAgent(ctx, a)
}

// Duplicate copies the user's agent: " (Copy)" appended to the name, every
// setting copied (avatar, greeting, context, properties, memories,
// knowledge base, voice agent), no session history (sessions refer to the
// original). The voice follows the avatar, which the copy shares.
func (s *Service) Duplicate(ctx context.Context, userID, ref string) (Agent, error) {
	a, err := s.get(ctx, userID, ref)
	if err != nil {
		return Agent{}, err
	}
	now := s.now().UTC()
	c := a
	c.Name = a.Name + " (Copy)"
	c.CreatedAt, c.UpdatedAt = now, now
	return s.insert(ctx, c)
}
