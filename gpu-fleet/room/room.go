// Package room joins a LiveKit room as the avatar, publishes its video (VP8)
// and audio (Opus) tracks, and decides when the session should end: every
// other participant left, nobody came, the session expired, the room was
// closed, or the connection was lost for good.
package room

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/livekit/protocol/livekit"
	protologger "github.com/livekit/protocol/logger"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/pion/rtcp"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	lkapi "avatarsvc/shared/livekit"
)

// AgentIdentity is the avatar's participant identity in every room. The API
// returns it as agent_identity so clients know whose tracks are the avatar.
const AgentIdentity = lkapi.AvatarIdentity

const (
	// VideoSampleDuration is one video frame (25 fps).
	VideoSampleDuration = 40 * time.Millisecond
	// AudioSampleDuration is one Opus packet.
	AudioSampleDuration = 20 * time.Millisecond

	DefaultGracePeriod = 10 * time.Second
	DefaultJoinTimeout = 60 * time.Second

	// presenceInterval is how often the room's participant list is checked.
	// The list, not the SDK's connect/disconnect callbacks, is the source of
	// truth: the SDK fires those callbacks on separate goroutines, so their
	// order is not guaranteed.
	presenceInterval = 250 * time.Millisecond
)

// AgentAudio is the avatar side of LiveKit Agents' avatar protocol
// (*agentstream.Receiver): Open takes a stream's place in the order of
// speech (or refuses it) and returns play, which reads it.
type AgentAudio interface {
	Open(sender string, attrs map[string]string) (play func(stream io.Reader) error, err error)
	Clear(caller string)
}

// Config says which room to join and when to leave it.
type Config struct {
	URL   string // ws:// or wss:// address of the LiveKit server
	Token string // join token whose identity should be AgentIdentity

	// VideoWidth and VideoHeight are announced with the video track.
	VideoWidth, VideoHeight int

	// GracePeriod: how long the room may stay empty after the last other
	// participant left before the session ends (DefaultGracePeriod).
	GracePeriod time.Duration
	// JoinTimeout: how long to wait for the first other participant
	// (DefaultJoinTimeout).
	JoinTimeout time.Duration
	// ExpiresAt ends the session when it passes; zero means never.
	ExpiresAt time.Time
	// PeopleOnly: only people (standard and SIP participants) keep the
	// session alive and count as joined, not agents: in rooms the service
	// created the voice agent comes with the avatar, and a session nobody
	// came to must end (JoinTimeout) without billing. OnFirstPerson, when
	// set, is called once, on its own goroutine, when the first person is
	// seen.
	PeopleOnly    bool
	OnFirstPerson func(at time.Time)
	// AgentAudio, when set, receives speech from a LiveKit Agents voice
	// agent in the room (byte streams on agentstream.Topic, and the
	// lk.clear_buffer RPC); see gpu-fleet/agentstream. Only the agent the
	// session follows is heard: a participant of kind agent whose identity
	// is Token's lk.publish_on_behalf attribute, or any participant of kind
	// agent when Token names none (see agentGate).
	AgentAudio AgentAudio
	// Listener, when set, hears the people in the room: who joins, and
	// their microphones (see Listener). Without it the avatar subscribes to
	// nothing.
	Listener Listener
	// Guard, when set, is the address policy for every connection made for
	// the room: the signal WebSocket and its /rtc/validate fallback (and
	// their redirects and reconnects), ICE servers and ICE candidates (see
	// guard.go). The worker sets it; without it the SDK dials as it likes.
	Guard Guard

	Logger *slog.Logger
}

// Room is the avatar's presence in one LiveKit room.
type Room struct {
	log   *slog.Logger
	lk    *lksdk.Room
	video *lksdk.LocalTrack
	audio *lksdk.LocalTrack

	presence   *presence
	cfg        Config
	personSeen bool // OnFirstPerson was called (watch's own)

	relay *signalRelay // with Config.Guard: the SDK's way to the server

	// maxOthers is the most participants counted present at once (see
	// others): the session's subscribers, for its quality figures.
	maxOthers atomic.Int64

	// extendedTo is a later expiration (ExtendTo), applied by the watcher.
	extendedTo atomic.Pointer[time.Time]

	// keyframeWanted is set when a receiver asks for a keyframe (PLI/FIR),
	// for example a viewer that just subscribed.
	keyframeWanted atomic.Bool

	mu           sync.Mutex
	reason       EndReason
	reconnecting bool
	leaving      bool // we are disconnecting on purpose
	disconnected bool // the SDK already tore the connection down

	captions chan Caption // to sendCaptions

	done    chan struct{} // closed once an end reason is set
	stopped chan struct{} // closed when the watcher returns
}

