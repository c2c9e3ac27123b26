// Package roomhost runs sessions in rooms the service creates itself
// (POST /v1/rooms/initiate): it makes the room and the session, and starts
// the session when LiveKit's webhook says the first client joined; the
// room closing ends it.
package roomhost

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"avatarsvc/shared/agents"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/rooms"
	"avatarsvc/shared/sessions"
	"avatarsvc/shared/voices"
)

// Sessions is what the service needs of shared/sessions.
type Sessions interface {
	CreateHosted(ctx context.Context, h sessions.Hosted) (domain.Session, error)
	GetByID(ctx context.Context, id string) (domain.Session, error)
	Start(ctx context.Context, userID, id string, ev domain.Event) (sessions.Started, error)
	Finish(ctx context.Context, userID, id string, ev domain.Event, reason string) (domain.Session, error)
}

// Agents resolves agents (shared/agents).
type Agents interface {
	Get(ctx context.Context, userID, ref string) (agents.Agent, error)
}

// Avatars resolves avatars (shared/avatars).
type Avatars interface {
	Get(ctx context.Context, userID, ref string) (domain.Avatar, error)
	Source(a domain.Avatar) domain.AvatarSource
}

// RoomHost creates rooms and tokens (shared/rooms).
type RoomHost interface {
	Host(ctx context.Context, prefix, id, userIdentity string, ttl time.Duration) (rooms.Hosted, error)
	DispatchAgent(ctx context.Context, room, sessionID string, ag domain.Agent) error
}

// Service hosts sessions in service-made rooms.
type Service struct {
	sessions      Sessions
	agents        Agents
	avatars       Avatars
	rooms         RoomHost // nil: no room platform configured
	defaultAvatar string
	log           *slog.Logger
}

// New returns a Service. defaultAvatar is the avatar used when a request
// names none (a catalog id; DEFAULT_AVATAR).
func New(ss Sessions, ag Agents, av Avatars, rh RoomHost, defaultAvatar string, log *slog.Logger) *Service {
	return &Service{sessions: ss, agents: ag, avatars: av, rooms: rh, defaultAvatar: defaultAvatar, log: log}
}

// RoomPrefix starts the names of rooms made by Initiate.
const (
	RoomPrefix = "avatar-room-"
	roomTTL    = 6 * time.Hour
)

// ErrNotConfigured answers when no room platform is configured.
var ErrNotConfigured = domain.Errorf(domain.Internal, "Room platform is not configured on this server").
	WithSuggestion("The operator must set LIVEKIT_URL, LIVEKIT_API_KEY and LIVEKIT_API_SECRET")

// Request is an Initiate Room body.
type Request struct {
	Avatar        string
	AspectRatio   string
	VoiceID       string
	Transcription bool
	// Agent (agent_id, an extension of the spec) puts one of the caller's
	// agents in the room: its avatar unless Avatar is given, its greeting,
	// and its voice agent.
	Agent string
}

// Initiated is a new room and its session.
type Initiated struct {
	SessionID string
	Room      rooms.Hosted
}

// Initiate makes a room and a session for it, in the created state; the
// session starts when a client joins.
func (s *Service) Initiate(ctx context.Context, userID, keyMode string, req Request) (Initiated, error) {
	if s.rooms == nil {
		return Initiated{}, ErrNotConfigured
	}
	ar := req.AspectRatio
	if ar == "" {
		ar = "1:1"
	}
	if !domain.ValidAspectRatio(ar) {
		return Initiated{}, domain.Errorf(domain.Invalid, "Invalid aspect_ratio %q", req.AspectRatio).
			WithSuggestion("Use one of 1:1, 4:3 or 3:4")
	}
	var ag agents.Agent
	if req.Agent != "" {
		var err error
		if ag, err = s.agents.Get(ctx, userID, req.Agent); err != nil {
			return Initiated{}, err
		}
	}
	ref := req.Avatar
	if ref == "" {
		ref = ag.AvatarID
	}
	if ref == "" {
		ref = s.defaultAvatar
	}
	if ref == "" {
		return Initiated{}, domain.Errorf(domain.Invalid, "avatar is required").
			WithSuggestion("This server has no default avatar: pass an avat_... id or a catalog avatar id")
	}
	av, err := s.avatars.Get(ctx, userID, ref)
	if err != nil {
		return Initiated{}, err
	}
	if err := voices.Validate(req.VoiceID); err != nil {
		return Initiated{}, err
	}
	voice := req.VoiceID
	if voice == "" {
		voice = av.VoiceID
	}
	id := domain.NewSessionID()
	room, err := s.rooms.Host(ctx, RoomPrefix, id, "user-"+strings.ToLower(id[len(id)-10:]), roomTTL)
	if err != nil {
		return Initiated{}, &domain.Error{Code: domain.Unavailable, Message: "Could not create the room, please retry", Err: err}
	}
	_, err = s.sessions.CreateHosted(ctx, sessions.Hosted{
		SessionID: id, OwnerID: userID, KeyMode: keyMode, Avatar: s.avatars.Source(av), AspectRatio: ar,
		RoomName: room.Name, VoiceID: voice, Transcription: req.Transcription, AgentID: ag.ID,
		Room: domain.Room{Platform: domain.PlatformLiveKit, URL: room.URL, Token: room.RendererToken},
	})
	if err != nil {
		return Initiated{}, err
	}
	return Initiated{SessionID: id, Room: room}, nil
}

