// Package links is the shareable-link service: links to an agent that let
// an anonymous page start a session billed to the link's owner, and the
// single-use preview links of avatars.
package links

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"avatarsvc/shared/agents"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/livekit"
	"avatarsvc/shared/roomhost"
	"avatarsvc/shared/sessions"
	"avatarsvc/shared/store"
	"avatarsvc/shared/webhooks"
)

// Store is the persistence the service needs.
type Store interface {
	CreateLink(ctx context.Context, l domain.Link) error
	CreatePreview(ctx context.Context, a domain.Agent, l domain.Link) error
	GetLink(ctx context.Context, id string) (domain.Link, error)
	ListLinks(ctx context.Context, userID string, page domain.Page) ([]domain.Link, string, error)
	UpdateLink(ctx context.Context, userID, id string, c store.LinkChanges) (domain.Link, error)
	DeleteLink(ctx context.Context, userID, id string) error
	GetAgent(ctx context.Context, userID, id string) (domain.Agent, error)
	NoticeLinkExhausted(ctx context.Context, id string) (bool, error)
}

// EventPublisher queues lifecycle webhook events (*webhooks.Publisher).
type EventPublisher interface {
	Publish(ctx context.Context, userID string, ev webhooks.Event) error
}

// Agents shows and makes agents (shared/agents).
type Agents interface {
	Get(ctx context.Context, userID, ref string) (agents.Agent, error)
	NewTemporary(ctx context.Context, userID string, av domain.Avatar, expires time.Time) (domain.Agent, error)
}

// Avatars resolves avatars (shared/avatars).
type Avatars interface {
	Get(ctx context.Context, userID, ref string) (domain.Avatar, error)
	Source(a domain.Avatar) domain.AvatarSource
}

// Sessions starts sessions (shared/sessions).
type Sessions interface {
	CheckQuota(ctx context.Context, userID string) error
	StartHosted(ctx context.Context, h sessions.Hosted) (domain.Session, error)
	Finish(ctx context.Context, userID, id string, ev domain.Event, reason string) (domain.Session, error)
}

// Hosting opens the rooms link sessions run in and sends their voice
// agents (*roomhost.Service, the one owner of hosted rooms).
type Hosting interface {
	OpenRoom(ctx context.Context, k roomhost.Kind, sessionID string) (livekit.Hosted, error)
	DispatchOrEnd(ctx context.Context, userID, sessionID, room string, ag domain.Agent) (dispatchErr, endErr error)
}

// Service manages links.
type Service struct {
	store    Store
	agents   Agents
	avatars  Avatars
	sessions Sessions
	rooms    Hosting
	pageURL  string // the link page; a link's url is pageURL#<link_id>
	now      func() time.Time
	events   EventPublisher
}

// UseEvents publishes link.exhausted when a link reaches its use limit or
// is refused as expired.
func (s *Service) UseEvents(p EventPublisher) { s.events = p }

// exhausted publishes link.exhausted once per exhaustion (the link item
// remembers it until the owner changes the link). Best effort: a failure
// is logged by the publisher and never fails the visitor's request.
func (s *Service) exhausted(ctx context.Context, l domain.Link, reason string) {
	if s.events == nil || l.ExhaustedNoticed {
		return // a refused visitor costs no write once the owner was told
	}
	if first, err := s.store.NoticeLinkExhausted(ctx, l.ID); err != nil || !first {
		return
	}
	_ = s.events.Publish(ctx, l.UserID, webhooks.LinkExhausted(l, reason, s.now()))
}

// New returns a Service.
func New(st Store, ag Agents, av Avatars, ss Sessions, rh Hosting, pageURL string, now func() time.Time) *Service {
	return &Service{store: st, agents: ag, avatars: av, sessions: ss, rooms: rh, pageURL: pageURL, now: now}
}

// URL is the public page address of a link. The id travels in the
// fragment, which browsers never send to servers or in Referer headers.
func (s *Service) URL(id string) string { return s.pageURL + "#" + id }

// Link is a link with its agent, as shown to callers.
type Link struct {
	domain.Link
	Agent agents.Agent
}

const maxName = 200

// CreateInput is a new link.
type CreateInput struct {
	AgentID   string
	Name      *string
	UseLimit  *int
	ExpiresAt *time.Time
	// Policy holds the extensions; its AllowedOrigins are as given (Create
	// normalizes them).
	Policy domain.LinkPolicy
}

// checkPolicy validates p and normalizes its origins.
func checkPolicy(p domain.LinkPolicy) (domain.LinkPolicy, error) {
	if p.AllowedOrigins != nil {
		list, err := domain.NormalizeOrigins(p.AllowedOrigins)
		if err != nil {
			return p, err
		}
		p.AllowedOrigins = list
	}
	return p, p.CheckBounds()
}

