// Package sessions is the session service: create, start, end, delete, list
// and the usage summary. It applies domain.Next, the state machine, and
// leaves atomicity to the store's conditional writes and transactions.
package sessions

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/retry"
	"avatarsvc/shared/store"
	"avatarsvc/shared/webhooks"
)

// Store is the persistence the service needs.
type Store interface {
	GetUser(ctx context.Context, id string) (domain.User, error)
	CreateSession(ctx context.Context, s domain.Session) error
	GetSession(ctx context.Context, userID, id string) (domain.Session, error)
	GetSessionByID(ctx context.Context, id string) (domain.Session, error)
	ListSessions(ctx context.Context, userID string, status domain.SessionStatus, page domain.Page) ([]domain.Session, string, error)
	RunningSessionsOf(ctx context.Context, userID string) ([]domain.Session, error)
	DeleteCreatedSession(ctx context.Context, userID, id string) error
	StartSession(ctx context.Context, p store.StartParams) error
	StartNewSession(ctx context.Context, p store.StartParams, sess domain.Session, linkID string, now time.Time) error
	EndSession(ctx context.Context, p store.EndParams) error
	ExtendSession(ctx context.Context, p store.StartParams, was time.Time) error
	MarkJobEnqueued(ctx context.Context, id string, at time.Time) error
	RenewJobDeadline(ctx context.Context, id string, deadline time.Time) error
}

// JobQueue takes renderer jobs.
type JobQueue interface {
	Enqueue(ctx context.Context, j jobs.StartJob) error
}

// Avatars resolves stored avatar ids (shared/avatars).
type Avatars interface {
	Get(ctx context.Context, userID, ref string) (domain.Avatar, error)
	Source(a domain.Avatar) domain.AvatarSource
}

// MediaStore keeps avatar images given inline.
type MediaStore interface {
	Name() string
	Put(ctx context.Context, key string, data []byte, contentType string) error
	Delete(ctx context.Context, key string) error
}

// Service runs the session lifecycle.
type Service struct {
	store     Store
	queue     JobQueue
	media     MediaStore
	now       func() time.Time
	log       *slog.Logger
	platforms map[string]bool
	avatars   Avatars
	rooms     RoomMarker
	events    EventPublisher
}

// EventPublisher queues lifecycle webhook events (*webhooks.Publisher).
type EventPublisher interface {
	Publish(ctx context.Context, userID string, ev webhooks.Event) error
}

// UseEvents publishes session.ended and session.failed from the end path
// (see Finish).
func (s *Service) UseEvents(p EventPublisher) { s.events = p }

// RoomMarker tells the people in a room the service made that its session
// ended (*livekit.Client): a visitor waiting for an avatar that will not come
// learns why at once.
type RoomMarker interface {
	MarkEnded(ctx context.Context, room, reason string) error
}

// UseRooms marks the rooms of hosted sessions that end before the avatar
// served them (see Finish).
func (s *Service) UseRooms(r RoomMarker) { s.rooms = r }

// UseAvatars lets Create Session take stored avatar ids (avat_... and
// catalog ids) besides images.
func (s *Service) UseAvatars(a Avatars) { s.avatars = a }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// New returns a Service. now is the clock (time.Now in production).
// platforms are the room platforms this deployment's renderers can join
// (DefaultPlatforms when empty).
func New(st Store, q JobQueue, m MediaStore, now func() time.Time, log *slog.Logger, platforms ...string) *Service {
	if len(platforms) == 0 {
		platforms = DefaultPlatforms
	}
	enabled := map[string]bool{}
	for _, p := range platforms {
		enabled[strings.ToLower(strings.TrimSpace(p))] = true
	}
	return &Service{store: st, queue: q, media: m, now: now, log: log, platforms: enabled}
}

// DefaultPlatforms: the renderer joins LiveKit rooms. Daily's SDK is not
// available to it, so a daily session could never be served.
var DefaultPlatforms = []string{domain.PlatformLiveKit}

// errBusy answers a loop that kept losing to concurrent writers.
var errBusy = domain.Errorf(domain.Unavailable, "The session is changing concurrently, please retry")