// Join connects to the room, publishes the avatar's tracks and starts
// watching who is present. The caller must call Leave.
func Join(ctx context.Context, cfg Config) (*Room, error) {
	r, err := newRoom(cfg)
	if err != nil {
		return nil, err
	}
	lk := lksdk.NewRoom(r.callbacks())
	lk.SetLogger(protologger.LogRLogger(logr.FromSlogHandler(r.log.Handler())))
	if a := r.cfg.AgentAudio; a != nil {
		// Registered before joining: an agent may start as soon as it sees
		// the avatar's video. Only the agent the session follows is heard
		// (agentaudio.go).
		if err := registerAgentAudio(lk, a, r.cfg.Token, r.log); err != nil {
			return nil, fmt.Errorf("room: agent audio: %w", err)
		}
	}
	joinURL := r.cfg.URL
	if r.cfg.Guard != nil {
		relay, err := startSignalRelay(r.cfg.URL, r.cfg.Guard, r.log)
		if err != nil {
			return nil, fmt.Errorf("room: %w", err)
		}
		r.relay, joinURL = relay, relay.URL()
	}
	joinedOK := false
	defer func() {
		if !joinedOK {
			r.relay.Close()
		}
	}()
	if err := connect(ctx, lk, joinURL, r.cfg.Token); err != nil {
		return nil, err
	}
	r.lk = lk
	if err := r.publish(r.cfg); err != nil {
		r.mu.Lock()
		r.leaving = true
		r.mu.Unlock()
		lk.Disconnect()
		return nil, err
	}
	r.log.Info("joined room", "room", lk.Name(), "identity", lk.LocalParticipant.Identity())

	r.presence = newPresence(time.Now(), r.cfg.GracePeriod, r.cfg.JoinTimeout, r.cfg.ExpiresAt)
	go r.watch()
	go r.sendCaptions()
	if r.cfg.Listener != nil {
		r.listenToPresent(r.cfg.Listener)
	}
	joinedOK = true
	return r, nil
}