// Create makes an active link to one of the user's agents.
func (s *Service) Create(ctx context.Context, userID string, in CreateInput) (Link, error) {
	if in.AgentID == "" {
		return Link{}, domain.Errorf(domain.Invalid, "agent_id is required")
	}
	ag, err := s.agents.Get(ctx, userID, in.AgentID)
	if err != nil {
		return Link{}, err
	}
	now := s.now().UTC()
	l := domain.Link{ID: domain.NewLinkID(), UserID: userID, AgentID: ag.ID, Status: domain.LinkActive, CreatedAt: now}
	if in.Name != nil {
		if len(*in.Name) > maxName {
			return Link{}, domain.Errorf(domain.Invalid, "name is too long")
		}
		l.Name = in.Name
	}
	if in.UseLimit != nil {
		if *in.UseLimit < 1 {
			return Link{}, domain.Errorf(domain.Invalid, "use_limit must be a positive integer or null")
		}
		l.UseLimit = in.UseLimit
	}
	if in.ExpiresAt != nil {
		if !in.ExpiresAt.After(now) {
			return Link{}, domain.Errorf(domain.Invalid, "expires_at must be in the future")
		}
		t := in.ExpiresAt.UTC()
		l.ExpiresAt = &t
	}
	if l.LinkPolicy, err = checkPolicy(in.Policy); err != nil {
		return Link{}, err
	}
	if err := s.store.CreateLink(ctx, l); err != nil {
		return Link{}, err
	}
	return Link{Link: l, Agent: ag}, nil
}

// getOwn reads one of the user's links.
func (s *Service) getOwn(ctx context.Context, userID, ref string) (domain.Link, error) {
	id, err := domain.ParseLinkID(ref)
	if err != nil {
		return domain.Link{}, err
	}
	l, err := s.store.GetLink(ctx, id)
	if err != nil {
		return domain.Link{}, err
	}
	if l.UserID != userID || l.Preview {
		return domain.Link{}, domain.ErrLinkNotFound
	}
	return l, nil
}

func (s *Service) withAgent(ctx context.Context, l domain.Link) (Link, error) {
	ag, err := s.agents.Get(ctx, l.UserID, l.AgentID)
	if errors.Is(err, domain.ErrAgentNotFound) {
		return Link{Link: l, Agent: agents.Agent{Agent: domain.Agent{ID: l.AgentID}}}, nil
	}
	if err != nil {
		return Link{}, err
	}
	return Link{Link: l, Agent: ag}, nil
}

// List returns a page of the user's links, newest first. filter is
// active, paused, expired, or all ("" too); statuses are as of now.
func (s *Service) List(ctx context.Context, userID, filter string, page domain.Page) ([]Link, string, error) {
	if filter != "" && filter != "all" && !domain.ValidLinkStatus(filter) {
		return nil, "", domain.Errorf(domain.Invalid, "Invalid status filter %q", filter).
			WithSuggestion("Use active, paused, expired or all")
	}
	list, next, err := s.store.ListLinks(ctx, userID, page)
	if err != nil {
		return nil, "", err
	}
	now := s.now()
	out := []Link{}
	for _, l := range list {
		if filter != "" && filter != "all" && string(l.StatusAt(now)) != filter {
			continue
		}
		v, err := s.withAgent(ctx, l)
		if err != nil {
			return nil, "", err
		}
		out = append(out, v)
	}
	return out, next, nil
}

// Changes is a partial update: a field absent stays; Clear* is JSON null.
type Changes struct {
	Name                  *string
	ClearName             bool
	Status                *string
	ExpiresAt             *time.Time
	ClearExpires          bool
	UseLimit              *int
	ClearUseLimit         bool
	Present               bool // at least one field was given
	InvalidUseLimitNumber bool // use_limit was a number but not an integer
	// Policy holds the given extensions (nil: null, which removes the
	// field); the Set* flags say which were given.
	Policy                                                        domain.LinkPolicy
	SetMaxConcurrent, SetVisitorStarts, SetOrigins, SetMaxMinutes bool
}