// transition is the opening that Start, Finish and Delete share: within
// retry.Service's loop, read the session fresh and ask domain.Next whether
// ev applies to it; a refused event ends the loop with Next's error.
// Otherwise step acts on the session and Next's outcome, and asks to go
// again (true) when its write lost to a concurrent one, so the next round
// decides from fresh reads. A loop that keeps losing answers errBusy.
func (s *Service) transition(ctx context.Context, userID, id string, ev domain.Event,
	step func(ctx context.Context, sess domain.Session, outcome domain.Outcome) (again bool, err error)) error {
	exhausted, err := retry.Service.Do(ctx, func(ctx context.Context) (bool, error) {
		sess, err := s.store.GetSession(ctx, userID, id)
		if err != nil {
			return false, err
		}
		_, outcome, err := domain.Next(sess.Status, ev)
		if err != nil {
			return false, err
		}
		return step(ctx, sess, outcome)
	})
	if exhausted {
		return errBusy
	}
	return err
}

// CreateInput is a Create Session request.
type CreateInput struct {
	Avatar      string
	AspectRatio string
	Room        *domain.Room
	Metadata    map[string]any
}

// Created is a new session with its token, shown only this once.
type Created struct {
	Session domain.Session
	Token   string
}

// Defaults and bounds for Create.
const (
	DefaultAspectRatio = "1:1"
	maxRoomURLLength   = 2048
	maxRoomTokenLength = 8192
)

// Create validates and stores a new session in the created state.
func (s *Service) Create(ctx context.Context, userID, keyMode string, in CreateInput) (Created, error) {
	if in.Avatar == "" {
		return Created{}, invalidAvatar("avatar is required. ")
	}
	var stored *domain.Avatar
	var av Avatar
	if domain.IsAvatarRef(in.Avatar) && s.avatars != nil {
		a, err := s.avatars.Get(ctx, userID, in.Avatar)
		if errors.Is(err, domain.ErrAvatarNotFound) {
			return Created{}, invalidAvatar("No avatar " + truncate(in.Avatar, 64) + " exists in your account or the catalog. ")
		}
		if err != nil {
			return Created{}, err
		}
		stored = &a
	} else {
		var err error
		if av, err = ParseAvatar(in.Avatar); err != nil {
			return Created{}, err
		}
	}
	ar := in.AspectRatio
	if ar == "" {
		ar = DefaultAspectRatio
	}
	if !domain.ValidAspectRatio(ar) {
		return Created{}, domain.Errorf(domain.Invalid, "Invalid aspect_ratio %q", in.AspectRatio).
			WithSuggestion("Use one of 4:3, 3:4 or 1:1")
	}
	room, err := s.validateRoom(in.Room)
	if err != nil {
		return Created{}, err
	}
	if in.Metadata == nil {
		in.Metadata = map[string]any{}
	}

	now := s.now().UTC()
	token, hash := domain.NewSessionToken()
	sess := domain.Session{
		ID: domain.NewSessionID(), UserID: userID, KeyMode: keyMode, Status: domain.StatusCreated,
		TokenHash: hash, AspectRatio: ar, Metadata: in.Metadata, Room: room, CreatedAt: now,
	}
	switch {
	case stored != nil:
		sess.Avatar = s.avatars.Source(*stored)
	case av.URL != "":
		sess.Avatar = domain.AvatarSource{URL: av.URL}
	default:
		key := "sessions/" + sess.ID + "/avatar"
		if err := s.media.Put(ctx, key, av.Data, av.MediaType); err != nil {
			return Created{}, &domain.Error{Code: domain.Unavailable, Message: "Could not store the avatar image, please retry", Err: err}
		}
		sess.Avatar = domain.AvatarSource{Bucket: s.media.Name(), Key: key, MediaType: av.MediaType}
	}
	if err := s.store.CreateSession(ctx, sess); err != nil {
		return Created{}, err
	}
	return Created{Session: sess, Token: token}, nil
}

