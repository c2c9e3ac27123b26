package store

import (
	"context"
	"errors"
	"time"

	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

type sessionItem struct {
	SessionID     string          `dynamo:"session_id,hash"`
	UserID        string          `dynamo:"user_id"`
	KeyMode       string          `dynamo:"key_mode"`
	Status        string          `dynamo:"status"`
	TokenHash     string          `dynamo:"token_hash"`
	AspectRatio   string          `dynamo:"aspect_ratio"`
	Metadata      map[string]any  `dynamo:"metadata,omitempty"`
	RoomPlatform  string          `dynamo:"room_platform,omitempty"`
	RoomURL       string          `dynamo:"room_url,omitempty"`
	RoomToken     string          `dynamo:"room_token,omitempty"`
	AvatarURL     string          `dynamo:"avatar_url,omitempty"`
	AvatarBucket  string          `dynamo:"avatar_bucket,omitempty"`
	AvatarKey     string          `dynamo:"avatar_key,omitempty"`
	AvatarType    string          `dynamo:"avatar_type,omitempty"`
	CreatedAt     string          `dynamo:"created_at"`
	StartedAt     string          `dynamo:"started_at,omitempty"`
	EndedAt       string          `dynamo:"ended_at,omitempty"`
	Expiration    string          `dynamo:"expiration,omitempty"`
	WSURI         string          `dynamo:"ws_uri,omitempty"`
	JobEnqueuedAt string          `dynamo:"job_enqueued_at,omitempty"`
	EndReason     string          `dynamo:"end_reason,omitempty"`
	Billing       *domain.Billing `dynamo:"billing,omitempty"`
}

func toSessionItem(s domain.Session) sessionItem {
	return sessionItem{
		SessionID: s.ID, UserID: s.UserID, KeyMode: s.KeyMode, Status: string(s.Status), TokenHash: s.TokenHash,
		AspectRatio: s.AspectRatio, Metadata: s.Metadata,
		RoomPlatform: s.Room.Platform, RoomURL: s.Room.URL, RoomToken: s.Room.Token,
		AvatarURL: s.Avatar.URL, AvatarBucket: s.Avatar.Bucket, AvatarKey: s.Avatar.Key, AvatarType: s.Avatar.MediaType,
		CreatedAt: formatTime(s.CreatedAt), StartedAt: formatTime(s.StartedAt), EndedAt: formatTime(s.EndedAt),
		Expiration: formatTime(s.Expiration), WSURI: s.WSURI, JobEnqueuedAt: formatTime(s.JobEnqueuedAt),
		EndReason: s.EndReason, Billing: s.Billing,
	}
}

func (it sessionItem) domain() domain.Session {
	return domain.Session{
		ID: it.SessionID, UserID: it.UserID, KeyMode: it.KeyMode, Status: domain.SessionStatus(it.Status),
		TokenHash: it.TokenHash, AspectRatio: it.AspectRatio, Metadata: it.Metadata,
		Room:      domain.Room{Platform: it.RoomPlatform, URL: it.RoomURL, Token: it.RoomToken},
		Avatar:    domain.AvatarSource{URL: it.AvatarURL, Bucket: it.AvatarBucket, Key: it.AvatarKey, MediaType: it.AvatarType},
		CreatedAt: parseTime(it.CreatedAt), StartedAt: parseTime(it.StartedAt), EndedAt: parseTime(it.EndedAt),
		Expiration: parseTime(it.Expiration), WSURI: it.WSURI, JobEnqueuedAt: parseTime(it.JobEnqueuedAt),
		EndReason: it.EndReason, Billing: it.Billing,
	}
}

// Errors a transaction reports when a condition it relied on no longer holds;
// the caller re-reads and decides again.
var (
	ErrSessionChanged = errors.New("session changed concurrently")
	ErrAccountLimit   = errors.New("account condition failed")
)

// CreateSession stores a new session.
func (s *Store) CreateSession(ctx context.Context, sess domain.Session) error {
	if err := s.sessions.Put(toSessionItem(sess)).If("attribute_not_exists($)", "session_id").Run(ctx); err != nil {
		return unavailable(err, "create session")
	}
	return nil
}

// GetSession reads a session owned by userID. Another tenant's session is
// reported exactly like a missing one.
func (s *Store) GetSession(ctx context.Context, userID, id string) (domain.Session, error) {
	var it sessionItem
	err := s.sessions.Get("session_id", id).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) || (err == nil && it.UserID != userID) {
		return domain.Session{}, domain.ErrSessionNotFound
	}
	if err != nil {
		return domain.Session{}, unavailable(err, "get session")
	}
	return it.domain(), nil
}

