// Package reaper ends the sessions nobody else will end: those whose
// renderer stopped heartbeating (the worker died), whose expiration passed,
// or whose job no renderer claimed before its deadline; and it re-sends jobs
// whose enqueue failed. It runs every minute as a scheduled Lambda
// (functions/reaper) and as a loop in `make run`, reads the running sessions
// from the sparse index of started sessions (never a table scan), and ends
// them through the same service method as the API and the workers
// (sessions.Service.Finish), so each is billed exactly once. It never relies
// on DynamoDB TTL, which can lag by days.
package reaper

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/emf"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/sessions"
)

// Store lists the started sessions.
type Store interface {
	RunningSessions(ctx context.Context) ([]domain.Session, error)
}

// Sessions is the session service's end path and job re-send.
type Sessions interface {
	FinishIf(ctx context.Context, userID, id string, ev domain.Event, reason string, guard domain.EndGuard) (domain.Session, error)
	Resend(ctx context.Context, sess domain.Session)
}

// Action is what a sweep does with one session.
type Action int

const (
	Leave  Action = iota // running normally, or not yet due
	End                  // end it with the decided reason
	Resend               // its job was never sent: send it again
)

// Policy holds the reaper's timing rules.
type Policy struct {
	// ResendAfter: a started session whose job is still not marked sent
	// this long after start had its send fail (PUT start marks it within
	// milliseconds); re-send it.
	ResendAfter time.Duration
	// GiveUpAfter: a session nobody claimed this long after start is ended
	// with no_capacity even if its sends kept failing.
	GiveUpAfter time.Duration
}

// DefaultPolicy fits the one-minute schedule.
var DefaultPolicy = Policy{ResendAfter: 10 * time.Second, GiveUpAfter: 3 * jobs.ClaimWindow}

// Guard is what must still hold when the reaper ends s for reason, decided
// from a list read at listedAt: the worker it found lost must still hold the
// session with its lease still lapsed, and a session it found unclaimed must
// still be unclaimed. An expired session ends whoever holds it.
func Guard(s domain.Session, reason string, listedAt time.Time) domain.EndGuard {
	switch reason {
	case domain.ReasonWorkerLost:
		return domain.EndGuard{WorkerID: s.WorkerID, LeaseLapsedBy: listedAt}
	case domain.ReasonNoCapacity:
		return domain.EndGuard{Unclaimed: true}
	}
	return domain.EndGuard{}
}

// Decide is the reaper's rule for one started session at now.
func (p Policy) Decide(s domain.Session, now time.Time) (Action, string) {
	switch {
	case s.Status != domain.StatusStarted:
		return Leave, ""
	case !s.Expiration.IsZero() && now.After(s.Expiration):
		return End, domain.ReasonExpired
	case s.WorkerID != "" && now.After(s.LeaseUntil):
		return End, domain.ReasonWorkerLost
	case s.WorkerID != "":
		return Leave, ""
	case !s.JobDeadline.IsZero() && now.After(s.JobDeadline) && !s.JobEnqueuedAt.IsZero():
		return End, domain.ReasonNoCapacity
	case now.Sub(s.StartedAt) > p.GiveUpAfter:
		return End, domain.ReasonNoCapacity
	case s.JobEnqueuedAt.IsZero() && now.Sub(s.StartedAt) > p.ResendAfter:
		return Resend, ""
	}
	return Leave, ""
}

// Reaper sweeps the running sessions.
type Reaper struct {
	store    Store
	sessions Sessions
	policy   Policy
	now      func() time.Time
	log      *slog.Logger
}

// New returns a Reaper; now is the clock.
func New(st Store, svc Sessions, p Policy, now func() time.Time, log *slog.Logger) *Reaper {
	return &Reaper{store: st, sessions: svc, policy: p, now: now, log: log}
}

// Result counts what one sweep did.
type Result struct {
	Running int            `json:"running"`
	Ended   map[string]int `json:"ended"` // by reason
	Resent  int            `json:"resent"`
	// Recovered counts sessions found due that had moved on by the time
	// the sweep reached them (their worker heartbeated, or one claimed it).
	Recovered int `json:"recovered"`
	Failed    int `json:"failed"`
}

// Sweep looks at every running session once. Each is decided against the
// time the list was read, not a clock that moves on while a long sweep
// works (a sweep slowed by throttling would otherwise see leases lapse that
// their workers renewed since the read), and ended only while what it was
// decided on still holds. A failure on one session is logged and counted;
// the next sweep tries again.
func (r *Reaper) Sweep(ctx context.Context) (Result, error) {
	res := Result{Ended: map[string]int{}}
	listedAt := r.now()
	running, err := r.store.RunningSessions(ctx)
	if err != nil {
		return res, err
	}
	res.Running = len(running)
	for _, s := range running {
		action, reason := r.policy.Decide(s, listedAt)
		switch action {
		case End:
			_, err := r.sessions.FinishIf(ctx, s.UserID, s.ID, domain.EventAutoEnd, reason, Guard(s, reason, listedAt))
			if errors.Is(err, sessions.ErrNoLongerDue) {
				res.Recovered++
				r.log.InfoContext(ctx, "reaper left a session that recovered", "session_id", s.ID, "end_reason", reason)
				continue
			}
			if err != nil {
				res.Failed++
				r.log.ErrorContext(ctx, "reaper could not end session", "session_id", s.ID, "end_reason", reason, "err", err)
				continue
			}
			res.Ended[reason]++
			r.log.InfoContext(ctx, "reaper ended session", "session_id", s.ID, "end_reason", reason, "worker_id", s.WorkerID)
		case Resend:
			r.sessions.Resend(ctx, s)
			res.Resent++
			r.log.InfoContext(ctx, "reaper re-sent renderer job", "session_id", s.ID)
		}
	}
	return res, nil
}

// Loop sweeps every interval until ctx is done (the local stack's stand-in
// for the EventBridge schedule).
func (r *Reaper) Loop(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := r.Sweep(ctx); err != nil && ctx.Err() == nil {
			r.log.ErrorContext(ctx, "reaper sweep failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// WriteMetrics writes a sweep's result as EMF lines (shared/emf): one
// SessionsEnded line per end reason (dimension EndReason; the alarm on
// worker_lost watches renderer hosts dying), and the sweep's failures.
func WriteMetrics(w *emf.Writer, at time.Time, r Result) error {
	var errs []error
	for reason, n := range r.Ended {
		errs = append(errs, w.Write(at, map[string]string{"EndReason": reason},
			emf.Metric{Name: "SessionsEnded", Unit: "Count", Value: n}))
	}
	errs = append(errs, w.Write(at, nil,
		emf.Metric{Name: "ReaperFailures", Unit: "Count", Value: r.Failed},
		emf.Metric{Name: "ReaperRecovered", Unit: "Count", Value: r.Recovered}))
	return errors.Join(errs...)
}
