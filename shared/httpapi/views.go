package httpapi

import (
	"time"

	"avatarsvc/shared/domain"
)

// isoMillis is the timestamp form of every response.
const isoMillis = "2006-01-02T15:04:05.000Z"

func iso(t time.Time) string { return t.UTC().Format(isoMillis) }

func isoOrNull(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := iso(t)
	return &s
}

// sessionView is a Session as responses show it: no token, no room.
type sessionView struct {
	SessionID   string          `json:"session_id"`
	Status      string          `json:"status"`
	CreatedAt   string          `json:"created_at"`
	StartedAt   *string         `json:"started_at"`
	EndedAt     *string         `json:"ended_at"`
	Expiration  *string         `json:"expiration"`
	AspectRatio string          `json:"aspect_ratio"`
	Duration    int             `json:"duration"`
	Metadata    map[string]any  `json:"metadata"`
	Billing     *domain.Billing `json:"billing,omitempty"`
	// EndReason says why an ended session ended (ended_by_caller,
	// participants_left, expired, avatar_rejected: no face found, ...).
	EndReason string `json:"end_reason,omitempty"`
	// Quality (an extension) is what the renderer measured, on ended
	// sessions a renderer served.
	Quality *domain.Quality `json:"quality,omitempty"`
}

func viewSession(s domain.Session, now time.Time) sessionView {
	v := sessionView{
		SessionID: s.ID, Status: string(s.Status), CreatedAt: iso(s.CreatedAt),
		StartedAt: isoOrNull(s.StartedAt), EndedAt: isoOrNull(s.EndedAt), Expiration: isoOrNull(s.Expiration),
		AspectRatio: s.AspectRatio, Duration: s.DurationSeconds(now), Metadata: s.Metadata,
	}
	if v.Metadata == nil {
		v.Metadata = map[string]any{}
	}
	if s.Status == domain.StatusEnded {
		v.Billing, v.EndReason, v.Quality = s.Billing, s.EndReason, s.Quality
	}
	return v
}

type usageView struct {
	Period struct {
		Start string `json:"start"`
		End   string `json:"end"`
	} `json:"period"`
	IncludedMinutes struct {
		Total     int `json:"total"`
		Used      int `json:"used"`
		Remaining int `json:"remaining"`
	} `json:"included_minutes"`
	PurchasedMinutes struct {
		Total     int `json:"total"`
		Remaining int `json:"remaining"`
	} `json:"purchased_minutes"`
	TotalRemaining int           `json:"total_remaining"`
	ActiveSessions []sessionView `json:"active_sessions"`
	ActiveMinutes  int           `json:"active_minutes"`
	Concurrency    struct {
		Current   int `json:"current"`
		Max       int `json:"max"`
		Available int `json:"available"`
	} `json:"concurrency"`
	Avatars struct {
		Used      int  `json:"used"`
		Limit     *int `json:"limit"`
		Remaining int  `json:"remaining"`
	} `json:"avatars"`
	Plan struct {
		Key                string `json:"key"`
		Name               string `json:"name"`
		MaxSessionDuration int    `json:"max_session_duration"`
		WillRenew          bool   `json:"will_renew"`
	} `json:"plan"`
}

// unlimitedAvatarsRemaining stands for "no limit" where the spec wants an
// integer remaining count.
const unlimitedAvatarsRemaining = -1

func viewUsage(u domain.Usage, now time.Time) usageView {
	var v usageView
	v.Period.Start, v.Period.End = iso(u.Period.Start), iso(u.Period.End)
	v.IncludedMinutes.Total, v.IncludedMinutes.Used, v.IncludedMinutes.Remaining = u.IncludedTotal, u.IncludedUsed, u.IncludedRemaining
	v.PurchasedMinutes.Total, v.PurchasedMinutes.Remaining = u.PurchasedTotal, u.PurchasedRemaining
	v.TotalRemaining = u.TotalRemaining
	v.ActiveSessions = make([]sessionView, 0, len(u.ActiveSessions))
	for _, s := range u.ActiveSessions {
		sv := viewSession(s, now)
		sv.Status = "active" // the usage summary's label for started sessions
		v.ActiveSessions = append(v.ActiveSessions, sv)
	}
	v.ActiveMinutes = u.ActiveMinutes
	v.Concurrency.Current, v.Concurrency.Max = u.ConcurrencyCurrent, u.ConcurrencyMax
	v.Concurrency.Available = max(0, u.ConcurrencyMax-u.ConcurrencyCurrent)
	v.Avatars.Used = u.AvatarsUsed
	if u.AvatarLimit >= 0 {
		limit := u.AvatarLimit
		v.Avatars.Limit = &limit
		v.Avatars.Remaining = max(0, limit-u.AvatarsUsed)
	} else {
		v.Avatars.Remaining = unlimitedAvatarsRemaining
	}
	v.Plan.Key, v.Plan.Name = u.Plan.Key, u.Plan.Name
	v.Plan.MaxSessionDuration = u.Plan.MaxSessionMinutes
	v.Plan.WillRenew = u.WillRenew
	return v
}
