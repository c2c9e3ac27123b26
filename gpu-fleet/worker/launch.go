package worker

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"slices"
	"time"

	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/conversation"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/rendersession"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/store"
	"avatarsvc/shared/voices"
	"avatarsvc/shared/webhooks"
)

// AvatarLoader fetches, decodes and face-checks a session's avatar
// (*avatarsource.Loader).
type AvatarLoader interface {
	Load(ctx context.Context, src domain.AvatarSource, width, height int) (*avatarimage.Prepared, error)
}

// RoomGuard decides whether a caller's room URL may be dialled
// (netguard.Policy): a hostile "LiveKit server" must not aim the renderer at
// internal services. CheckURL refuses a room up front with a clear reason;
// as room.Guard it then guards every connection made for the room.
type RoomGuard interface {
	CheckURL(ctx context.Context, raw string) error
	room.Guard
}

// Agents reads the agent of a hosted session, and its owner for the voice
// agents the account may use (*store.Store).
type Agents interface {
	GetAgent(ctx context.Context, userID, id string) (domain.Agent, error)
	GetUser(ctx context.Context, id string) (domain.User, error)
}

// RemoteAgents connects to remote voice agents (the elevenlabs provider).
type RemoteAgents interface {
	Dial(ctx context.Context, va domain.VoiceAgent) (conversation.Remote, error)
}

// AgentDispatcher sends a session's LiveKit agent into its room
// (*livekit.Client).
type AgentDispatcher interface {
	DispatchAgent(ctx context.Context, room, sessionID string, ag domain.Agent) error
}

// RoomLauncher is the production Launcher: avatar, then room, then the
// 25 fps pipeline, all through rendersession.
type RoomLauncher struct {
	Avatars AvatarLoader
	// AvatarReason turns a load failure into its end reason
	// (avatarsource.EndReason).
	AvatarReason func(error) string
	Rooms        RoomGuard
	// Audio is the process's one ws_uri listener, shared by all sessions.
	Audio *audiows.Server
	// GracePeriod and JoinTimeout: see room.Config (defaults there).
	GracePeriod, JoinTimeout time.Duration
	// ExpiryWarning: see rendersession.Config (default there).
	ExpiryWarning time.Duration
	// Events publishes session.expiring with the warning; nil: none.
	Events EventPublisher
	// Agents and Remote give sessions in rooms the service made (links,
	// rooms/initiate) their conversation; see conversationFor.
	Agents Agents
	Remote RemoteAgents
	// Dispatcher re-dispatches a LiveKit agent that did not join; nil when
	// this renderer has no LiveKit API credentials.
	Dispatcher AgentDispatcher
	// Progress records that the launch is joining the room (PUT start's
	// stage) and when the first person came to a room the service made,
	// from which such a session bills (*store.Store).
	Progress ProgressReporter
	Log      *slog.Logger
}

// ProgressReporter records a launch's progress and the first person's
// arrival on a hosted session.
type ProgressReporter interface {
	ReportJoining(ctx context.Context, id, workerID string, at time.Time) error
	ReportPersonJoined(ctx context.Context, id, workerID string, at time.Time) error
}

// NoShowTimeout is how long a session in a room the service made (a link,
// rooms/initiate) waits for a person: a link page opened by a script, or a
// client that never joins, frees the owner's slot and bills nothing.
const NoShowTimeout = 15 * time.Second