// newRoom checks cfg and fills in its defaults.
func newRoom(cfg Config) (*Room, error) {
	if cfg.URL == "" || cfg.Token == "" {
		return nil, errors.New("room: URL and Token are required")
	}
	if cfg.GracePeriod <= 0 {
		cfg.GracePeriod = DefaultGracePeriod
	}
	if cfg.JoinTimeout <= 0 {
		cfg.JoinTimeout = DefaultJoinTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Room{
		log:      log,
		cfg:      cfg,
		done:     make(chan struct{}),
		stopped:  make(chan struct{}),
		captions: make(chan Caption, 64),
	}, nil
}

// callbacks are the SDK's room events: reconnects pause the presence
// checks, a final disconnect ends the session, the rest is logged; with a
// Listener, people and their microphones go to it (listen.go).
func (r *Room) callbacks() *lksdk.RoomCallback {
	cb := lksdk.NewRoomCallback()
	cb.OnReconnecting = func() {
		r.mu.Lock()
		r.reconnecting = true
		r.mu.Unlock()
		r.log.Warn("room connection lost, reconnecting")
	}
	cb.OnReconnected = func() {
		r.mu.Lock()
		r.reconnecting = false
		r.mu.Unlock()
		r.log.Info("room reconnected, publishing continues")
	}
	cb.OnDisconnectedWithReason = func(reason lksdk.DisconnectionReason) {
		r.mu.Lock()
		leaving := r.leaving
		r.disconnected = true
		r.mu.Unlock()
		if leaving {
			return
		}
		end := endReasonFor(reason)
		r.log.Warn("room disconnected", "reason", string(reason), "end_reason", end.String())
		r.end(end)
	}
	cb.OnParticipantConnected = func(p *lksdk.RemoteParticipant) {
		r.log.Info("participant joined", "identity", p.Identity(), "kind", int(p.Kind()))
	}
	cb.OnParticipantDisconnected = func(p *lksdk.RemoteParticipant) {
		r.log.Info("participant left", "identity", p.Identity(), "reason", p.DisconnectReason().String())
	}
	cb.OnLocalTrackUnpublished = func(pub *lksdk.LocalTrackPublication, _ *lksdk.LocalParticipant) {
		r.log.Info("track unpublished", "track_sid", pub.SID(), "kind", string(pub.Kind()))
	}
	cb.OnLocalTrackPublished = func(pub *lksdk.LocalTrackPublication, _ *lksdk.LocalParticipant) {
		r.log.Info("track published", "track_sid", pub.SID(), "kind", string(pub.Kind()))
	}
	if r.cfg.Listener != nil {
		r.listen(cb, r.cfg.Listener)
	}
	return cb
}

// connect joins lk to the room; ctx bounds the wait. The SDK's join takes
// no context (it has its own timeouts), so a join that completes after ctx
// gave up is disconnected at once.
func connect(ctx context.Context, lk *lksdk.Room, url, token string) error {
	joined := make(chan error, 1)
	go func() {
		joined <- lk.JoinWithToken(url, token, lksdk.WithAutoSubscribe(false))
	}()
	select {
	case err := <-joined:
		if err != nil {
			return fmt.Errorf("room: join: %w", err)
		}
		return nil
	case <-ctx.Done():
		go func() {
			if err := <-joined; err == nil {
				lk.Disconnect()
			}
		}()
		return fmt.Errorf("room: join: %w", ctx.Err())
	}
}

func (r *Room) publish(cfg Config) error {
	video, err := lksdk.NewLocalSampleTrack(webrtc.RTPCodecCapability{
		MimeType:  webrtc.MimeTypeVP8,
		ClockRate: 90000,
	}, lksdk.WithRTCPHandler(func(p rtcp.Packet) {
		switch p.(type) {
		case *rtcp.PictureLossIndication, *rtcp.FullIntraRequest:
			r.keyframeWanted.Store(true)
		}
	}))
	if err != nil {
		return fmt.Errorf("room: video track: %w", err)
	}
	if _, err := r.lk.LocalParticipant.PublishTrack(video, &lksdk.TrackPublicationOptions{
		Name:        "avatar-video",
		Source:      livekit.TrackSource_CAMERA,
		VideoWidth:  cfg.VideoWidth,
		VideoHeight: cfg.VideoHeight,
	}); err != nil {
		return fmt.Errorf("room: publish video: %w", err)
	}
	audio, err := lksdk.NewLocalSampleTrack(webrtc.RTPCodecCapability{
		MimeType:  webrtc.MimeTypeOpus,
		ClockRate: 48000,
		Channels:  2, // Opus in WebRTC always signals 2 channels; the stream is mono
	})
	if err != nil {
		return fmt.Errorf("room: audio track: %w", err)
	}
	if _, err := r.lk.LocalParticipant.PublishTrack(audio, &lksdk.TrackPublicationOptions{
		Name:   "avatar-audio",
		Source: livekit.TrackSource_MICROPHONE,
		// The avatar's silence is real silence; DTX would only save bytes
		// at the cost of receivers' jitter buffers resetting between words.
		DisableDTX: true,
	}); err != nil {
		return fmt.Errorf("room: publish audio: %w", err)
	}
	r.video, r.audio = video, audio
	return nil
}

// WriteVideo sends one encoded VP8 frame scheduled at at. The RTP timestamp
// follows at, so frames written late still carry their place in time.
func (r *Room) WriteVideo(frame []byte, at time.Time) error {
	return r.video.WriteSample(media.Sample{Data: frame, Duration: VideoSampleDuration, Timestamp: at}, nil)
}

// WriteAudio sends one 20 ms Opus packet scheduled at at.
func (r *Room) WriteAudio(packet []byte, at time.Time) error {
	return r.audio.WriteSample(media.Sample{Data: packet, Duration: AudioSampleDuration, Timestamp: at}, nil)
}

// endReasonFor maps the SDK's final disconnect reason. The SDK reports
// Failed after its reconnect attempts ran out; the other reasons come from a
// leave the server sent on purpose. It folds ROOM_DELETED and
// SERVER_SHUTDOWN into OtherReason, so those count as the room closing.
func endReasonFor(reason lksdk.DisconnectionReason) EndReason {
	switch reason {
	case lksdk.RoomClosed, lksdk.OtherReason:
		return RoomClosed
	case lksdk.ParticipantRemoved:
		return Removed
	}
	return RoomError
}

// MaxOthers is the most other participants (people and agents, not
// recorders) that were in the room at once.
func (r *Room) MaxOthers() int { return int(r.maxOthers.Load()) }

// KeyframeRequested reports (once) that a receiver asked for a keyframe.
func (r *Room) KeyframeRequested() bool { return r.keyframeWanted.Swap(false) }

// Done is closed when the session should end; Reason says why.
func (r *Room) Done() <-chan struct{} { return r.done }

// Reason returns why the session ended, or NotEnded.
func (r *Room) Reason() EndReason {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reason
}

// SendData sends payload to everyone in the room as a reliable data
// packet on topic (the session's notices, e.g. its expiry warning).
func (r *Room) SendData(topic string, payload []byte) error {
	return r.lk.LocalParticipant.PublishDataPacket(lksdk.UserData(payload),
		lksdk.WithDataPublishTopic(topic), lksdk.WithDataPublishReliable(true))
}

// CallRPC performs an RPC on a participant (agentstream's playback events).
func (r *Room) CallRPC(destination, method, payload string) error {
	_, err := r.lk.LocalParticipant.PerformRpc(lksdk.PerformRpcParams{
		DestinationIdentity: destination, Method: method, Payload: payload,
	})
	return err
}

// Leave ends the session for reason (unless it already ended for another
// one), disconnects cleanly and returns the final reason.
func (r *Room) Leave(reason EndReason) EndReason {
	r.end(reason)
	r.mu.Lock()
	alreadyLeaving := r.leaving || r.disconnected
	r.leaving = true
	final := r.reason
	r.mu.Unlock()
	<-r.stopped
	if !alreadyLeaving {
		r.lk.Disconnect()
		r.log.Info("left room", "end_reason", final.String())
	}
	r.relay.Close()
	return final
}

func (r *Room) end(reason EndReason) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reason != NotEnded {
		return
	}
	r.reason = reason
	close(r.done)
}

