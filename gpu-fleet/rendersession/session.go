// Package rendersession runs one avatar session: it registers the session's
// audio WebSocket endpoint, joins the LiveKit room, and paces the pipeline
// (playout -> render -> VP8 + Opus -> room) at 25 fps until the room says
// the session is over or its owner stops it. A worker runs many sessions in
// one process; each is independent and costs one pacing goroutine plus the
// room's and the WebSocket's own.
//
// A/V sync: each tick writes the video frame, then the Opus packets made
// from the very same 40 ms of audio, and stamps both with the tick's
// scheduled time. Receivers therefore play the audio with the frame that
// shows it; the remaining offset is the gap between the two writes (well
// under a millisecond, reported as Stats.MaxAVSkew): Opus encodes the
// playout's 16 kHz samples directly, with no resampler delay. The design
// target is +-20 ms.
//
// Speech events: "started" is emitted right after the first frame carrying
// an utterance's audio is written, "finished" right after the last one is
// written (or, after an interrupt, with the first frame at rest).
package rendersession

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"avatarsvc/gpu-fleet/agentstream"
	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/conversation"
	"avatarsvc/gpu-fleet/encode/opus"
	"avatarsvc/gpu-fleet/encode/vp8"
	"avatarsvc/gpu-fleet/playout"
	"avatarsvc/gpu-fleet/room"
)

// Config describes one session.
type Config struct {
	SessionID string
	// TokenHash is the SHA-256 of the session token (audiows.HashToken);
	// the session never sees the token itself.
	TokenHash [32]byte
	// Room says where to publish; its VideoWidth/VideoHeight are taken
	// from the renderer.
	Room room.Config
	// Renderer draws this session's avatar.
	Renderer Renderer
	// Audio is the process's WebSocket server that the session registers on.
	Audio *audiows.Server
	// VideoBitrateKbps: 0 uses the encoder's default.
	VideoBitrateKbps int
	// MaxBuffered bounds queued audio in samples (playout.DefaultMaxBuffered
	// when zero).
	MaxBuffered int
	// Conversation, when set, gives the avatar its own voice and ears in
	// the room (greeting, captions, replies; gpu-fleet/conversation). Its
	// Speaker and Captions are the session's own.
	Conversation *conversation.Config
	// ExpiryWarning is how long before Room.ExpiresAt the session warns
	// ws_uri's client and the room (DefaultExpiryWarning when zero;
	// negative: never).
	ExpiryWarning time.Duration
	// OnExpiring, when set, is told of the warning too (the worker
	// publishes the session.expiring webhook); it must not block.
	OnExpiring func(expiresAt time.Time, secondsLeft int)
	Logger     *slog.Logger
}

// DefaultExpiryWarning: a minute lets a caller wrap up, or extend.
const DefaultExpiryWarning = time.Minute

// ExpiringTopic is the room data topic of the session's expiry warning
// (the link page shows it).
const ExpiringTopic = "avatar.session"

// Session is one running avatar session.
type Session struct {
	id       string
	log      *slog.Logger
	buffer   *playout.Buffer
	endpoint *audiows.Endpoint
	agent    *agentstream.Receiver
	talk     *conversation.Conversation
	joined   atomic.Pointer[room.Room] // for the agent's RPCs, once joined
	room     *room.Room
	pipeline *Pipeline
	video    *vp8.Encoder
	audio    *opus.Encoder

	expiresAt  time.Time
	warnAt     time.Time     // zero: no warning
	warning    time.Duration // how long before expiresAt to warn; <= 0: never
	expires    bool          // it has an expiration (set once, read anywhere)
	onExpiring func(expiresAt time.Time, secondsLeft int)
	// extended tells run that the room has a later expiration (Extend).
	extended chan struct{}

	stopOnce sync.Once
	stop     chan struct{}
	done     chan struct{}
	reason   room.EndReason
	err      error
}