// Launch starts the renderer for sess. Failures carry their end reason.
func (l *RoomLauncher) Launch(ctx context.Context, sess domain.Session) (Stream, error) {
	if sess.Room.Platform != domain.PlatformLiveKit {
		return nil, &EndReasonError{Reason: domain.ReasonRoomUnreachable + ": platform " + sess.Room.Platform + " not supported",
			Err: errors.New("the renderer joins LiveKit rooms only")}
	}
	if err := l.Rooms.CheckURL(ctx, sess.Room.URL); err != nil {
		host := sess.Room.URL
		if u, perr := url.Parse(sess.Room.URL); perr == nil {
			host = u.Hostname()
		}
		return nil, &EndReasonError{Reason: domain.ReasonRoomUnreachable + ": room host " + host + " not allowed", Err: err}
	}
	w, h, err := render.Dimensions(render.AspectRatio(sess.AspectRatio))
	if err != nil {
		return nil, &EndReasonError{Reason: domain.ReasonRendererFailed, Err: err}
	}
	prepared, err := l.Avatars.Load(ctx, sess.Avatar, w, h)
	if err != nil {
		return nil, &EndReasonError{Reason: l.AvatarReason(err), Err: err}
	}
	var tokenHash [32]byte
	if b, err := hex.DecodeString(sess.TokenHash); err != nil || len(b) != 32 {
		return nil, &EndReasonError{Reason: domain.ReasonRendererFailed, Err: fmt.Errorf("session token hash is not SHA-256 hex")}
	} else {
		copy(tokenHash[:], b)
	}
	log := l.Log
	if log == nil {
		log = slog.Default()
	}
	talk, err := l.conversationFor(ctx, sess)
	if err != nil {
		return nil, &EndReasonError{Reason: domain.ReasonAgentUnavailable, Err: err}
	}
	roomCfg := room.Config{
		URL: sess.Room.URL, Token: sess.Room.Token, ExpiresAt: sess.Expiration,
		GracePeriod: l.GracePeriod, JoinTimeout: l.JoinTimeout, Guard: l.Rooms,
	}
	if sess.Hosted() {
		roomCfg.PeopleOnly = true
		if roomCfg.JoinTimeout <= 0 || roomCfg.JoinTimeout > NoShowTimeout {
			roomCfg.JoinTimeout = NoShowTimeout
		}
		roomCfg.OnFirstPerson = func(at time.Time) { l.reportPerson(sess, at, log) }
	}
	l.reportJoining(ctx, sess, log)
	s, err := rendersession.Start(ctx, rendersession.Config{
		SessionID:     sess.ID,
		TokenHash:     tokenHash,
		Room:          roomCfg,
		Renderer:      render.NewCPURenderer(prepared),
		Audio:         l.Audio,
		Conversation:  talk,
		ExpiryWarning: l.ExpiryWarning,
		OnExpiring:    l.expiring(sess),
		Logger:        log,
	})
	if err != nil {
		if talk != nil && talk.Remote != nil {
			talk.Remote.Close()
		}
		return nil, &EndReasonError{Reason: domain.ReasonRoomUnreachable, Err: err}
	}
	return &roomStream{s: s, hosted: sess.Hosted()}, nil
}

// reportJoining tells callers polling PUT start that the room join began.
// It is progress only: a failed write costs the stage, never the launch.
func (l *RoomLauncher) reportJoining(ctx context.Context, sess domain.Session, log *slog.Logger) {
	if l.Progress == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := l.Progress.ReportJoining(ctx, sess.ID, sess.WorkerID, time.Now()); err != nil && !errors.Is(err, store.ErrSessionChanged) {
		log.Warn("report joining", "err", err)
	}
}

// reportPerson records the first person's arrival, retrying transient
// failures for a while: until it is written the session bills nothing.
func (l *RoomLauncher) reportPerson(sess domain.Session, at time.Time, log *slog.Logger) {
	if l.Progress == nil {
		return
	}
	for attempt := 0; attempt < 10; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := l.Progress.ReportPersonJoined(ctx, sess.ID, sess.WorkerID, at)
		cancel()
		if err == nil || errors.Is(err, store.ErrSessionChanged) {
			return
		}
		log.Warn("report first person", "session_id", sess.ID, "err", err)
		time.Sleep(time.Duration(attempt+1) * 200 * time.Millisecond)
	}
}