// sessionOfRoom is the session a service-made room belongs to.
func sessionOfRoom(name string) (string, bool) {
	for _, p := range []string{RoomPrefix, "avatar-link-"} {
		if rest, ok := strings.CutPrefix(name, p); ok && rest != "" {
			return rest, true
		}
	}
	return "", false
}

// HandleEvent applies a verified LiveKit webhook: a person (not the
// renderer, not a voice agent) joining a room made by Initiate starts its session; the client
// leaving, or the room finishing, ends it (faster than the renderer's own
// presence check, through the same end path).
func (s *Service) HandleEvent(ctx context.Context, ev rooms.Event) error {
	if ev.Room == nil {
		return nil
	}
	id, ok := sessionOfRoom(ev.Room.Name)
	if !ok {
		return nil
	}
	switch ev.Event {
	case "participant_joined":
		if !ev.IsPerson() || !strings.HasPrefix(ev.Room.Name, RoomPrefix) {
			return nil
		}
		sess, err := s.sessions.GetByID(ctx, id)
		if err != nil || sess.Status != domain.StatusCreated {
			return ignoreMissing(err)
		}
		_, err = s.sessions.Start(ctx, sess.UserID, id, domain.EventStart)
		if err != nil {
			s.log.WarnContext(ctx, "start on join", "session_id", id, "err", err)
			return ignoreRefusal(err)
		}
		return s.dispatch(ctx, sess)
	case "participant_left":
		// The visitor left (the link page's end button, or closing the tab):
		// the conversation is over. The renderer leaving is the session
		// ending already; a voice agent leaving is not the visitor's wish
		// (the renderer dispatches a missing LiveKit agent again).
		if !ev.IsPerson() {
			return nil
		}
		return s.finish(ctx, id, domain.ReasonParticipantsLeft)
	case "room_finished":
		return s.finish(ctx, id, domain.ReasonRoomClosed)
	}
	return nil
}

// dispatch sends the session's LiveKit voice agent, if it has one, into the
// room now that a client is there to talk to. Without it the avatar would
// stay silent, so a failed dispatch ends the session (billed nothing yet).
func (s *Service) dispatch(ctx context.Context, sess domain.Session) error {
	if sess.AgentID == "" {
		return nil
	}
	ag, err := s.agents.Get(ctx, sess.UserID, sess.AgentID)
	if err != nil || ag.VoiceAgent.Provider != domain.ProviderLiveKit {
		return ignoreMissingAgent(err)
	}
	if err = s.rooms.DispatchAgent(ctx, sess.RoomName, sess.ID, ag.Agent); err == nil {
		return nil
	}
	s.log.WarnContext(ctx, "agent dispatch", "session_id", sess.ID, "agent", ag.VoiceAgent.AgentID, "err", err)
	_, ferr := s.sessions.Finish(context.WithoutCancel(ctx), sess.UserID, sess.ID, domain.EventAutoEnd, domain.ReasonAgentUnavailable)
	return ignoreRefusal(ferr)
}

// ignoreMissingAgent lets a session whose agent was deleted meanwhile go on
// with the built-in voice.
func ignoreMissingAgent(err error) error {
	if errors.Is(err, domain.ErrAgentNotFound) {
		return nil
	}
	return err
}

func (s *Service) finish(ctx context.Context, id, reason string) error {
	sess, err := s.sessions.GetByID(ctx, id)
	if err != nil || sess.Status != domain.StatusStarted {
		return ignoreMissing(err)
	}
	_, err = s.sessions.Finish(ctx, sess.UserID, id, domain.EventAutoEnd, reason)
	return ignoreRefusal(err)
}

func ignoreMissing(err error) error {
	if errors.Is(err, domain.ErrSessionNotFound) {
		return nil
	}
	return err
}

// ignoreRefusal drops errors the webhook sender cannot act on (a plan
// limit, a state change): LiveKit would only retry them.
func ignoreRefusal(err error) error {
	switch domain.ErrorCode(err) {
	case domain.Invalid, domain.Conflict, domain.LimitExceeded, domain.NotFound:
		return nil
	}
	return err
}