// Start registers the WebSocket endpoint, joins the room and starts the
// frame clock. ctx bounds the start only; use Stop (or Run) to end it.
func Start(ctx context.Context, cfg Config) (*Session, error) {
	if cfg.SessionID == "" || cfg.Renderer == nil || cfg.Audio == nil {
		return nil, errors.New("session: SessionID, Renderer and Audio are required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("session_id", cfg.SessionID)
	s := &Session{
		id:         cfg.SessionID,
		log:        log,
		buffer:     playout.New(cfg.MaxBuffered),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
		expiresAt:  cfg.Room.ExpiresAt,
		onExpiring: cfg.OnExpiring,
		warning:    cmp.Or(cfg.ExpiryWarning, DefaultExpiryWarning),
		expires:    !cfg.Room.ExpiresAt.IsZero(),
		extended:   make(chan struct{}, 1),
	}
	if s.warning > 0 && !s.expiresAt.IsZero() {
		s.warnAt = s.expiresAt.Add(-s.warning)
	}
	var err error
	if s.endpoint, err = cfg.Audio.Register(cfg.SessionID, cfg.TokenHash, s.buffer); err != nil {
		return nil, fmt.Errorf("session: register audio endpoint: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			s.release()
		}
	}()

	w, h := cfg.Renderer.Size()
	if s.video, err = vp8.NewEncoder(vp8.Config{Width: w, Height: h, BitrateKbps: cfg.VideoBitrateKbps}); err != nil {
		return nil, fmt.Errorf("session: video encoder: %w", err)
	}
	if s.audio, err = opus.NewEncoder(OpusInputRate, 1); err != nil {
		return nil, fmt.Errorf("session: audio encoder: %w", err)
	}
	// Speech also comes from a LiveKit voice agent in the room, into the
	// same playout buffer (gpu-fleet/agentstream).
	s.agent = agentstream.New(s.buffer, joinedRoom{&s.joined}, log)
	roomCfg := cfg.Room
	roomCfg.VideoWidth, roomCfg.VideoHeight = w, h
	roomCfg.Logger = log
	roomCfg.AgentAudio = s.agent
	if cfg.Conversation != nil {
		cc := *cfg.Conversation
		cc.Speaker, cc.Captions, cc.Log = s.buffer, joinedRoom{&s.joined}, log
		if s.talk, err = conversation.Start(cc); err != nil {
			return nil, err
		}
		roomCfg.Listener = s.talk
	}
	if s.room, err = room.Join(ctx, roomCfg); err != nil {
		return nil, err
	}
	s.joined.Store(s.room)
	s.pipeline, err = NewPipeline(PipelineConfig{
		Buffer:    s.buffer,
		Renderer:  cfg.Renderer,
		Video:     s.video,
		Audio:     s.audio,
		Publisher: s.room,
		Events:    sinks{s.endpoint, s.agent},
		Logger:    log,
	})
	if err != nil {
		s.room.Leave(room.Failed)
		return nil, err
	}
	ok = true
	go s.run()
	log.Info("session started", "width", w, "height", h)
	return s, nil
}

func (s *Session) run() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	pipelineDone := make(chan error, 1)
	go func() { pipelineDone <- s.pipeline.Run(ctx) }()

	var warn <-chan time.Time
	var warnTimer *time.Timer
	armWarning := func() {
		if warnTimer != nil {
			warnTimer.Stop()
		}
		warn = nil
		if !s.warnAt.IsZero() {
			warnTimer = time.NewTimer(max(0, time.Until(s.warnAt)))
			warn = warnTimer.C
		}
	}
	armWarning()
	defer func() {
		if warnTimer != nil {
			warnTimer.Stop()
		}
	}()
	var remind <-chan time.Time
	var reminders *time.Ticker
	defer func() {
		if reminders != nil {
			reminders.Stop()
		}
	}()
	reason := room.NotEnded
	for reason == room.NotEnded {
		select {
		case <-warn:
			warn = nil
			s.warnExpiring()
			// The room hears it again every noticeRepeat: people who join
			// later, or whose data path was not up yet, see the countdown.
			reminders = time.NewTicker(noticeRepeat)
			remind = reminders.C
		case <-remind:
			s.noticeRoom()
		case <-s.extended:
			// A later expiration: the warning is due again before it.
			if t, ok := s.room.ExtendedTo(); ok && t.After(s.expiresAt) {
				s.expiresAt = t
				if s.warning > 0 {
					s.warnAt = t.Add(-s.warning)
				}
				armWarning()
				if reminders != nil {
					reminders.Stop()
					remind = nil
				}
				s.log.Info("session extended", "expires_at", t.UTC().Format(time.RFC3339))
			}
		case <-s.room.Done():
			reason = s.room.Reason()
		case <-s.stop:
			reason = room.Stopped
		case err := <-pipelineDone:
			s.err = err
			reason = room.Failed
			pipelineDone <- nil
		}
	}
	cancel()
	<-pipelineDone

	s.reason = s.room.Leave(reason)
	stats := s.pipeline.Stats()
	s.log.Info("session ended", "end_reason", s.reason.String(), "err", s.err,
		"frames", stats.Frames, "late_frames", stats.LateFrames, "max_lateness", stats.MaxLateness,
		"resyncs", stats.Resyncs, "write_errors", stats.WriteErrors)
	s.release()
}

// Extend moves the session's expiration to t when t is later (the caller
// extended it: POST /v1/sessions/{id}/extend). The room ends it at the new
// time, and the expiry warning comes again before it. Safe from any
// goroutine; the worker calls it when a heartbeat reads a later expiration.
func (s *Session) Extend(t time.Time) {
	if !s.expires || !s.room.ExtendTo(t) {
		return // nothing to move: no expiration, or not later than the last
	}
	select {
	case s.extended <- struct{}{}:
	default: // run has a signal pending; it reads the latest time
	}
}

// warnExpiring tells ws_uri's client and everyone in the room that the
// session is about to reach its expiration.
func (s *Session) warnExpiring() {
	w := s.expiring()
	s.endpoint.Warn(w)
	s.noticeRoom()
	if s.onExpiring != nil {
		s.onExpiring(s.expiresAt, w.SecondsLeft)
	}
	s.log.Info("session expiring", "expires_at", w.ExpiresAt, "seconds_left", w.SecondsLeft)
}

// noticeRepeat is how often the room hears the expiry warning again.
const noticeRepeat = 10 * time.Second

// expiring is the warning as of now.
func (s *Session) expiring() audiows.SessionExpiring {
	return audiows.SessionExpiring{
		Type:        audiows.TypeSessionExpiring,
		ExpiresAt:   s.expiresAt.UTC().Format(time.RFC3339),
		SecondsLeft: max(0, int(time.Until(s.expiresAt).Round(time.Second).Seconds())),
	}
}

// noticeRoom sends the warning into the room (a reliable data packet on
// ExpiringTopic), for the link page's countdown.
func (s *Session) noticeRoom() {
	w := s.expiring()
	payload, _ := json.Marshal(w)
	if err := s.room.SendData(ExpiringTopic, payload); err != nil {
		s.log.Warn("expiry warning into the room", "err", err)
	}
}

// sinks hands each speech event to both speech sources: ws_uri's client
// sees every event; the in-room agent's receiver acts only on its own
// segments.
type sinks []EventSink

func (ss sinks) Emit(ev playout.Event) {
	for _, s := range ss {
		s.Emit(ev)
	}
}

// joinedRoom reaches the room once it is joined: the agent receiver's
// RPCs and the conversation's captions may start before Join returns.
// Captions before that are dropped (nobody could read them yet).
type joinedRoom struct{ room *atomic.Pointer[room.Room] }

func (j joinedRoom) CallRPC(dest, method, payload string) error {
	r := j.room.Load()
	if r == nil {
		return errors.New("session: not in the room yet")
	}
	return r.CallRPC(dest, method, payload)
}

func (j joinedRoom) Caption(cp room.Caption) {
	if r := j.room.Load(); r != nil {
		r.Caption(cp)
	}
}

func (j joinedRoom) AudioTrackSID() string {
	if r := j.room.Load(); r != nil {
		return r.AudioTrackSID()
	}
	return ""
}

// release frees what Start acquired, whichever step it reached.
func (s *Session) release() {
	if s.talk != nil {
		s.talk.Close()
	}
	if s.agent != nil {
		s.agent.Close()
	}
	if s.endpoint != nil {
		reason := s.reason
		if reason == room.NotEnded {
			reason = room.Failed
		}
		s.endpoint.Close(reason.String())
	}
	if s.video != nil {
		s.video.Close()
	}
	if s.audio != nil {
		s.audio.Close()
	}
}

// Stop ends the session (EndReason Stopped unless it already ended for
// another reason). It does not wait; use Wait.
func (s *Session) Stop() { s.stopOnce.Do(func() { close(s.stop) }) }

// Done is closed when the session has ended and released everything.
func (s *Session) Done() <-chan struct{} { return s.done }

// Wait blocks until the session ends and returns why; err is set when the
// pipeline failed.
func (s *Session) Wait() (room.EndReason, error) {
	<-s.done
	return s.reason, s.err
}

// Stats returns the pipeline's counters.
func (s *Session) Stats() Stats { return s.pipeline.Stats() }

// Latencies returns the pipeline's recent audio-in -> encoded-frame
// latencies (see Pipeline.Latencies).
func (s *Session) Latencies() []time.Duration { return s.pipeline.Latencies() }

// MaxSubscribers is the most other participants in the room at once.
func (s *Session) MaxSubscribers() int { return s.room.MaxOthers() }

// Buffer is the session's playout buffer (audio also arrives here from
// sources other than the WebSocket, such as tests and benchmarks).
func (s *Session) Buffer() *playout.Buffer { return s.buffer }

// Run starts a session and waits for it; cancelling ctx stops it.
func Run(ctx context.Context, cfg Config) (room.EndReason, error) {
	s, err := Start(ctx, cfg)
	if err != nil {
		return room.NotEnded, err
	}
	select {
	case <-ctx.Done():
		s.Stop()
	case <-s.done:
	}
	return s.Wait()
}
