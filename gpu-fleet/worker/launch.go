package worker

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/avatar"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/rendersession"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/shared/domain"
)

// AvatarLoader fetches, decodes and face-checks a session's avatar
// (*avatarsource.Loader).
type AvatarLoader interface {
	Load(ctx context.Context, src domain.AvatarSource, width, height int) (*avatar.Prepared, error)
}

// RoomGuard decides whether a caller's room URL may be dialled
// (netguard.Policy): a hostile "LiveKit server" must not aim the renderer at
// internal services.
type RoomGuard interface {
	CheckURL(ctx context.Context, raw string) error
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
	Log                      *slog.Logger
}

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
	s, err := rendersession.Start(ctx, rendersession.Config{
		SessionID: sess.ID,
		TokenHash: tokenHash,
		Room: room.Config{
			URL: sess.Room.URL, Token: sess.Room.Token, ExpiresAt: sess.Expiration,
			GracePeriod: l.GracePeriod, JoinTimeout: l.JoinTimeout,
		},
		Renderer: render.NewCPURenderer(prepared),
		Audio:    l.Audio,
		Logger:   log,
	})
	if err != nil {
		return nil, &EndReasonError{Reason: domain.ReasonRoomUnreachable, Err: err}
	}
	return &roomStream{s: s}, nil
}

// roomStream adapts a rendersession.Session to Stream.
type roomStream struct{ s *rendersession.Session }

func (r *roomStream) Done() <-chan struct{} { return r.s.Done() }
func (r *roomStream) Stop()                 { r.s.Stop() }

func (r *roomStream) EndReason() string {
	reason, _ := r.s.Wait()
	return endReasonOf(reason)
}

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
