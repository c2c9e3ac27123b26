package domain

import "time"

// Usage is the account's usage summary at one instant.
type Usage struct {
	Period             Period
	IncludedTotal      int
	IncludedUsed       int
	IncludedRemaining  int
	PurchasedTotal     int
	PurchasedRemaining int
	TotalRemaining     int
	ActiveSessions     []Session
	ActiveMinutes      int
	ConcurrencyCurrent int
	ConcurrencyMax     int
	AvatarsUsed        int
	AvatarLimit        int // -1: unlimited
	Plan               Plan
	WillRenew          bool
}

// Summarize computes the usage summary. Running sessions count as consumed:
// their minutes, rounded up per session at now, are charged included-first
// like billed ones, so remaining figures do not jump when a session ends.
func Summarize(u User, active []Session, now time.Time) Usage {
	plan := u.EffectivePlan(now)
	period := u.CurrentPeriod(now)
	billedIncluded := u.IncludedUsedIn(period)

	activeMinutes := 0
	for _, s := range active {
		activeMinutes += MinutesUsed(now.Sub(s.StartedAt))
	}
	fromIncluded, fromPurchased, _ := Charge(activeMinutes, plan.IncludedMinutes-billedIncluded, u.PurchasedRemaining)

	used := billedIncluded + fromIncluded
	includedRemaining := max(0, plan.IncludedMinutes-used)
	purchasedRemaining := max(0, u.PurchasedRemaining-fromPurchased)
	return Usage{
		Period:             period,
		IncludedTotal:      plan.IncludedMinutes,
		IncludedUsed:       used,
		IncludedRemaining:  includedRemaining,
		PurchasedTotal:     u.PurchasedTotal,
		PurchasedRemaining: purchasedRemaining,
		TotalRemaining:     includedRemaining + purchasedRemaining,
		ActiveSessions:     active,
		ActiveMinutes:      activeMinutes,
		ConcurrencyCurrent: u.ActiveSessions,
		ConcurrencyMax:     plan.MaxConcurrent,
		AvatarsUsed:        u.AvatarsUsedIn(period),
		AvatarLimit:        plan.AvatarLimit,
		Plan:               plan,
		WillRenew:          plan.Paid && u.WillRenew,
	}
}
