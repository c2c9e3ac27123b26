// The sessions table: the item, its conversions, the reads and lists, and
// the create and delete of a session that never started. The life cycle's
// writes are beside it: session_start.go, session_end.go, session_worker.go.

package store

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

type sessionItem struct {
	SessionID     string         `dynamo:"session_id,hash"`
	UserID        string         `dynamo:"user_id"`
	KeyMode       string         `dynamo:"key_mode"`
	Status        string         `dynamo:"status"`
	TokenHash     string         `dynamo:"token_hash"`
	AspectRatio   string         `dynamo:"aspect_ratio"`
	Metadata      map[string]any `dynamo:"metadata,omitempty"`
	RoomPlatform  string         `dynamo:"room_platform,omitempty"`
	RoomURL       string         `dynamo:"room_url,omitempty"`
	RoomToken     string         `dynamo:"room_token,omitempty"`
	AvatarURL     string         `dynamo:"avatar_url,omitempty"`
	AvatarBucket  string         `dynamo:"avatar_bucket,omitempty"`
	AvatarKey     string         `dynamo:"avatar_key,omitempty"`
	AvatarType    string         `dynamo:"avatar_type,omitempty"`
	CreatedAt     string         `dynamo:"created_at"`
	StartedAt     string         `dynamo:"started_at,omitempty"`
	EndedAt       string         `dynamo:"ended_at,omitempty"`
	Expiration    string         `dynamo:"expiration,omitempty"`
	WSURI         string         `dynamo:"ws_uri,omitempty"`
	JobEnqueuedAt string         `dynamo:"job_enqueued_at,omitempty"`
	JobDeadline   string         `dynamo:"job_deadline,omitempty"`
	WorkerID      string         `dynamo:"worker_id,omitempty"`
	LeaseUntil    string         `dynamo:"lease_until,omitempty"`
	JoiningAt     string         `dynamo:"joining_at,omitempty"`
	ServedAt      string         `dynamo:"served_at,omitempty"`
	// PersonJoinedAt: the first person seen in a hosted room (billing starts).
	PersonJoinedAt string `dynamo:"person_joined_at,omitempty"`
	// ReservedMinutes: what the start set aside on the account; the end
	// gives back exactly this.
	ReservedMinutes int `dynamo:"reserved_minutes,omitempty"`
	// Running is set only while the session is started: the sparse index
	// runningIndex then holds exactly the started sessions, which the
	// reaper reads without scanning the table.
	Running string `dynamo:"running,omitempty"`
	// RunningUser is the owner, also only while started: the sparse index
	// runningByUserIndex holds one user's running sessions, which the usage
	// summary reads without touching their history.
	RunningUser string          `dynamo:"running_user,omitempty"`
	EndReason   string          `dynamo:"end_reason,omitempty"`
	Billing     *domain.Billing `dynamo:"billing,omitempty"`
	Quality     *domain.Quality `dynamo:"quality,omitempty"`
	AgentID     string          `dynamo:"agent_id,omitempty"`
	LinkID      string          `dynamo:"link_id,omitempty"`
	RoomName    string          `dynamo:"room_name,omitempty"`
	VoiceID     string          `dynamo:"voice_id,omitempty"`
	// Transcription is stored for every session (absent reads as false).
	Transcription bool `dynamo:"transcription,omitempty"`
}

func toSessionItem(s domain.Session) sessionItem {
	return sessionItem{
		SessionID: s.ID, UserID: s.UserID, KeyMode: s.KeyMode, Status: string(s.Status), TokenHash: s.TokenHash,
		AspectRatio: s.AspectRatio, Metadata: s.Metadata,
		RoomPlatform: s.Room.Platform, RoomURL: s.Room.URL, RoomToken: s.Room.Token,
		AvatarURL: s.Avatar.URL, AvatarBucket: s.Avatar.Bucket, AvatarKey: s.Avatar.Key, AvatarType: s.Avatar.MediaType,
		CreatedAt: formatTime(s.CreatedAt), StartedAt: formatTime(s.StartedAt), EndedAt: formatTime(s.EndedAt),
		Expiration: formatTime(s.Expiration), WSURI: s.WSURI, JobEnqueuedAt: formatTime(s.JobEnqueuedAt),
		JobDeadline: formatTime(s.JobDeadline), WorkerID: s.WorkerID, LeaseUntil: formatTime(s.LeaseUntil), JoiningAt: formatTime(s.JoiningAt),
		ServedAt: formatTime(s.ServedAt), PersonJoinedAt: formatTime(s.PersonJoinedAt), ReservedMinutes: s.ReservedMinutes,
		EndReason: s.EndReason, Billing: s.Billing, Quality: s.Quality,
		AgentID: s.AgentID, LinkID: s.LinkID, RoomName: s.RoomName, VoiceID: s.VoiceID, Transcription: s.Transcription,
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
		JobDeadline: parseTime(it.JobDeadline), WorkerID: it.WorkerID, LeaseUntil: parseTime(it.LeaseUntil), JoiningAt: parseTime(it.JoiningAt),
		ServedAt: parseTime(it.ServedAt), PersonJoinedAt: parseTime(it.PersonJoinedAt), ReservedMinutes: it.ReservedMinutes,
		EndReason: it.EndReason, Billing: it.Billing, Quality: it.Quality,
		AgentID: it.AgentID, LinkID: it.LinkID, RoomName: it.RoomName, VoiceID: it.VoiceID, Transcription: it.Transcription,
	}
}