// ListSessions returns a user's sessions, newest first, optionally only those
// in one status.
func (s *Store) ListSessions(ctx context.Context, userID string, status domain.SessionStatus) ([]domain.Session, error) {
	q := s.sessions.Get("user_id", userID).Index("by-user").Order(dynamo.Descending)
	if status != "" {
		q = q.Filter("$ = ?", "status", string(status))
	}
	var items []sessionItem
	if err := q.All(ctx, &items); err != nil {
		return nil, unavailable(err, "list sessions")
	}
	out := make([]domain.Session, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	return out, nil
}

// DeleteCreatedSession removes a session that was never started.
func (s *Store) DeleteCreatedSession(ctx context.Context, userID, id string) error {
	err := s.sessions.Delete("session_id", id).
		If("$ = ? AND $ = ?", "user_id", userID, "status", string(domain.StatusCreated)).Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return ErrSessionChanged
	}
	if err != nil {
		return unavailable(err, "delete session")
	}
	return nil
}

// StartParams is what a start writes, decided by the caller from fresh reads.
type StartParams struct {
	SessionID, UserID string
	StartedAt         time.Time
	Expiration        time.Time
	MaxConcurrent     int
	Period            domain.Period
	IncludedMinutes   int
}

// StartSession moves a created session to started and takes a concurrency
// slot in one transaction. The account condition holds only while a slot is
// free and some minutes remain; ErrAccountLimit means it did not.
func (s *Store) StartSession(ctx context.Context, p StartParams) error {
	sess := s.sessions.Update("session_id", p.SessionID).
		Set("status", string(domain.StatusStarted)).
		Set("started_at", formatTime(p.StartedAt)).
		Set("ws_uri", domain.TryAgain).
		If("$ = ? AND $ = ?", "status", string(domain.StatusCreated), "user_id", p.UserID)
	if !p.Expiration.IsZero() {
		sess = sess.Set("expiration", formatTime(p.Expiration))
	}
	minutesLeft := "$ > ?"
	args := []any{"active_sessions", p.MaxConcurrent, "purchased_remaining", 0}
	if p.IncludedMinutes > 0 {
		minutesLeft = "(attribute_not_exists($) OR $ <> ? OR $ < ? OR $ > ?)"
		args = []any{"active_sessions", p.MaxConcurrent,
			"usage_period", "usage_period", p.Period.Key(), "included_used", p.IncludedMinutes, "purchased_remaining", 0}
	}
	acct := s.users.Update("user_id", p.UserID).Add("active_sessions", 1).
		If("$ < ? AND "+minutesLeft, args...)
	return s.runPair(ctx, s.db.WriteTx().Update(sess).Update(acct), "start session")
}

// EndParams is what an end writes, decided by the caller from fresh reads.
type EndParams struct {
	SessionID     string
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
}

// EndSession moves a started session to ended, records its billing, charges
// the account and frees the concurrency slot, all in one transaction, so a
// session is billed exactly once.
func (s *Store) EndSession(ctx context.Context, p EndParams) error {
	b := p.Billing
	sess := s.sessions.Update("session_id", p.SessionID).
		Set("status", string(domain.StatusEnded)).
		Set("ended_at", formatTime(p.EndedAt)).
		Set("end_reason", p.Reason).
		Set("billing", &b).
		If("$ = ? AND $ = ?", "status", string(domain.StatusStarted), "user_id", p.UserID)
	acct := s.users.Update("user_id", p.UserID).
		Add("active_sessions", -1).
		Add("purchased_remaining", -p.FromPurchased)
	if p.SamePeriod {
		acct = acct.Add("included_used", p.FromIncluded).
			If("$ = ? AND $ >= ?", "usage_period", p.Period.Key(), "purchased_remaining", p.FromPurchased)
	} else {
		acct = acct.Set("usage_period", p.Period.Key()).Set("included_used", p.FromIncluded).Set("avatars_used", 0).
			If("(attribute_not_exists($) OR $ <> ?) AND $ >= ?", "usage_period", "usage_period", p.Period.Key(),
				"purchased_remaining", p.FromPurchased)
	}
	return s.runPair(ctx, s.db.WriteTx().Update(sess).Update(acct), "end session")
}

// runPair runs a session+account transaction and names the failed condition.
func (s *Store) runPair(ctx context.Context, tx *dynamo.WriteTx, what string) error {
	err := tx.Run(ctx)
	if err == nil {
		return nil
	}
	if failed, ok := cancelReasons(err); ok {
		if failed[0] {
			return ErrSessionChanged
		}
		return ErrAccountLimit
	}
	return unavailable(err, what)
}

// MarkJobEnqueued records that the renderer job for a started session is on
// the queue.
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