func (r *Room) watch() {
	defer close(r.stopped)
	tick := time.NewTicker(presenceInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.done:
			return
		case now := <-tick.C:
			r.mu.Lock()
			reconnecting := r.reconnecting || r.lk.ConnectionState() == lksdk.ConnectionStateReconnecting
			r.mu.Unlock()
			others := r.others()
			if int64(others) > r.maxOthers.Load() {
				r.maxOthers.Store(int64(others))
			}
			if others > 0 && !r.personSeen && r.cfg.OnFirstPerson != nil {
				r.personSeen = true
				go r.cfg.OnFirstPerson(now)
			}
			if t := r.extendedTo.Load(); t != nil && t.After(r.presence.expiresAt) {
				r.presence.expiresAt = *t
			}
			if reason := r.presence.observe(now, others, reconnecting); reason != NotEnded {
				r.log.Info("ending session", "end_reason", reason.String())
				r.end(reason)
				return
			}
		}
	}
}

// ExtendTo moves the session's expiration later (POST .../extend) and
// reports whether it did; an earlier or equal time changes nothing. Safe
// from any goroutine.
func (r *Room) ExtendTo(t time.Time) bool {
	for {
		old := r.extendedTo.Load()
		if old != nil && !t.After(*old) {
			return false
		}
		if r.extendedTo.CompareAndSwap(old, &t) {
			return true
		}
	}
}

// ExtendedTo is the latest expiration ExtendTo set, if any.
func (r *Room) ExtendedTo() (time.Time, bool) {
	if t := r.extendedTo.Load(); t != nil {
		return *t, true
	}
	return time.Time{}, false
}

// others counts the participants a viewer could be: recorders (egress)
// and the avatar's own identity do not keep a session alive, nor, with
// PeopleOnly, anyone who is not a person.
func (r *Room) others() int {
	n := 0
	for _, p := range r.lk.GetRemoteParticipants() {
		if p.Identity() == AgentIdentity || p.Kind() == lksdk.ParticipantEgress {
			continue
		}
		if r.cfg.PeopleOnly && p.Kind() != lksdk.ParticipantStandard && p.Kind() != lksdk.ParticipantSIP {
			continue
		}
		n++
	}
	return n
}
