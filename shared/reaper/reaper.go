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
	"log/slog"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
)

// Store lists the started sessions.
type Store interface {
	RunningSessions(ctx context.Context) ([]domain.Session, error)
}

// Sessions is the session service's end path and job re-send.
type Sessions interface {
	Finish(ctx context.Context, userID, id string, ev domain.Event, reason string) (domain.Session, error)
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
	Failed  int            `json:"failed"`
}

// Sweep looks at every running session once. A failure on one session is
// logged and counted; the next sweep tries again.
func (r *Reaper) Sweep(ctx context.Context) (Result, error) {
	res := Result{Ended: map[string]int{}}
	running, err := r.store.RunningSessions(ctx)
	if err != nil {
		return res, err
	}
	res.Running = len(running)
	for _, s := range running {
		action, reason := r.policy.Decide(s, r.now())
		switch action {
		case End:
			if _, err := r.sessions.Finish(ctx, s.UserID, s.ID, domain.EventAutoEnd, reason); err != nil {
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