func (s *Service) validateRoom(r *domain.Room) (domain.Room, error) {
	hint := "Pass room {platform: livekit|daily, url, token}, or call POST /v1/rooms/initiate to have the service create a room"
	if r == nil {
		return domain.Room{}, domain.Errorf(domain.Invalid, "room is required").WithSuggestion(hint)
	}
	room := *r
	room.Platform = strings.ToLower(room.Platform)
	if room.Platform != domain.PlatformLiveKit && room.Platform != domain.PlatformDaily {
		return domain.Room{}, domain.Errorf(domain.Invalid, "Invalid room platform %q", r.Platform).WithSuggestion(hint)
	}
	if !s.platforms[room.Platform] {
		return domain.Room{}, domain.Errorf(domain.Invalid, "Room platform %q is not enabled on this deployment", room.Platform).
			WithSuggestion("Use a livekit room, or call POST /v1/rooms/initiate to have the service create one")
	}
	u, err := url.Parse(room.URL)
	if room.URL == "" || err != nil || u.Host == "" || len(room.URL) > maxRoomURLLength ||
		(u.Scheme != "wss" && u.Scheme != "https" && u.Scheme != "ws" && u.Scheme != "http") {
		return domain.Room{}, domain.Errorf(domain.Invalid, "Invalid room url").
			WithSuggestion("Pass the room's wss:// or https:// address")
	}
	if len(room.Token) > maxRoomTokenLength || (room.Platform == domain.PlatformLiveKit && room.Token == "") {
		return domain.Room{}, domain.Errorf(domain.Invalid, "Invalid room token").
			WithSuggestion("Pass a join token for the room (LiveKit rooms need one)")
	}
	return room, nil
}

// GetByID reads a session whoever owns it, for trusted callers only
// (verified LiveKit webhooks).
func (s *Service) GetByID(ctx context.Context, id string) (domain.Session, error) {
	return s.store.GetSessionByID(ctx, id)
}

// Get returns one of the caller's sessions.
func (s *Service) Get(ctx context.Context, userID, id string) (domain.Session, error) {
	return s.store.GetSession(ctx, userID, id)
}

// List returns a page of the caller's sessions, newest first. filter is
// "started", "ended" or anything else for all.
func (s *Service) List(ctx context.Context, userID, filter string, page domain.Page) ([]domain.Session, string, error) {
	var status domain.SessionStatus
	switch filter {
	case string(domain.StatusStarted), string(domain.StatusEnded):
		status = domain.SessionStatus(filter)
	}
	return s.store.ListSessions(ctx, userID, status, page)
}

// Started is the answer to a start.
type Started struct {
	Session domain.Session
	WSURI   string
}

// Start starts a created session: ev is EventStart (PUT: repeats answer the
// stored ws_uri) or EventStartOnce (POST: a repeat is an error).
func (s *Service) Start(ctx context.Context, userID, id string, ev domain.Event) (Started, error) {
	var out Started
	err := s.transition(ctx, userID, id, ev, func(ctx context.Context, sess domain.Session, outcome domain.Outcome) (bool, error) {
		if outcome == domain.Repeat {
			if sess.WSURI == domain.TryAgain && sess.JobEnqueuedAt.IsZero() && sess.WorkerID == "" {
				s.Resend(ctx, sess) // an earlier send failed: nothing is lost, it is sent again
			}
			out = Started{Session: sess, WSURI: sess.WSURI}
			return false, nil
		}

		now := s.now().UTC()
		params, err := s.startParams(ctx, userID, id, now, 0)
		if err != nil {
			return false, err
		}
		exp, deadline := params.Expiration, params.JobDeadline
		err = s.store.StartSession(ctx, params)
		if errors.Is(err, store.ErrSessionChanged) || errors.Is(err, store.ErrAccountLimit) {
			return true, nil // decide again from fresh reads: the limit checks above then name the reason
		}
		if err != nil {
			return false, err
		}
		sess.Status, sess.StartedAt, sess.Expiration, sess.WSURI = domain.StatusStarted, now, exp, domain.TryAgain
		sess.JobDeadline, sess.ReservedMinutes = deadline, params.Reserve
		s.send(ctx, sess)
		out = Started{Session: sess, WSURI: sess.WSURI}
		return false, nil
	})
	return out, err
}

// awaitPoll is how often AwaitRenderer reads the session: it adds at most
// this to the moment ws_uri is known (a 20 s wait reads at most 400 times;
// a typical start, about 7).
const awaitPoll = 50 * time.Millisecond

