// Package accounts manages users, plans, purchased minutes and API keys:
// what the admin tool and the local stack's seeding do.
package accounts

import (
	"context"
	"strings"
	"time"

	"avatarsvc/shared/domain"
)

// Store is the persistence accounts need.
type Store interface {
	CreateUser(ctx context.Context, u domain.User) error
	GetUser(ctx context.Context, id string) (domain.User, error)
	ListUsers(ctx context.Context) ([]domain.User, error)
	SetPlan(ctx context.Context, userID, plan string, periodStart, periodEnd time.Time, willRenew bool) error
	AddPurchasedMinutes(ctx context.Context, userID string, minutes int) (domain.User, error)
	SetVoiceAgentAllowed(ctx context.Context, userID, key string, allowed bool) (domain.User, error)
	PutKey(ctx context.Context, k domain.APIKey) error
	KeyByHash(ctx context.Context, hash string) (domain.APIKey, error)
	ListKeys(ctx context.Context, userID string) ([]domain.APIKey, error)
	SetKeyActive(ctx context.Context, hash string, active bool) error
	DeleteKey(ctx context.Context, hash string) error
}

// Service manages accounts.
type Service struct {
	store Store
	now   func() time.Time
}

// New returns a Service.
func New(st Store, now func() time.Time) *Service { return &Service{store: st, now: now} }

// CreateUser opens an account on plan. Paid plans get a monthly
// subscription period starting now that renews.
func (s *Service) CreateUser(ctx context.Context, id, email, plan string) (domain.User, error) {
	p, err := domain.LookupPlan(plan)
	if err != nil {
		return domain.User{}, err
	}
	if id == "" {
		id = domain.NewUserID()
	}
	now := s.now().UTC()
	u := domain.User{ID: id, Email: email, PlanKey: p.Key, CreatedAt: now}
	if p.Paid {
		u.PeriodStart, u.PeriodEnd, u.WillRenew = now, now.AddDate(0, 1, 0), true
	}
	if err := s.store.CreateUser(ctx, u); err != nil {
		return domain.User{}, err
	}
	return u, nil
}

// GetUser returns an account.
func (s *Service) GetUser(ctx context.Context, id string) (domain.User, error) {
	return s.store.GetUser(ctx, id)
}

// ListUsers returns every account.
func (s *Service) ListUsers(ctx context.Context) ([]domain.User, error) {
	return s.store.ListUsers(ctx)
}

// ChangePlan moves an account to plan; a paid plan starts a new period now.
func (s *Service) ChangePlan(ctx context.Context, userID, plan string) error {
	p, err := domain.LookupPlan(plan)
	if err != nil {
		return err
	}
	now := s.now().UTC()
	if !p.Paid {
		return s.store.SetPlan(ctx, userID, p.Key, time.Time{}, time.Time{}, false)
	}
	return s.store.SetPlan(ctx, userID, p.Key, now, now.AddDate(0, 1, 0), true)
}

// AddMinutes credits purchased minutes.
func (s *Service) AddMinutes(ctx context.Context, userID string, minutes int) (domain.User, error) {
	if minutes <= 0 {
		return domain.User{}, domain.Errorf(domain.Invalid, "minutes must be positive")
	}
	return s.store.AddPurchasedMinutes(ctx, userID, minutes)
}

// CreateKey issues a key for an existing account. The plaintext is returned
// once and never stored.
func (s *Service) CreateKey(ctx context.Context, userID, mode, name string) (string, domain.APIKey, error) {
	if _, err := s.store.GetUser(ctx, userID); err != nil {
		return "", domain.APIKey{}, err
	}
	plain, k, err := domain.NewAPIKey(userID, mode, name, s.now())
	if err != nil {
		return "", domain.APIKey{}, err
	}
	if err := s.store.PutKey(ctx, k); err != nil {
		return "", domain.APIKey{}, err
	}
	return plain, k, nil
}

// ListKeys returns an account's keys (hashes and prefixes, never plaintext).
func (s *Service) ListKeys(ctx context.Context, userID string) ([]domain.APIKey, error) {
	return s.store.ListKeys(ctx, userID)
}

// KeyHash accepts a key's plaintext or its hash and returns the hash.
func KeyHash(ref string) string {
	if domain.KeyMode(ref) != "" {
		return domain.HashSecret(ref)
	}
	return strings.ToLower(ref)
}

// Lookup finds a key by plaintext or hash.
func (s *Service) Lookup(ctx context.Context, ref string) (domain.APIKey, error) {
	return s.store.KeyByHash(ctx, KeyHash(ref))
}

// DeactivateKey stops a key working, keeping its record.
func (s *Service) DeactivateKey(ctx context.Context, ref string) error {
	return s.store.SetKeyActive(ctx, KeyHash(ref), false)
}

// ActivateKey lets a deactivated key work again.
func (s *Service) ActivateKey(ctx context.Context, ref string) error {
	return s.store.SetKeyActive(ctx, KeyHash(ref), true)
}

// DeleteKey revokes a key at once.
func (s *Service) DeleteKey(ctx context.Context, ref string) error {
	return s.store.DeleteKey(ctx, KeyHash(ref))
}

// AllowVoiceAgent lets an account put a LiveKit agent (its agent_name) or an
// ElevenLabs agent behind its avatars; RevokeVoiceAgent takes that back, and
// sessions that would use it fail to launch as agent_unavailable.
func (s *Service) AllowVoiceAgent(ctx context.Context, userID, provider, agentID string) (domain.User, error) {
	return s.setVoiceAgent(ctx, userID, provider, agentID, true)
}

// RevokeVoiceAgent: see AllowVoiceAgent.
func (s *Service) RevokeVoiceAgent(ctx context.Context, userID, provider, agentID string) (domain.User, error) {
	return s.setVoiceAgent(ctx, userID, provider, agentID, false)
}

func (s *Service) setVoiceAgent(ctx context.Context, userID, provider, agentID string, allowed bool) (domain.User, error) {
	if provider != domain.ProviderLiveKit && provider != domain.ProviderElevenLabs {
		return domain.User{}, domain.Errorf(domain.Invalid, "provider must be %s or %s (%s needs no permission)",
			domain.ProviderLiveKit, domain.ProviderElevenLabs, domain.ProviderLocal)
	}
	v := domain.VoiceAgent{Provider: provider, AgentID: agentID, AuthMethod: domain.AuthNone}
	if err := v.Validate(); err != nil {
		return domain.User{}, err
	}
	return s.store.SetVoiceAgentAllowed(ctx, userID, domain.VoiceAgentKey(provider, agentID), allowed)
}
