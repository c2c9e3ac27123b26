// Starting a session: the start and link-start transactions (session +
// the owner's concurrency slot and minutes + the link's use) and the
// renderer job's bookkeeping.

package store

import (
	"context"
	"time"

	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

// StartParams is what a start writes, decided by the caller from fresh reads.
type StartParams struct {
	SessionID, UserID string
	StartedAt         time.Time
	Expiration        time.Time
	JobDeadline       time.Time
	MaxConcurrent     int
	Period            domain.Period
	IncludedMinutes   int
	// Reserve is the minutes set aside for the session (at least 1). The
	// account as read: the reservation holds only while the balance still
	// covers every reservation, so the write checks that the minutes left
	// did not shrink (included_used not above IncludedUsedWas in the same
	// period, purchased_remaining not below PurchasedWas) and that the
	// others' reservations stay within MinutesLeft-Reserve.
	Reserve         int
	MinutesLeft     int
	IncludedUsedWas int
	SamePeriod      bool
	PurchasedWas    int
}

// StartSession moves a created session to started and takes a concurrency
// slot in one transaction. The account condition holds only while a slot is
// free and some minutes remain; ErrAccountLimit means it did not.
func (s *Store) StartSession(ctx context.Context, p StartParams) error {
	sess := s.sessions.Update("session_id", p.SessionID).
		Set("status", string(domain.StatusStarted)).
		Set("started_at", formatTime(p.StartedAt)).
		Set("ws_uri", domain.TryAgain).
		Set("job_deadline", formatTime(p.JobDeadline)).
		Set("running", runningValue).
		Set("running_user", p.UserID).
		If("$ = ? AND $ = ?", "status", string(domain.StatusCreated), "user_id", p.UserID)
	if !p.Expiration.IsZero() {
		sess = sess.Set("expiration", formatTime(p.Expiration))
	}
	sess = sess.Set("reserved_minutes", p.Reserve)
	return s.runPair(ctx, s.db.WriteTx().Update(sess).Update(s.takeSlot(p)), "start session")
}

// takeSlot takes a concurrency slot and reserves the session's minutes,
// only while a slot is free and the balance, as the caller read it, still
// covers every running session's reservation plus this one.
func (s *Store) takeSlot(p StartParams) *dynamo.Update {
	u := s.users.Update("user_id", p.UserID).Add("active_sessions", 1).If("$ < ?", "active_sessions", p.MaxConcurrent)
	return reserveMinutes(u, p)
}

// reserveMinutes adds p.Reserve to the account's reserved minutes, only
// while the balance, as the caller read it, still covers every running
// session's reservation plus this one (a start's, or an extension's).
func reserveMinutes(u *dynamo.Update, p StartParams) *dynamo.Update {
	u = u.Add("reserved_minutes", p.Reserve).
		If("(attribute_not_exists($) OR $ <= ?)", "reserved_minutes", "reserved_minutes", p.MinutesLeft-p.Reserve).
		If("$ >= ?", "purchased_remaining", p.PurchasedWas)
	if p.SamePeriod {
		return u.If("$ = ? AND $ <= ?", "usage_period", p.Period.Key(), "included_used", p.IncludedUsedWas)
	}
	// The counters belong to an earlier period: this period's included
	// minutes are all left, as long as nothing moved them into it meanwhile.
	return u.If("(attribute_not_exists($) OR $ <> ?)", "usage_period", "usage_period", p.Period.Key())
}

// StartNewSession stores a session already in the started state (a room
// the service created), takes the owner's concurrency slot and, for a link
// start, counts the use, in one transaction: a link with use_limit n gives
// exactly n sessions however many starts race.
func (s *Store) StartNewSession(ctx context.Context, p StartParams, sess domain.Session, linkID string, now time.Time) error {
	it := toSessionItem(sess)
	it.Running, it.RunningUser = runningValue, sess.UserID
	it.ReservedMinutes = p.Reserve
	tx := s.db.WriteTx().
		Put(s.sessions.Put(it).If("attribute_not_exists($)", "session_id")).
		Update(s.takeSlot(p))
	if linkID != "" {
		tx = tx.Update(s.takeLinkUse(linkID, p.UserID, now))
	}
	err := s.runTx(ctx, tx)
	if failed, ok := cancelReasons(err); ok {
		if len(failed) > 2 && failed[2] {
			return ErrLinkChanged
		}
		if failed[1] {
			return ErrAccountLimit
		}
		return ErrSessionChanged
	}
	if err != nil {
		return unavailable(err, "start session")
	}
	return nil
}

// MarkJobEnqueued records that the renderer job for a started session is on
// the queue (the job's claim deadline was written before it was sent).
func (s *Store) MarkJobEnqueued(ctx context.Context, id string, at time.Time) error {
	err := s.sessions.Update("session_id", id).Set("job_enqueued_at", formatTime(at)).
		If("$ = ?", "status", string(domain.StatusStarted)).Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return ErrSessionChanged
	}
	if err != nil {
		return unavailable(err, "mark job enqueued")
	}
	return nil
}

// RenewJobDeadline gives an unclaimed started session a new claim deadline,
// before its job is sent again.
func (s *Store) RenewJobDeadline(ctx context.Context, id string, deadline time.Time) error {
	err := s.sessions.Update("session_id", id).Set("job_deadline", formatTime(deadline)).
		If("$ = ? AND attribute_not_exists($)", "status", string(domain.StatusStarted), "worker_id").Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return ErrSessionChanged
	}
	if err != nil {
		return unavailable(err, "renew job deadline")
	}
	return nil
}

// ExtendSession moves a started session's expiration from was to
// p.Expiration and reserves p.Reserve more minutes for it, in one
// transaction with the account's balance conditions (as a start's).
// ErrSessionChanged: it ended, or another extension moved it first.
func (s *Store) ExtendSession(ctx context.Context, p StartParams, was time.Time) error {
	sess := s.sessions.Update("session_id", p.SessionID).
		Set("expiration", formatTime(p.Expiration)).Add("reserved_minutes", p.Reserve).
		If("$ = ? AND $ = ? AND $ = ?", "status", string(domain.StatusStarted), "user_id", p.UserID, "expiration", formatTime(was))
	return s.runPair(ctx, s.db.WriteTx().Update(sess).Update(reserveMinutes(s.users.Update("user_id", p.UserID), p)), "extend session")
}