// AwaitRenderer returns once the session started by userID has its ws_uri,
// is no longer started, until passes or ctx ends: PUT start's ?wait=.
func (s *Service) AwaitRenderer(ctx context.Context, userID, id string, until time.Time) {
	for {
		sess, err := s.store.GetSession(ctx, userID, id)
		if err != nil {
			return // the caller's repeat of Start reports it
		}
		if sess.StartStage() == "" {
			return
		}
		pause := min(awaitPoll, time.Until(until))
		if pause <= 0 {
			return
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// startParams reads the account and checks its limits: a free concurrency
// slot and at least a minute that running sessions have not reserved. The
// session reserves its length from the balance (domain.User.Reservation,
// capped by maxMinutes when > 0); the store's transaction checks it all
// again.
func (s *Service) startParams(ctx context.Context, userID, id string, now time.Time, maxMinutes int) (store.StartParams, error) {
	user, err := s.store.GetUser(ctx, userID)
	if err != nil {
		return store.StartParams{}, err
	}
	plan := user.EffectivePlan(now)
	if user.ActiveSessions >= plan.MaxConcurrent {
		return store.StartParams{}, domain.Errorf(domain.LimitExceeded, "Concurrent session limit reached").
			WithSuggestion(fmt.Sprintf("The %s plan allows %d concurrent sessions; end a running session or upgrade the plan", plan.Name, plan.MaxConcurrent))
	}
	reserve := user.Reservation(now, maxMinutes)
	if reserve < 1 {
		hint := "Purchase more minutes or wait for the next billing period, which starts " +
			user.CurrentPeriod(now).End.Format(time.RFC3339)
		if user.ReservedMinutes > 0 {
			hint = fmt.Sprintf("Your running sessions have reserved the minutes left (%d minutes); end one, or ", user.ReservedMinutes) +
				strings.ToLower(hint[:1]) + hint[1:]
		}
		return store.StartParams{}, domain.Errorf(domain.LimitExceeded, "No minutes remaining").WithSuggestion(hint)
	}
	period := user.CurrentPeriod(now)
	return store.StartParams{
		SessionID: id, UserID: userID, StartedAt: now, Expiration: domain.Expiration(now, plan, reserve),
		JobDeadline: now.Add(jobs.ClaimWindow), MaxConcurrent: plan.MaxConcurrent,
		Period: period, IncludedMinutes: plan.IncludedMinutes,
		Reserve: reserve, MinutesLeft: user.MinutesRemaining(now), IncludedUsedWas: user.IncludedUsedIn(period),
		SamePeriod: user.UsagePeriod == period.Key(), PurchasedWas: user.PurchasedRemaining,
	}, nil
}

// CheckQuota tells whether userID could start a session now (the spec's
// link rule 3: the owner's quota is checked before anything is made).
func (s *Service) CheckQuota(ctx context.Context, userID string) error {
	_, err := s.startParams(ctx, userID, "", s.now().UTC(), 0)
	return err
}

// Hosted is a session in a room the service created.
type Hosted struct {
	SessionID   string // chosen by the caller, so the room can be named after it
	OwnerID     string
	KeyMode     string
	Avatar      domain.AvatarSource
	AspectRatio string
	Room        domain.Room // the renderer's address and token
	RoomName    string
	AgentID     string
	LinkID      string
	// VoiceID and Transcription are for the voice pipeline (rooms/initiate).
	VoiceID       string
	Transcription bool
	// MaxMinutes caps the session's length below the plan's (a link's
	// max_session_minutes); 0: the plan's.
	MaxMinutes int
}

func (h Hosted) session(now time.Time) domain.Session {
	_, hash := domain.NewSessionToken() // ws_uri is not offered for hosted rooms: nobody holds the token
	return domain.Session{
		ID: h.SessionID, UserID: h.OwnerID, KeyMode: h.KeyMode, Status: domain.StatusCreated, TokenHash: hash,
		AspectRatio: h.AspectRatio, Metadata: map[string]any{}, Room: h.Room, Avatar: h.Avatar, CreatedAt: now,
		AgentID: h.AgentID, LinkID: h.LinkID, RoomName: h.RoomName, VoiceID: h.VoiceID, Transcription: h.Transcription,
	}
}

// StartHosted creates and starts a session in one transaction with the
// owner's concurrency slot and, for a link, the link's use. A link that no
// longer allows it fails with store.ErrLinkChanged; the caller re-reads the
// link to say why.
func (s *Service) StartHosted(ctx context.Context, h Hosted) (domain.Session, error) {
	var out domain.Session
	exhausted, err := retry.Service.Do(ctx, func(ctx context.Context) (bool, error) {
		now := s.now().UTC()
		params, err := s.startParams(ctx, h.OwnerID, h.SessionID, now, h.MaxMinutes)
		if err != nil {
			return false, err
		}
		sess := h.session(now)
		sess.Status, sess.StartedAt, sess.Expiration, sess.WSURI = domain.StatusStarted, now, params.Expiration, domain.TryAgain
		sess.JobDeadline, sess.ReservedMinutes = params.JobDeadline, params.Reserve
		err = s.store.StartNewSession(ctx, params, sess, h.LinkID, now)
		if errors.Is(err, store.ErrAccountLimit) {
			return true, nil // decide again: the limit checks then name the reason
		}
		if err != nil {
			return false, err
		}
		s.send(ctx, sess)
		out = sess
		return false, nil
	})
	if exhausted {
		return domain.Session{}, errBusy
	}
	return out, err
}

// CreateHosted stores a session for a room the service created, in the
// created state: rooms/initiate makes it, and it starts when the first
// client joins the room (LiveKit's participant_joined webhook).
func (s *Service) CreateHosted(ctx context.Context, h Hosted) (domain.Session, error) {
	sess := h.session(s.now().UTC())
	if err := s.store.CreateSession(ctx, sess); err != nil {
		return domain.Session{}, err
	}
	return sess, nil
}

// Resend sends the renderer job of a started, unclaimed session again with
// a fresh claim deadline: PUT start does it when the first send failed, and
// the reaper for sessions whose send failed and nobody repeated the start.
func (s *Service) Resend(ctx context.Context, sess domain.Session) {
	deadline := s.now().UTC().Add(jobs.ClaimWindow)
	if err := s.store.RenewJobDeadline(ctx, sess.ID, deadline); err != nil {
		if !errors.Is(err, store.ErrSessionChanged) {
			s.log.ErrorContext(ctx, "renew job deadline", "session_id", sess.ID, "err", err)
		}
		return
	}
	sess.JobDeadline = deadline
	s.send(ctx, sess)
}

// send puts the renderer job on the queue. A failure is logged and left for
// the next start call (which sees job_enqueued_at unset) or the reaper.
func (s *Service) send(ctx context.Context, sess domain.Session) {
	now := s.now()
	if err := s.queue.Enqueue(ctx, jobs.NewStartJob(sess.ID, sess.UserID, sess.JobDeadline, now)); err != nil {
		s.log.ErrorContext(ctx, "enqueue renderer job", "session_id", sess.ID, "err", err)
		return
	}
	if err := s.store.MarkJobEnqueued(ctx, sess.ID, now); err != nil && !errors.Is(err, store.ErrSessionChanged) {
		s.log.ErrorContext(ctx, "mark job enqueued", "session_id", sess.ID, "err", err)
	}
}

// Delete removes a session that was never started.
func (s *Service) Delete(ctx context.Context, userID, id string) error {
	return s.transition(ctx, userID, id, domain.EventDelete, func(ctx context.Context, sess domain.Session, _ domain.Outcome) (bool, error) {
		err := s.store.DeleteCreatedSession(ctx, userID, id)
		if errors.Is(err, store.ErrSessionChanged) {
			return true, nil
		}
		if err != nil {
			return false, err
		}
		if sess.Avatar.Key != "" {
			if err := s.media.Delete(ctx, sess.Avatar.Key); err != nil {
				s.log.WarnContext(ctx, "delete avatar object", "session_id", id, "err", err)
			}
		}
		return false, nil
	})
}

// Usage summarizes the caller's plan, minutes and running sessions.
func (s *Service) Usage(ctx context.Context, userID string) (domain.Usage, error) {
	user, err := s.store.GetUser(ctx, userID)
	if err != nil {
		return domain.Usage{}, err
	}
	active, err := s.store.RunningSessionsOf(ctx, userID)
	if err != nil {
		return domain.Usage{}, err
	}
	return domain.Summarize(user, active, s.now()), nil
}
