package sessions

import (
	"context"
	"errors"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/store"
	"avatarsvc/shared/webhooks"
)

// End ends a started session for its owner; ending an ended one repeats.
func (s *Service) End(ctx context.Context, userID, id string) (domain.Session, error) {
	return s.Finish(ctx, userID, id, domain.EventEnd, domain.ReasonEndedByCaller)
}

// Finish is the one end path for a session, whoever ends it: the API (End),
// the renderer worker (the room emptied, the session expired, the renderer
// failed, the worker drained) and the reaper (lease lapsed, expiration
// passed, never claimed). It moves the session to ended for ev (EventEnd or
// EventAutoEnd), bills it and frees its concurrency slot in one
// transaction, so every session is billed exactly once.
func (s *Service) Finish(ctx context.Context, userID, id string, ev domain.Event, reason string) (domain.Session, error) {
	return s.FinishIf(ctx, userID, id, ev, reason, domain.EndGuard{})
}

// ErrNoLongerDue answers FinishIf when the session has moved on from the
// situation the end was decided in (its worker heartbeated again, another
// worker claimed it): it is left running.
var ErrNoLongerDue = errors.New("session no longer due to end")

// FinishIf is Finish for ends decided from an earlier read (the reaper's
// sweep, a worker's own end): it ends the session only while guard still
// holds, checked on the fresh read and again in the end's transaction, and
// otherwise returns ErrNoLongerDue.
func (s *Service) FinishIf(ctx context.Context, userID, id string, ev domain.Event, reason string, guard domain.EndGuard) (domain.Session, error) {
	var out domain.Session
	endedNow := false
	err := s.transition(ctx, userID, id, ev, func(ctx context.Context, sess domain.Session, outcome domain.Outcome) (bool, error) {
		if outcome == domain.Repeat {
			out = sess
			return false, nil
		}
		if !guard.Holds(sess) {
			out = sess
			return false, ErrNoLongerDue
		}
		user, err := s.store.GetUser(ctx, userID)
		if err != nil {
			return false, err
		}
		now := s.now().UTC()
		period := user.CurrentPeriod(now)
		minutes := sess.BillableMinutes(now)
		includedTotal := user.EffectivePlan(now).IncludedMinutes
		includedUsed := user.IncludedUsedIn(period)
		includedLeft := includedTotal - includedUsed
		fromIncluded, fromPurchased, bill := domain.Charge(minutes, includedLeft, user.PurchasedRemaining)
		err = s.store.EndSession(ctx, store.EndParams{
			SessionID: id, LinkID: sess.LinkID, UserID: userID, EndedAt: now, Reason: reason, Billing: bill, Period: period,
			FromIncluded: fromIncluded, FromPurchased: fromPurchased, SamePeriod: user.UsagePeriod == period.Key(),
			IncludedHeadroom: fromPurchased == 0 && fromIncluded <= includedLeft,
			IncludedTotal:    includedTotal, IncludedUsedWas: includedUsed, PurchasedWas: user.PurchasedRemaining,
			Reserved: sess.ReservedMinutes, Guard: guard,
		})
		if errors.Is(err, store.ErrSessionChanged) || errors.Is(err, store.ErrAccountLimit) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		sess.Status, sess.EndedAt, sess.EndReason, sess.Billing = domain.StatusEnded, now, reason, &bill
		sess.Room.Token = ""
		out = sess
		endedNow = true
		return false, nil
	})
	if err == nil && endedNow {
		s.markRoom(ctx, out)
		s.announce(ctx, out)
	}
	return out, err
}

// markRoom writes the end on the room of a hosted session the avatar never
// served: its visitor is waiting in that room and nothing else would tell
// them (a served one sees the avatar leave). Best effort: the session has
// ended whatever LiveKit answers.
func (s *Service) markRoom(ctx context.Context, sess domain.Session) {
	if s.rooms == nil || !sess.Hosted() || !sess.ServedAt.IsZero() {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	if err := s.rooms.MarkEnded(ctx, sess.RoomName, sess.EndReason); err != nil {
		s.log.WarnContext(ctx, "mark the room ended", "session_id", sess.ID, "room", sess.RoomName, "err", err)
	}
}

// announce publishes the end to the account's webhooks: session.ended, or
// session.failed for a start no renderer ever served. After the commit, so
// a receiver never hears of an end that did not happen; a publish failure
// is logged by the publisher and does not undo the end.
func (s *Service) announce(ctx context.Context, sess domain.Session) {
	if s.events != nil {
		_ = s.events.Publish(ctx, sess.UserID, webhooks.SessionFinished(sess))
	}
}