// Update applies c to the user's link.
func (s *Service) Update(ctx context.Context, userID, ref string, c Changes) (Link, error) {
	if !c.Present {
		return Link{}, domain.Errorf(domain.Invalid, "No fields to update").
			WithSuggestion("Pass at least one of name, status, expires_at, use_limit, max_concurrent_sessions, max_starts_per_visitor_per_minute, allowed_origins, max_session_minutes")
	}
	l, err := s.getOwn(ctx, userID, ref)
	if err != nil {
		return Link{}, err
	}
	var sc store.LinkChanges
	if c.Name != nil {
		if len(*c.Name) > maxName {
			return Link{}, domain.Errorf(domain.Invalid, "name is too long")
		}
		sc.SetName, sc.Name = true, *c.Name
	}
	sc.ClearName = c.ClearName
	if c.Status != nil {
		if !domain.ValidLinkStatus(*c.Status) {
			return Link{}, domain.Errorf(domain.Invalid, "Invalid status %q", *c.Status).
				WithSuggestion("Use active, paused or expired")
		}
		st := domain.LinkStatus(*c.Status)
		sc.Status = &st
	}
	if c.ExpiresAt != nil {
		sc.SetExpires, sc.ExpiresAt = true, c.ExpiresAt.UTC()
	}
	sc.ClearExpires = c.ClearExpires
	if c.InvalidUseLimitNumber || (c.UseLimit != nil && *c.UseLimit < 1) {
		return Link{}, useLimitError(l.Uses)
	}
	if c.UseLimit != nil {
		if *c.UseLimit <= l.Uses {
			return Link{}, useLimitError(l.Uses)
		}
		sc.SetUseLimit, sc.UseLimit = true, *c.UseLimit
	}
	sc.ClearUseLimit = c.ClearUseLimit
	if sc.Policy, err = checkPolicy(c.Policy); err != nil {
		return Link{}, err
	}
	sc.SetMaxConcurrent, sc.SetVisitorStarts, sc.SetOrigins, sc.SetMaxMinutes = c.SetMaxConcurrent, c.SetVisitorStarts, c.SetOrigins, c.SetMaxMinutes
	updated, err := s.store.UpdateLink(ctx, userID, l.ID, sc)
	if errors.Is(err, store.ErrChanged) {
		// Deleted meanwhile, or sessions started through it reached the
		// new use_limit: re-read to say which.
		if l, err = s.getOwn(ctx, userID, ref); err != nil {
			return Link{}, err
		}
		return Link{}, useLimitError(l.Uses)
	}
	if err != nil {
		return Link{}, err
	}
	return s.withAgent(ctx, updated)
}

func useLimitError(uses int) error {
	return domain.Errorf(domain.Invalid, "use_limit must be a positive integer greater than the current uses (%d)", uses).
		WithSuggestion("Pass a larger use_limit, or null for unlimited")
}

// Delete removes the user's link.
func (s *Service) Delete(ctx context.Context, userID, ref string) error {
	l, err := s.getOwn(ctx, userID, ref)
	if err != nil {
		return err
	}
	return s.store.DeleteLink(ctx, userID, l.ID)
}

// Preview makes a temporary agent for the avatar and a single-use link to
// it that expires after domain.PreviewLifetime; it returns the link's url.
func (s *Service) Preview(ctx context.Context, userID, avatarRef string) (string, time.Time, error) {
	if avatarRef == "" {
		return "", time.Time{}, domain.Errorf(domain.Invalid, "avatar_id is required").
			WithSuggestion("Pass an avat_... id from avatar upload or a catalog avatar id")
	}
	av, err := s.avatars.Get(ctx, userID, avatarRef)
	if err != nil {
		return "", time.Time{}, err
	}
	now := s.now().UTC()
	expires := now.Add(domain.PreviewLifetime)
	ag, err := s.agents.NewTemporary(ctx, userID, av, expires)
	if err != nil {
		return "", time.Time{}, err
	}
	one := 1
	l := domain.Link{
		ID: domain.NewLinkID(), UserID: userID, AgentID: ag.ID, Status: domain.LinkActive, UseLimit: &one,
		CreatedAt: now, ExpiresAt: &expires, Preview: true,
	}
	if err := s.store.CreatePreview(ctx, ag, l); err != nil {
		return "", time.Time{}, err
	}
	return s.URL(l.ID), expires, nil
}

// Started is a session started through a link: what the page needs to join.
type Started struct {
	SessionID        string
	RoomURL          string
	ParticipantToken string
	AgentIdentity    string
}

// Open reads a link for a start and applies its own rules: the spec's
// rule 1 (active, unexpired, within use_limit), then the extensions
// max_concurrent_sessions and allowed_origins (origin is the request's
// Origin header). The caller then applies its rate limits and calls Start.
func (s *Service) Open(ctx context.Context, linkRef, origin string) (domain.Link, error) {
	id, err := domain.ParseLinkID(linkRef)
	if err != nil {
		return domain.Link{}, err
	}
	l, err := s.store.GetLink(ctx, id)
	if err != nil {
		return domain.Link{}, err
	}
	if err := l.CheckUsable(s.now()); err != nil {
		switch {
		case errors.Is(err, domain.ErrLinkExpired):
			s.exhausted(ctx, l, webhooks.LinkExpired)
		case errors.Is(err, domain.ErrLinkUsedUp):
			s.exhausted(ctx, l, webhooks.LinkUseLimitReached)
		}
		return domain.Link{}, err
	}
	if err := l.CheckOrigin(origin); err != nil {
		return domain.Link{}, err
	}
	return l, nil
}

