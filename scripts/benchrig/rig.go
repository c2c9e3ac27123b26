// Package benchrig is what the benchmark commands run renderer sessions on.
package benchrig

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/conversation"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/rendersession"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/livekit"
)

// Rig is a local livekit-server and one ws_uri listener, as a worker has.
type Rig struct {
	LiveKit *localstack.LiveKit
	Audio   *audiows.Server
	// WSBase is the listener's ws:// address; a session's ws_uri is
	// WSBase + "/ws/" + its id.
	WSBase string
	log    *slog.Logger
	stops  []func()
}

// Start starts livekit-server and the ws_uri listener.
func Start(ctx context.Context) (*Rig, error) {
	r := &Rig{log: slog.New(slog.NewJSONHandler(io.Discard, nil))}
	logDir, err := os.MkdirTemp("", "roomtest-rig-")
	if err != nil {
		return nil, err
	}
	r.stops = append(r.stops, func() { os.RemoveAll(logDir) })
	if r.LiveKit, err = localstack.StartLiveKit(ctx, localstack.Options{LogDir: logDir}); err != nil {
		r.Close()
		return nil, err
	}
	r.stops = append(r.stops, func() { r.LiveKit.Stop() })
	r.Audio = audiows.NewServer(r.log, audiows.Limits{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.Close()
		return nil, err
	}
	hs := &http.Server{Handler: r.Audio, ReadHeaderTimeout: 5 * time.Second}
	go hs.Serve(ln)
	r.stops = append(r.stops, func() { hs.Close() })
	r.WSBase = "ws://" + ln.Addr().String()
	return r, nil
}

// Close stops what Start started, newest first.
func (r *Rig) Close() {
	for i := len(r.stops) - 1; i >= 0; i-- {
		r.stops[i]()
	}
	r.stops = nil
}

// Session starts a renderer session for av in roomName, its ws_uri token
// "tok", with conv as its own conversation (nil for none). Stop it with
// Stop and Wait.
func (r *Rig) Session(ctx context.Context, id, roomName string, av *avatarimage.Prepared, conv *conversation.Config) (*rendersession.Session, error) {
	token, err := livekit.JoinToken(r.LiveKit.APIKey, r.LiveKit.APISecret, roomName, room.AgentIdentity, time.Hour)
	if err != nil {
		return nil, err
	}
	return rendersession.Start(ctx, rendersession.Config{
		SessionID: id, TokenHash: audiows.HashToken("tok"),
		Room:     room.Config{URL: r.LiveKit.URL, Token: token},
		Renderer: render.NewCPURenderer(av), Audio: r.Audio, Logger: r.log, Conversation: conv,
	})
}

// Viewer joins roomName as identity, a viewer of av that has seen the
// avatar's video start.
func (r *Rig) Viewer(t roomtest.T, roomName, identity string, av *avatarimage.Prepared) *roomtest.Viewer {
	t.Helper()
	token, err := livekit.JoinToken(r.LiveKit.APIKey, r.LiveKit.APISecret, roomName, identity, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return roomtest.JoinViewer(t, r.LiveKit.URL, token, av)
}
