package domain

import (
	"fmt"
	"slices"
	"time"
)

// User is an account: its plan, its billing period and its minute counters.
type User struct {
	ID        string
	Email     string
	PlanKey   string
	CreatedAt time.Time
	// PeriodStart and PeriodEnd are the payment provider's subscription period
	// (paid plans only; the free plan uses the calendar month).
	PeriodStart time.Time
	PeriodEnd   time.Time
	WillRenew   bool
	// UsagePeriod names the period (its start, RFC 3339) that IncludedUsed and
	// AvatarsUsed count; a different value means those counters are from an
	// earlier period and read as zero.
	UsagePeriod        string
	IncludedUsed       int
	AvatarsUsed        int
	PurchasedTotal     int
	PurchasedRemaining int
	// ActiveSessions is the concurrency counter, changed only in the same
	// transaction as a session's start or end.
	ActiveSessions int
	// ReservedMinutes is the sum of the running sessions' reservations
	// (Session.ReservedMinutes), changed in the same transactions.
	ReservedMinutes int
	// VoiceAgents are the LiveKit agent names and ElevenLabs agent ids this
	// account may put behind its avatars, as VoiceAgentKey values. The
	// operator sets them (scripts/admin voice-agent-allow): a LiveKit agent
	// name is a worker on the operator's LiveKit, and an ElevenLabs signed
	// URL is signed with the operator's key, so neither is anyone's to take.
	VoiceAgents []string
}

// AllowsVoiceAgent says whether the account may use v. The built-in local
// partner needs no permission.
func (u User) AllowsVoiceAgent(v VoiceAgent) error {
	if v.Provider == ProviderLocal || slices.Contains(u.VoiceAgents, VoiceAgentKey(v.Provider, v.AgentID)) {
		return nil
	}
	return Errorf(Invalid, "voice_agent %s %q is not enabled for this account", v.Provider, truncate(v.AgentID, 40)).
		WithSuggestion("Voice agents other than local are enabled per account by the operator: ask support to enable this one")
}

// VoiceAgentKey names a voice agent in User.VoiceAgents: provider:agent_id.
func VoiceAgentKey(provider, agentID string) string { return provider + ":" + agentID }

// Period is a billing period: [Start, End).
type Period struct {
	Start, End time.Time
}

// Key identifies the period in counters.
func (p Period) Key() string { return p.Start.UTC().Format(time.RFC3339) }

// EffectivePlan is the plan in force at now: a paid plan that will not renew
// falls back to Free once its period has ended.
func (u User) EffectivePlan(now time.Time) Plan {
	p, err := LookupPlan(u.PlanKey)
	if err != nil {
		return Plans["free"]
	}
	if p.Paid && !u.WillRenew && !u.PeriodEnd.IsZero() && !now.Before(u.PeriodEnd) {
		return Plans["free"]
	}
	return p
}

// CurrentPeriod is the period containing now: the calendar month (UTC) on the
// free plan, the subscription period (rolled forward monthly while it renews)
// on paid plans.
func (u User) CurrentPeriod(now time.Time) Period {
	now = now.UTC()
	if !u.EffectivePlan(now).Paid || u.PeriodStart.IsZero() {
		start := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		return Period{Start: start, End: start.AddDate(0, 1, 0)}
	}
	start, end := u.PeriodStart.UTC(), u.PeriodEnd.UTC()
	if end.IsZero() || !end.After(start) {
		end = start.AddDate(0, 1, 0)
	}
	for months := 1; !now.Before(end); months++ {
		start, end = end, u.PeriodStart.UTC().AddDate(0, months+1, 0)
	}
	return Period{Start: start, End: end}
}

// IncludedUsedIn is the included minutes billed in period p.
func (u User) IncludedUsedIn(p Period) int {
	if u.UsagePeriod != p.Key() {
		return 0
	}
	return u.IncludedUsed
}

// AvatarsUsedIn is the avatars created in period p.
func (u User) AvatarsUsedIn(p Period) int {
	if u.UsagePeriod != p.Key() {
		return 0
	}
	return u.AvatarsUsed
}

// MinutesRemaining is what the account may still consume in period p,
// before counting running sessions.
func (u User) MinutesRemaining(now time.Time) int {
	p := u.CurrentPeriod(now)
	included := max(0, u.EffectivePlan(now).IncludedMinutes-u.IncludedUsedIn(p))
	return included + max(0, u.PurchasedRemaining)
}

// Reservation is how many minutes a session starting now sets aside, 0 when
// nothing is left to reserve: the plan's per-session cap (or maxMinutes, a
// link's own cap, when lower), but never more than what running sessions
// have not already reserved, so parallel sessions cannot spend the same
// minutes twice. A plan with no per-session cap shares what is unreserved
// equally among its free concurrency slots.
func (u User) Reservation(now time.Time, maxMinutes int) int {
	plan := u.EffectivePlan(now)
	free := u.MinutesRemaining(now) - max(0, u.ReservedMinutes)
	if free < 1 {
		return 0
	}
	r := free
	if plan.MaxSessionMinutes > 0 {
		r = min(r, plan.MaxSessionMinutes)
	} else {
		r = max(1, free/max(1, plan.MaxConcurrent-u.ActiveSessions))
	}
	if maxMinutes > 0 {
		r = min(r, maxMinutes)
	}
	return r
}

// MaxExtendMinutes bounds one extension (POST /v1/sessions/{id}/extend).
const MaxExtendMinutes = 60

// Extension decides how many minutes a started session may be extended by
// now, for a caller who asks for want: no further than the plan's cap on
// one session's length, and no more than the minutes running sessions have
// not reserved (the extension is reserved like a start's). It may grant
// less than asked; it refuses, with the spec's limit messages, when it can
// grant nothing.
func (u User) Extension(now time.Time, sess Session, want int) (int, error) {
	switch {
	case want < 1 || want > MaxExtendMinutes:
		return 0, Errorf(Invalid, "minutes must be a whole number from 1 to %d", MaxExtendMinutes)
	case sess.Status == StatusEnded:
		return 0, Errorf(Conflict, "Cannot extend an ended session").WithSuggestion("Start a new session")
	case sess.Status != StatusStarted:
		return 0, Errorf(Conflict, "Cannot extend a session that was never started").WithSuggestion("Start it first: PUT /v1/sessions/{id}/start")
	case sess.Expiration.IsZero():
		return 0, Errorf(Conflict, "This session has no expiration to extend")
	}
	grant := want
	plan := u.EffectivePlan(now)
	if plan.MaxSessionMinutes > 0 {
		room := int(sess.StartedAt.Add(time.Duration(plan.MaxSessionMinutes)*time.Minute).Sub(sess.Expiration) / time.Minute)
		if room < 1 {
			return 0, Errorf(LimitExceeded, "Session length limit reached").
				WithSuggestion(fmt.Sprintf("The %s plan allows sessions of up to %d minutes; start a new session or upgrade the plan", plan.Name, plan.MaxSessionMinutes))
		}
		grant = min(grant, room)
	}
	free := u.MinutesRemaining(now) - max(0, u.ReservedMinutes)
	if free < 1 {
		return 0, Errorf(LimitExceeded, "No minutes remaining").
			WithSuggestion("Running sessions have reserved every minute left; purchase more minutes or end a session")
	}
	return min(grant, free), nil
}
