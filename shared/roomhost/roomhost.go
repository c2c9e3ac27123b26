// Package roomhost owns the rooms the service creates itself, for links
// (shared/links starts those sessions) and for POST /v1/rooms/initiate:
// their names, lifetime and tokens (OpenRoom), the dispatch of a session's
// LiveKit voice agent (DispatchOrEnd), and LiveKit's webhooks about them,
// which start an initiated session when its first client joins and end
// any hosted session when its visitor leaves or the room closes.
package roomhost

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"avatarsvc/shared/agents"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/livekit"
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

// RoomHost creates rooms and tokens (shared/livekit).
type RoomHost interface {
	Host(ctx context.Context, prefix, id, userIdentity string, ttl time.Duration) (livekit.Hosted, error)
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

// Kind is who a hosted room is for. A room is named by its kind's prefix
// and then the session id, so a webhook finds its session, and the person's
// identity in it starts with the kind's identity prefix.
type Kind struct{ prefix, person string }

// The kinds of hosted rooms.
var (
	InitiatedRoom = Kind{prefix: "avatar-room-", person: "user-"}  // rooms/initiate
	LinkRoom      = Kind{prefix: "avatar-link-", person: "guest-"} // a link's visitor
)

// kinds are all of them, for reading a room name back.
var kinds = []Kind{InitiatedRoom, LinkRoom}

// RoomName is the name of the kind's room for a session.
func (k Kind) RoomName(sessionID string) string { return k.prefix + sessionID }

// roomTTL bounds a hosted room's tokens; LiveKit closes an empty room itself.
const roomTTL = 6 * time.Hour

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
	Room      livekit.Hosted
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
	room, err := s.OpenRoom(ctx, InitiatedRoom, id)
	if err != nil {
		return Initiated{}, err
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

// OpenRoom creates the kind's room for a session, with the renderer's and
// the person's tokens. ErrNotConfigured without a room platform.
func (s *Service) OpenRoom(ctx context.Context, k Kind, sessionID string) (livekit.Hosted, error) {
	if s.rooms == nil {
		return livekit.Hosted{}, ErrNotConfigured
	}
	person := k.person + strings.ToLower(sessionID[len(sessionID)-10:])
	room, err := s.rooms.Host(ctx, k.prefix, sessionID, person, roomTTL)
	if err != nil {
		return livekit.Hosted{}, &domain.Error{Code: domain.Unavailable, Message: "Could not create the room, please retry", Err: err}
	}
	return room, nil
}

// DispatchOrEnd sends ag's LiveKit voice agent (if that is its provider)
// into a hosted session's room. Without it the avatar would stay silent,
// so a failed dispatch ends the session as agent_unavailable (billed
// nothing: no renderer served it yet). It returns the dispatch's failure
// and, apart, the end's.
func (s *Service) DispatchOrEnd(ctx context.Context, userID, sessionID, room string, ag domain.Agent) (dispatchErr, endErr error) {
	if ag.VoiceAgent.Provider != domain.ProviderLiveKit {
		return nil, nil
	}
	if s.rooms == nil {
		return ErrNotConfigured, nil
	}
	if dispatchErr = s.rooms.DispatchAgent(ctx, room, sessionID, ag); dispatchErr == nil {
		return nil, nil
	}
	s.log.WarnContext(ctx, "agent dispatch", "session_id", sessionID, "agent", ag.VoiceAgent.AgentID, "err", dispatchErr)
	_, endErr = s.sessions.Finish(context.WithoutCancel(ctx), userID, sessionID, domain.EventAutoEnd, domain.ReasonAgentUnavailable)
	return dispatchErr, endErr
}

// sessionOfRoom is the session a hosted room belongs to, and its kind.
func sessionOfRoom(name string) (string, Kind, bool) {
	for _, k := range kinds {
		if rest, ok := strings.CutPrefix(name, k.prefix); ok && rest != "" {
			return rest, k, true
		}
	}
	return "", Kind{}, false
}

// HandleEvent applies a verified LiveKit webhook: a person (not the
// renderer, not a voice agent) joining a room made by Initiate starts its session; the client
// leaving, or the room finishing, ends it (faster than the renderer's own
// presence check, through the same end path).
func (s *Service) HandleEvent(ctx context.Context, ev livekit.Event) error {
	if ev.Room == nil {
		return nil
	}
	id, kind, ok := sessionOfRoom(ev.Room.Name)
	if !ok {
		return nil
	}
	switch ev.Event {
	case "participant_joined":
		// Link sessions start when the visitor asks (shared/links).
		if !ev.IsPerson() || kind != InitiatedRoom {
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

// dispatch sends an initiated session's LiveKit voice agent, if it has
// one, into the room now that a client is there to talk to.
func (s *Service) dispatch(ctx context.Context, sess domain.Session) error {
	if sess.AgentID == "" {
		return nil
	}
	ag, err := s.agents.Get(ctx, sess.UserID, sess.AgentID)
	if err != nil {
		return ignoreMissingAgent(err)
	}
	if dispatchErr, endErr := s.DispatchOrEnd(ctx, sess.UserID, sess.ID, sess.RoomName, ag.Agent); dispatchErr != nil {
		// The session is ended; LiveKit can only retry a failed end.
		return ignoreRefusal(endErr)
	}
	return nil
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
