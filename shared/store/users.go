package store

import (
	"context"
	"errors"
	"time"

	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

type userItem struct {
	UserID             string `dynamo:"user_id,hash"`
	Email              string `dynamo:"email,omitempty"`
	Plan               string `dynamo:"plan"`
	CreatedAt          string `dynamo:"created_at"`
	PeriodStart        string `dynamo:"period_start,omitempty"`
	PeriodEnd          string `dynamo:"period_end,omitempty"`
	WillRenew          bool   `dynamo:"will_renew"`
	UsagePeriod        string `dynamo:"usage_period,omitempty"`
	IncludedUsed       int    `dynamo:"included_used"`
	AvatarsUsed        int    `dynamo:"avatars_used"`
	PurchasedTotal     int    `dynamo:"purchased_total"`
	PurchasedRemaining int    `dynamo:"purchased_remaining"`
	ActiveSessions     int    `dynamo:"active_sessions"`
	ReservedMinutes    int    `dynamo:"reserved_minutes"`
	// VoiceAgents is a string set (absent when empty).
	VoiceAgents []string `dynamo:"voice_agents,set,omitempty"`
}

func toUserItem(u domain.User) userItem {
	return userItem{
		UserID: u.ID, Email: u.Email, Plan: u.PlanKey, CreatedAt: formatTime(u.CreatedAt),
		PeriodStart: formatTime(u.PeriodStart), PeriodEnd: formatTime(u.PeriodEnd), WillRenew: u.WillRenew,
		UsagePeriod: u.UsagePeriod, IncludedUsed: u.IncludedUsed, AvatarsUsed: u.AvatarsUsed,
		PurchasedTotal: u.PurchasedTotal, PurchasedRemaining: u.PurchasedRemaining, ActiveSessions: u.ActiveSessions,
		ReservedMinutes: u.ReservedMinutes, VoiceAgents: u.VoiceAgents,
	}
}

func (it userItem) domain() domain.User {
	return domain.User{
		ID: it.UserID, Email: it.Email, PlanKey: it.Plan, CreatedAt: parseTime(it.CreatedAt),
		PeriodStart: parseTime(it.PeriodStart), PeriodEnd: parseTime(it.PeriodEnd), WillRenew: it.WillRenew,
		UsagePeriod: it.UsagePeriod, IncludedUsed: it.IncludedUsed, AvatarsUsed: it.AvatarsUsed,
		PurchasedTotal: it.PurchasedTotal, PurchasedRemaining: it.PurchasedRemaining, ActiveSessions: it.ActiveSessions,
		ReservedMinutes: it.ReservedMinutes, VoiceAgents: it.VoiceAgents,
	}
}

var errUserNotFound = domain.Errorf(domain.NotFound, "User not found")

// CreateUser stores a new account; an existing id is a conflict.
func (s *Store) CreateUser(ctx context.Context, u domain.User) error {
	err := s.users.Put(toUserItem(u)).If("attribute_not_exists($)", "user_id").Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return domain.Errorf(domain.Conflict, "User %s already exists", u.ID)
	}
	if err != nil {
		return unavailable(err, "create user")
	}
	return nil
}

// GetUser reads an account (strongly consistent: limits are checked on it).
func (s *Store) GetUser(ctx context.Context, id string) (domain.User, error) {
	var it userItem
	err := s.users.Get("user_id", id).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) {
		return domain.User{}, errUserNotFound
	}
	if err != nil {
		return domain.User{}, unavailable(err, "get user")
	}
	return it.domain(), nil
}

// ListUsers returns every account (admin use; a scan).
func (s *Store) ListUsers(ctx context.Context) ([]domain.User, error) {
	var items []userItem
	if err := s.users.Scan().All(ctx, &items); err != nil {
		return nil, unavailable(err, "list users")
	}
	out := make([]domain.User, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	return out, nil
}

// SetPlan changes an account's plan and subscription period.
func (s *Store) SetPlan(ctx context.Context, userID, plan string, periodStart, periodEnd time.Time, willRenew bool) error {
	u := s.users.Update("user_id", userID).Set("plan", plan).Set("will_renew", willRenew).
		If("attribute_exists($)", "user_id")
	if periodStart.IsZero() {
		u = u.Remove("period_start", "period_end")
	} else {
		u = u.Set("period_start", formatTime(periodStart)).Set("period_end", formatTime(periodEnd))
	}
	err := u.Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return errUserNotFound
	}
	if err != nil {
		return unavailable(err, "set plan")
	}
	return nil
}

// AddPurchasedMinutes credits purchased minutes to an account.
func (s *Store) AddPurchasedMinutes(ctx context.Context, userID string, minutes int) (domain.User, error) {
	var it userItem
	err := s.users.Update("user_id", userID).Add("purchased_total", minutes).Add("purchased_remaining", minutes).
		If("attribute_exists($)", "user_id").Value(ctx, &it)
	if dynamo.IsCondCheckFailed(err) {
		return domain.User{}, errUserNotFound
	}
	if err != nil {
		return domain.User{}, unavailable(err, "add minutes")
	}
	return it.domain(), nil
}

// SetVoiceAgentAllowed adds key to (or removes it from) the voice agents an
// account may use.
func (s *Store) SetVoiceAgentAllowed(ctx context.Context, userID, key string, allowed bool) (domain.User, error) {
	u := s.users.Update("user_id", userID).If("attribute_exists($)", "user_id")
	if allowed {
		u = u.AddStringsToSet("voice_agents", key)
	} else {
		u = u.DeleteStringsFromSet("voice_agents", key)
	}
	var it userItem
	err := u.Value(ctx, &it)
	if dynamo.IsCondCheckFailed(err) {
		return domain.User{}, errUserNotFound
	}
	if err != nil {
		return domain.User{}, unavailable(err, "set voice agent")
	}
	return it.domain(), nil
}