// conversationFor decides who speaks for the avatar. Sessions in the
// caller's own room have no conversation: the caller drives them through
// ws_uri or an in-room agent. Sessions in rooms the service made talk
// through their agent's voice agent: local (also with no agent) greets,
// listens and answers here; elevenlabs is bridged from here; livekit is
// the customer's own agent, dispatched into the room, which does it all.
func (l *RoomLauncher) conversationFor(ctx context.Context, sess domain.Session) (*conversation.Config, error) {
	if sess.RoomName == "" {
		return nil, nil
	}
	var ag domain.Agent
	if sess.AgentID != "" && l.Agents != nil {
		var err error
		ag, err = l.Agents.GetAgent(ctx, sess.UserID, sess.AgentID)
		if err != nil && !errors.Is(err, domain.ErrAgentNotFound) {
			return nil, fmt.Errorf("read the session's agent: %w", err)
		}
	}
	if p := ag.VoiceAgent.Provider; p != "" && p != domain.ProviderLocal {
		// The operator may have revoked the account's use of this voice
		// agent since the agent was saved.
		owner, err := l.Agents.GetUser(ctx, sess.UserID)
		if err != nil {
			return nil, fmt.Errorf("read the session's owner: %w", err)
		}
		if err := owner.AllowsVoiceAgent(ag.VoiceAgent); err != nil {
			return nil, err
		}
	}
	voice := sess.VoiceID
	if _, ok := voices.Lookup(voice); !ok {
		voice = voices.Default // set before voices were checked, or never set
	}
	cfg := &conversation.Config{Voice: voice, Greeting: ag.Greeting, Transcribe: sess.Transcription}
	switch ag.VoiceAgent.Provider {
	case "", domain.ProviderLocal:
		cfg.Brain = conversation.Local{}
	case domain.ProviderLiveKit:
		// The customer's agent listens and speaks; we only make sure it came.
		if l.Dispatcher == nil {
			return nil, nil
		}
		return &conversation.Config{Redispatch: func(ctx context.Context) error {
			return l.Dispatcher.DispatchAgent(ctx, sess.RoomName, sess.ID, ag)
		}}, nil
	case domain.ProviderElevenLabs:
		if l.Remote == nil {
			return nil, errors.New("this renderer has no ElevenLabs bridge configured")
		}
		remote, err := l.Remote.Dial(ctx, ag.VoiceAgent)
		if err != nil {
			return nil, fmt.Errorf("connect to the ElevenLabs agent: %w", err)
		}
		cfg.Remote = remote
	default:
		return nil, fmt.Errorf("unsupported voice agent provider %q", ag.VoiceAgent.Provider)
	}
	return cfg, nil
}

// roomStream adapts a rendersession.Session to Stream.
type roomStream struct {
	s      *rendersession.Session
	hosted bool // in a room the service made: nobody coming is a no-show
}

func (r *roomStream) Done() <-chan struct{}    { return r.s.Done() }
func (r *roomStream) Stop()                    { r.s.Stop() }
func (r *roomStream) Extend(expires time.Time) { r.s.Extend(expires) }

func (r *roomStream) EndReason() string {
	reason, _ := r.s.Wait()
	if reason == room.NoParticipants && r.hosted {
		return domain.ReasonNoShow
	}
	return endReasonOf(reason)
}

// Quality turns the session's counters into its quality figures.
func (r *roomStream) Quality(claimedAt time.Time) domain.Quality {
	st := r.s.Stats()
	q := domain.Quality{
		Frames: st.Frames, LateFrames: st.LateFrames, Underruns: st.Underruns,
		MaxAVSkewMS: ms(st.MaxAVSkew), Subscribers: r.s.MaxSubscribers(),
	}
	if !st.FirstFrameAt.IsZero() {
		q.FirstFrameMS = max(0, st.FirstFrameAt.Sub(claimedAt).Milliseconds())
		// Frames are 40 ms apart: the session published for Frames x 40 ms.
		if secs := float64(st.Frames) * rendersession.FrameDuration.Seconds(); secs > 0 {
			q.BitrateKbps = float64(st.Bytes) * 8 / 1000 / secs
		}
	}
	if lat := r.s.Latencies(); len(lat) > 0 {
		slices.Sort(lat)
		q.LatencyP50MS = ms(lat[len(lat)/2])
		q.LatencyP99MS = ms(lat[min(len(lat)-1, len(lat)*99/100)])
	}
	return q
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/float64(time.Millisecond)*10) / 10 }

// endReasonOf maps why the renderer left the room to the recorded reason.
func endReasonOf(r room.EndReason) string {
	switch r {
	case room.ParticipantsLeft:
		return domain.ReasonParticipantsLeft
	case room.NoParticipants:
		return domain.ReasonNoParticipants
	case room.Expired:
		return domain.ReasonExpired
	case room.RoomClosed:
		return domain.ReasonRoomClosed
	case room.Removed:
		return domain.ReasonRemoved
	case room.RoomError:
		return domain.ReasonRoomLost
	case room.Stopped:
		return domain.ReasonWorkerDrained // only the worker stops a stream, and only when draining
	}
	return domain.ReasonRendererFailed
}

// expiring publishes a session's session.expiring webhook event, off the
// frame clock's goroutine.
func (l *RoomLauncher) expiring(sess domain.Session) func(time.Time, int) {
	if l.Events == nil {
		return nil
	}
	return func(expiresAt time.Time, secondsLeft int) {
		go func() {
			_ = l.Events.Publish(context.Background(), sess.UserID, webhooks.SessionExpiring(sess, expiresAt, secondsLeft, time.Now()))
		}()
	}
}
