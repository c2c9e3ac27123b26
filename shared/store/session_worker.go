// The renderer worker's writes: claim, joining, ws_uri and first-person reports, and
// the heartbeat that extends its lease.

package store

import (
	"context"
	"time"

	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

// ClaimSession is the worker's claim: one conditional write that makes
// workerID the session's renderer until leaseUntil, only while the session
// is still started, its job not past its deadline, and no live worker holds
// it (a lapsed lease may be taken over). It returns the session as claimed,
// with the room token and avatar location the job deliberately omits.
func (s *Store) ClaimSession(ctx context.Context, id, workerID string, now, leaseUntil time.Time) (domain.Session, error) {
	var it sessionItem
	ts := formatTime(now)
	err := s.sessions.Update("session_id", id).
		Set("worker_id", workerID).
		Set("lease_until", formatTime(leaseUntil)).
		Remove("joining_at"). // a take-over starts its launch afresh
		If("$ = ? AND $ > ? AND (attribute_not_exists($) OR $ < ?)",
			"status", string(domain.StatusStarted), "job_deadline", ts, "worker_id", "lease_until", ts).
		Value(ctx, &it)
	if dynamo.IsCondCheckFailed(err) {
		return domain.Session{}, ErrNotClaimable
	}
	if err != nil {
		return domain.Session{}, unavailable(err, "claim session")
	}
	return it.domain(), nil
}

// ReportServing records the renderer's ws_uri once it joined the room; from
// then on the session bills. It holds only while the session is still
// started and claimed by workerID.
func (s *Store) ReportServing(ctx context.Context, id, workerID, wsURI string, at time.Time) error {
	return s.workerUpdate(ctx, s.sessions.Update("session_id", id).
		Set("ws_uri", wsURI).Set("served_at", formatTime(at)), workerID, "report ws_uri")
}

// ReportJoining records that workerID has the session's avatar ready and
// is joining its room (start progress), while the session is still
// started and workerID's.
func (s *Store) ReportJoining(ctx context.Context, id, workerID string, at time.Time) error {
	return s.workerUpdate(ctx, s.sessions.Update("session_id", id).Set("joining_at", formatTime(at)), workerID, "report joining")
}

// ReportPersonJoined records when the renderer first saw a person in a
// room the service made (billing starts then). Only the first report
// counts: a later one answers ErrSessionChanged, as does one for a session
// no longer started or no longer workerID's.
func (s *Store) ReportPersonJoined(ctx context.Context, id, workerID string, at time.Time) error {
	return s.workerUpdate(ctx, s.sessions.Update("session_id", id).
		Set("person_joined_at", formatTime(at)).If("attribute_not_exists($)", "person_joined_at"), workerID, "report first person")
}

// ReportQuality writes what workerID measured over the session, once,
// whether the session is still started (the renderer reports before it
// ends the session) or already ended (by the caller or the reaper).
func (s *Store) ReportQuality(ctx context.Context, id, workerID string, q domain.Quality) error {
	err := s.sessions.Update("session_id", id).Set("quality", q).
		If("$ = ? AND attribute_not_exists($)", "worker_id", workerID, "quality").Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return ErrSessionChanged
	}
	if err != nil {
		return unavailable(err, "report quality")
	}
	return nil
}

// Heartbeat extends workerID's lease on a session. ErrSessionChanged means
// the session is no longer this worker's to run (the caller ended it, or the
// reaper took it): the renderer must stop.
//
// It returns the session's expiration as stored, so a worker learns within a
// heartbeat that the caller extended it.
func (s *Store) Heartbeat(ctx context.Context, id, workerID string, leaseUntil time.Time) (time.Time, error) {
	var it struct {
		Expiration string `dynamo:"expiration"`
	}
	err := s.sessions.Update("session_id", id).Set("lease_until", formatTime(leaseUntil)).
		If("$ = ? AND $ = ?", "status", string(domain.StatusStarted), "worker_id", workerID).
		Value(ctx, &it)
	if dynamo.IsCondCheckFailed(err) {
		return time.Time{}, ErrSessionChanged
	}
	if err != nil {
		return time.Time{}, unavailable(err, "heartbeat")
	}
	return parseTime(it.Expiration), nil
}

func (s *Store) workerUpdate(ctx context.Context, u *dynamo.Update, workerID, what string) error {
	err := u.If("$ = ? AND $ = ?", "status", string(domain.StatusStarted), "worker_id", workerID).Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return ErrSessionChanged
	}
	if err != nil {
		return unavailable(err, what)
	}
	return nil
}