// runningIndex is the sparse GSI over sessions.running (template.yaml).
const (
	runningIndex       = "running"
	runningValue       = "started"
	runningByUserIndex = "running-by-user"
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
	if !domain.PlausibleID(id) {
		return domain.Session{}, domain.ErrSessionNotFound
	}
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

// GetSessionByID reads a session whoever owns it (trusted callers only).
func (s *Store) GetSessionByID(ctx context.Context, id string) (domain.Session, error) {
	if !domain.PlausibleID(id) {
		return domain.Session{}, domain.ErrSessionNotFound
	}
	var it sessionItem
	err := s.sessions.Get("session_id", id).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) {
		return domain.Session{}, domain.ErrSessionNotFound
	}
	if err != nil {
		return domain.Session{}, unavailable(err, "get session")
	}
	return it.domain(), nil
}

// ListSessions returns a page of a user's sessions, newest first,
// optionally only those in one status. Started sessions are read from the
// sparse running-by-user index; the others from the user's history, with
// the status as a filter (so such a page may hold fewer than page.Limit).
func (s *Store) ListSessions(ctx context.Context, userID string, status domain.SessionStatus, page domain.Page) ([]domain.Session, string, error) {
	var q *dynamo.Query
	var start dynamo.PagingKey
	var err error
	if status == domain.StatusStarted {
		start, err = decodeRunningCursor(page.Cursor, userID)
		q = s.sessions.Get("running_user", userID).Index(runningByUserIndex)
	} else {
		start, err = decodeCursor(page.Cursor, userID, "user_id", "created_at", "session_id")
		q = s.sessions.Get("user_id", userID).Index(byUserIndex)
		if status != "" {
			q = q.Filter("$ = ?", "status", string(status))
		}
	}
	if err != nil {
		return nil, "", err
	}
	if page.Limit > 0 {
		q = q.Limit(page.Limit)
	}
	var items []sessionItem
	next, err := q.Order(dynamo.Descending).StartFrom(start).AllWithLastEvaluatedKey(ctx, &items)
	if err != nil {
		return nil, "", unavailable(err, "list sessions")
	}
	out := make([]domain.Session, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	return out, encodeCursor(next), nil
}

// decodeRunningCursor reads a cursor of the running-by-user index, whose
// keys are running_user, started_at and session_id.
func decodeRunningCursor(c, userID string) (dynamo.PagingKey, error) {
	k, err := decodeCursor(c, "", "running_user", "started_at", "session_id")
	if err != nil || k == nil {
		return k, err
	}
	if v, _ := k["running_user"].(*types.AttributeValueMemberS); v == nil || v.Value != userID {
		return nil, errBadCursor
	}
	return k, nil
}

// RunningSessionsOf returns the user's started sessions (for the usage
// summary), from the sparse index: never their whole history.
func (s *Store) RunningSessionsOf(ctx context.Context, userID string) ([]domain.Session, error) {
	list, _, err := s.ListSessions(ctx, userID, domain.StatusStarted, domain.Page{})
	return list, err
}

// RunningSessions returns every started session, from the sparse index of
// started sessions (never a table scan). The reaper reads it each sweep.
func (s *Store) RunningSessions(ctx context.Context) ([]domain.Session, error) {
	var items []sessionItem
	if err := s.sessions.Get("running", runningValue).Index(runningIndex).All(ctx, &items); err != nil {
		return nil, unavailable(err, "list running sessions")
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

// runPair runs a session+account transaction (a start's or an end's) and
// names the failed condition.
func (s *Store) runPair(ctx context.Context, tx *dynamo.WriteTx, what string) error {
	err := s.runTx(ctx, tx)
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
