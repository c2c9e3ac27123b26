package store

import (
	"context"
	"errors"
	"time"

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
		JobDeadline: formatTime(s.JobDeadline), WorkerID: s.WorkerID, LeaseUntil: formatTime(s.LeaseUntil),
		ServedAt: formatTime(s.ServedAt), PersonJoinedAt: formatTime(s.PersonJoinedAt), ReservedMinutes: s.ReservedMinutes,
		EndReason: s.EndReason, Billing: s.Billing,
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
		JobDeadline: parseTime(it.JobDeadline), WorkerID: it.WorkerID, LeaseUntil: parseTime(it.LeaseUntil),
		ServedAt: parseTime(it.ServedAt), PersonJoinedAt: parseTime(it.PersonJoinedAt), ReservedMinutes: it.ReservedMinutes,
		EndReason: it.EndReason, Billing: it.Billing,
		AgentID: it.AgentID, LinkID: it.LinkID, RoomName: it.RoomName, VoiceID: it.VoiceID, Transcription: it.Transcription,
	}
}

// runningIndex is the sparse GSI over sessions.running (template.yaml).
const (
	runningIndex       = "running"
	runningValue       = "started"
	runningByUserIndex = "running-by-user"
)

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
	u := s.users.Update("user_id", p.UserID).Add("active_sessions", 1).Add("reserved_minutes", p.Reserve).
		If("$ < ?", "active_sessions", p.MaxConcurrent).
		If("(attribute_not_exists($) OR $ <= ?)", "reserved_minutes", "reserved_minutes", p.MinutesLeft-p.Reserve).
		If("$ >= ?", "purchased_remaining", p.PurchasedWas)
	if p.SamePeriod {
		return u.If("$ = ? AND $ <= ?", "usage_period", p.Period.Key(), "included_used", p.IncludedUsedWas)
	}
	// The counters belong to an earlier period: this period's included
	// minutes are all left, as long as nothing moved them into it meanwhile.
	return u.If("(attribute_not_exists($) OR $ <> ?)", "usage_period", "usage_period", p.Period.Key())
}

// ErrLinkChanged means the link no longer allowed the start (paused,
// expired or used up meanwhile): re-read it to say why.
var ErrLinkChanged = errors.New("link changed concurrently")

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

// runPair runs a session+account transaction and names the failed condition.
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

// ErrNotClaimable means a claim's condition failed: the session ended, its
// job is past its deadline, or a live worker already holds it.
var ErrNotClaimable = errors.New("session not claimable")

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

// ReportPersonJoined records when the renderer first saw a person in a
// room the service made (billing starts then). Only the first report
// counts: a later one answers ErrSessionChanged, as does one for a session
// no longer started or no longer workerID's.
func (s *Store) ReportPersonJoined(ctx context.Context, id, workerID string, at time.Time) error {
	return s.workerUpdate(ctx, s.sessions.Update("session_id", id).
		Set("person_joined_at", formatTime(at)).If("attribute_not_exists($)", "person_joined_at"), workerID, "report first person")
}

// Heartbeat extends workerID's lease on a session. ErrSessionChanged means
// the session is no longer this worker's to run (the caller ended it, or the
// reaper took it): the renderer must stop.
func (s *Store) Heartbeat(ctx context.Context, id, workerID string, leaseUntil time.Time) error {
	return s.workerUpdate(ctx, s.sessions.Update("session_id", id).
		Set("lease_until", formatTime(leaseUntil)), workerID, "heartbeat")
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