// Start starts a session through a link Open returned, following the
// spec's remaining rules in order: its agent has an avatar image; the owner
// has a free slot and minutes; a uniquely named room and two tokens are
// made; the session starts, the link's use and running count go up and the
// owner's slot is taken in one transaction (which checks rule 1 and
// max_concurrent_sessions again). aspectRatio defaults to 4:3 when absent or
// invalid; max_session_minutes caps the session's length.
func (s *Service) Start(ctx context.Context, l domain.Link, aspectRatio string) (Started, error) {
	if !domain.ValidAspectRatio(aspectRatio) {
		aspectRatio = "4:3"
	}
	ag, err := s.store.GetAgent(ctx, l.UserID, l.AgentID)
	if errors.Is(err, domain.ErrAgentNotFound) {
		return Started{}, domain.Errorf(domain.NotFound, "This link's agent no longer exists").
			WithSuggestion("Ask the link's owner for a new link")
	}
	if err != nil {
		return Started{}, err
	}
	av, err := s.avatars.Get(ctx, l.UserID, ag.AvatarID)
	if errors.Is(err, domain.ErrAvatarNotFound) || (err == nil && av.URL == "") {
		return Started{}, domain.Errorf(domain.Conflict, "This link's agent has no avatar image").
			WithSuggestion("Ask the link's owner to give the agent an avatar")
	}
	if err != nil {
		return Started{}, err
	}
	if err := s.sessions.CheckQuota(ctx, l.UserID); err != nil {
		return Started{}, ownerLimit(err)
	}
	sessionID := domain.NewSessionID()
	room, err := s.rooms.OpenRoom(ctx, roomhost.LinkRoom, sessionID)
	if err != nil {
		return Started{}, err
	}
	for attempt := 0; ; attempt++ {
		_, err = s.sessions.StartHosted(ctx, sessions.Hosted{
			SessionID: sessionID, OwnerID: l.UserID, KeyMode: domain.ModeLive, Avatar: s.avatars.Source(av),
			AspectRatio: aspectRatio, RoomName: room.Name, AgentID: ag.ID, LinkID: l.ID,
			VoiceID: av.VoiceID, Transcription: true, // the link page shows captions
			Room:       domain.Room{Platform: domain.PlatformLiveKit, URL: room.URL, Token: room.RendererToken},
			MaxMinutes: maxMinutes(l),
		})
		if !errors.Is(err, store.ErrLinkChanged) || attempt >= 3 {
			break
		}
		// Another start took the last use or running slot, or the owner
		// paused the link: re-read it to say which (it may also just have
		// been a race).
		if l, err = s.store.GetLink(ctx, l.ID); err != nil {
			return Started{}, err
		}
		if err := l.CheckUsable(s.now()); err != nil {
			return Started{}, err
		}
	}
	if errors.Is(err, store.ErrLinkChanged) {
		return Started{}, domain.Errorf(domain.Unavailable, "The link is busy, please retry")
	}
	if err != nil {
		return Started{}, ownerLimit(err)
	}
	if l.UseLimit != nil && l.Uses+1 >= *l.UseLimit {
		// Perhaps the last use: the fresh read says (starts race).
		if fresh, err := s.store.GetLink(ctx, l.ID); err == nil && fresh.UseLimit != nil && fresh.Uses >= *fresh.UseLimit {
			s.exhausted(ctx, fresh, webhooks.LinkUseLimitReached)
		}
	}
	if dispatchErr, endErr := s.rooms.DispatchOrEnd(ctx, l.UserID, sessionID, room.Name, ag); dispatchErr != nil {
		// The session is ended; the visitor may retry.
		return Started{}, &domain.Error{Code: domain.Unavailable, Message: "The voice agent could not be started, please retry",
			Err: errors.Join(dispatchErr, endErr)}
	}
	return Started{SessionID: sessionID, RoomURL: room.URL, ParticipantToken: room.UserToken, AgentIdentity: livekit.AvatarIdentity}, nil
}

func maxMinutes(l domain.Link) int {
	if l.MaxSessionMinutes == nil {
		return 0
	}
	return *l.MaxSessionMinutes
}

// ownerLimit rewords the owner's plan limits for an anonymous visitor, who
// can do nothing about the owner's plan.
func ownerLimit(err error) error {
	if domain.ErrorCode(err) != domain.LimitExceeded {
		return err
	}
	msg, _ := domain.ErrorMessage(err)
	return &domain.Error{Code: domain.LimitExceeded, Message: msg,
		Suggestion: fmt.Sprintf("The link's owner has reached a plan limit (%s); try again later", strings.ToLower(msg)), Err: err}
}
