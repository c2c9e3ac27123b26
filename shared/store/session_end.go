// Ending a session: the one end transaction (status, billing, minute
// counters, slot release) and the guards of automatic ends.

package store

import (
	"context"
	"time"

	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

// EndParams is what an end writes, decided by the caller from fresh reads.
type EndParams struct {
	SessionID     string
	LinkID        string // a session started through a link frees its running slot
	UserID        string
	EndedAt       time.Time
	Reason        string
	Billing       domain.Billing
	Period        domain.Period
	FromIncluded  int
	FromPurchased int
	// SamePeriod says whether the account's counters already belong to Period
	// (add to them) or to an earlier one (restart them).
	SamePeriod bool
	// The account as the caller read it. The charge was split from these
	// values, so the write holds only while they still justify the split:
	// IncludedHeadroom means the charge fits the included minutes left, and
	// only needs included_used to still be at most IncludedTotal-FromIncluded
	// (ends that all fit do not conflict); otherwise the charge drew on
	// purchased minutes or overran, and needs both counters unchanged.
	IncludedHeadroom bool
	IncludedTotal    int
	IncludedUsedWas  int
	PurchasedWas     int
	// Reserved is the session's reservation, given back to the account.
	Reserved int
	// Guard narrows an automatic end to the situation it was decided in.
	Guard domain.EndGuard
}

// guardEnd adds g's conditions to a session's end.
func guardEnd(u *dynamo.Update, g domain.EndGuard) *dynamo.Update {
	if g.WorkerID != "" {
		u = u.If("$ = ?", "worker_id", g.WorkerID)
	}
	if g.Unclaimed {
		u = u.If("attribute_not_exists($)", "worker_id")
	}
	if !g.LeaseLapsedBy.IsZero() {
		u = u.If("$ < ?", "lease_until", formatTime(g.LeaseLapsedBy))
	}
	return u
}

// EndSession moves a started session to ended, records its billing, charges
// the account and frees the concurrency slot, all in one transaction, so a
// session is billed exactly once. The account condition makes two ends that
// read the same balance unable to both spend it: the loser gets
// ErrAccountLimit and re-reads.
func (s *Store) EndSession(ctx context.Context, p EndParams) error {
	b := p.Billing
	sess := s.sessions.Update("session_id", p.SessionID).
		Set("status", string(domain.StatusEnded)).
		Set("ended_at", formatTime(p.EndedAt)).
		Set("end_reason", p.Reason).
		Set("billing", &b).
		// The room token is a credential for someone else's room: it is
		// kept only while the session may still need to join.
		Remove("running", "running_user", "room_token").
		If("$ = ? AND $ = ?", "status", string(domain.StatusStarted), "user_id", p.UserID)
	sess = guardEnd(sess, p.Guard)
	acct := s.users.Update("user_id", p.UserID).
		Add("active_sessions", -1).
		Add("reserved_minutes", -p.Reserved).
		Add("purchased_remaining", -p.FromPurchased)
	key := p.Period.Key()
	if p.SamePeriod {
		acct = acct.Add("included_used", p.FromIncluded).If("$ = ?", "usage_period", key)
		switch {
		case p.FromIncluded == 0 && p.FromPurchased == 0:
			// Nothing charged: nothing read matters.
		case p.IncludedHeadroom:
			acct = acct.If("$ <= ?", "included_used", p.IncludedTotal-p.FromIncluded)
		default:
			acct = acct.If("$ = ? AND $ = ?", "included_used", p.IncludedUsedWas, "purchased_remaining", p.PurchasedWas)
		}
	} else {
		acct = acct.Set("usage_period", key).Set("included_used", p.FromIncluded).Set("avatars_used", 0).
			If("(attribute_not_exists($) OR $ <> ?)", "usage_period", "usage_period", key)
		if p.FromPurchased > 0 {
			acct = acct.If("$ = ?", "purchased_remaining", p.PurchasedWas)
		}
	}
	tx := s.db.WriteTx().Update(sess).Update(acct)
	if p.LinkID != "" {
		tx = tx.Update(s.freeLinkSlot(p.LinkID))
	}
	return s.runPair(ctx, tx, "end session")
}
