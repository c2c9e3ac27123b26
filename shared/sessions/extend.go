package sessions

import (
	"context"
	"errors"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/retry"
	"avatarsvc/shared/store"
)

// Extended is what an extension did.
type Extended struct {
	Session      domain.Session
	MinutesAdded int
}

// Extend moves a started session's expiration later by up to minutes (an
// API extension), within the plan's cap on a session's length and the
// minutes the account has not reserved (domain.User.Extension); the
// renderer learns of it on its next heartbeat and warns again before the
// new time.
func (s *Service) Extend(ctx context.Context, userID, id string, minutes int) (Extended, error) {
	var out Extended
	exhausted, err := retry.Service.Do(ctx, func(ctx context.Context) (bool, error) {
		sess, err := s.store.GetSession(ctx, userID, id)
		if err != nil {
			return false, err
		}
		user, err := s.store.GetUser(ctx, userID)
		if err != nil {
			return false, err
		}
		now := s.now().UTC()
		add, err := user.Extension(now, sess, minutes)
		if err != nil {
			return false, err
		}
		period := user.CurrentPeriod(now)
		newExpiration := sess.Expiration.Add(time.Duration(add) * time.Minute)
		err = s.store.ExtendSession(ctx, store.StartParams{
			SessionID: id, UserID: userID, Expiration: newExpiration, Reserve: add,
			MinutesLeft: user.MinutesRemaining(now), IncludedUsedWas: user.IncludedUsedIn(period),
			Period: period, SamePeriod: user.UsagePeriod == period.Key(), PurchasedWas: user.PurchasedRemaining,
		}, sess.Expiration)
		if errors.Is(err, store.ErrSessionChanged) || errors.Is(err, store.ErrAccountLimit) {
			return true, nil // read again: it ended, was extended, or the balance moved
		}
		if err != nil {
			return false, err
		}
		sess.Expiration, sess.ReservedMinutes = newExpiration, sess.ReservedMinutes+add
		out = Extended{Session: sess, MinutesAdded: add}
		return false, nil
	})
	if exhausted {
		return Extended{}, errBusy
	}
	return out, err
}
