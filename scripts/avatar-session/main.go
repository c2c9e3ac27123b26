// Command avatar-session runs one avatar session by hand: it joins a LiveKit
// room as the avatar, serves the session's ws_uri, and lip-syncs whatever
// audio arrives there until the room empties, the session expires or it is
// interrupted (Ctrl-C).
//
// Locally, against the livekit-server of the local stack:
//
//	go run ./scripts/avatar-session -url ws://127.0.0.1:7880 \
//	    -api-key devkey -api-secret <secret> -room demo \
//	    -avatar gpu-fleet/testfiles/images/face-astronaut.png
//
// It prints the ws_uri and a speak command that streams a WAV file to it.
// Every flag can also be set from the environment variable named in its
// help text.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/rendersession"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/livekit"
)

type options struct {
	url, token                 string
	apiKey, apiSecret, room    string
	avatarPath, aspect, listen string
	sessionID, sessionToken    string
	grace, joinTimeout, expire time.Duration
}

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "avatar-session:", err)
		os.Exit(1)
	}
}

func env(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func parse(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("avatar-session", flag.ContinueOnError)
	fs.StringVar(&o.url, "url", env("LIVEKIT_URL", ""), "LiveKit server URL, ws:// or wss:// (LIVEKIT_URL)")
	fs.StringVar(&o.token, "token", env("AVATAR_ROOM_TOKEN", ""), "join token for the avatar (AVATAR_ROOM_TOKEN); or give -api-key, -api-secret and -room")
	fs.StringVar(&o.apiKey, "api-key", env("LIVEKIT_API_KEY", ""), "API key to mint a token (LIVEKIT_API_KEY)")
	fs.StringVar(&o.apiSecret, "api-secret", env("LIVEKIT_API_SECRET", ""), "API secret to mint a token (LIVEKIT_API_SECRET)")
	fs.StringVar(&o.room, "room", env("AVATAR_ROOM", ""), "room name to mint a token for (AVATAR_ROOM)")
	fs.StringVar(&o.avatarPath, "avatar", env("AVATAR_IMAGE", ""), "avatar image file, PNG or JPEG with one frontal face (AVATAR_IMAGE)")
	fs.StringVar(&o.aspect, "aspect", env("AVATAR_ASPECT", "1:1"), "aspect ratio: 1:1 (512x512), 4:3 (640x480) or 3:4 (480x640) (AVATAR_ASPECT)")
	fs.StringVar(&o.listen, "listen", env("AVATAR_LISTEN", "127.0.0.1:8765"), "address of the ws_uri server (AVATAR_LISTEN)")
	fs.StringVar(&o.sessionID, "session-id", env("AVATAR_SESSION_ID", ""), "session id; random when empty (AVATAR_SESSION_ID)")
	fs.StringVar(&o.sessionToken, "session-token", env("AVATAR_SESSION_TOKEN", ""), "session token clients present; random when empty (AVATAR_SESSION_TOKEN)")
	fs.DurationVar(&o.grace, "grace", room.DefaultGracePeriod, "how long the room may stay empty after the last viewer left")
	fs.DurationVar(&o.joinTimeout, "join-timeout", room.DefaultJoinTimeout, "how long to wait for the first viewer")
	fs.DurationVar(&o.expire, "expire-in", 0, "end the session after this long (0: never)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.url == "" {
		return o, errors.New("-url is required")
	}
	if o.token == "" && (o.apiKey == "" || o.apiSecret == "" || o.room == "") {
		return o, errors.New("give -token, or -api-key, -api-secret and -room to mint one")
	}
	if o.avatarPath == "" {
		return o, errors.New("-avatar is required")
	}
	if o.sessionID == "" {
		o.sessionID = "sess_" + randomHex(8)
	}
	if o.sessionToken == "" {
		o.sessionToken = randomHex(16) // 128 bits
	}
	return o, nil
}

func loadRenderer(path, aspect string) (*render.CPURenderer, error) {
	w, h, err := render.Dimensions(render.AspectRatio(aspect))
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, err := avatarimage.Decode(f, avatarimage.MaxImageBytes)
	if err != nil {
		return nil, fmt.Errorf("avatar %s: %w", path, err)
	}
	av, err := avatarimage.Prepare(img, w, h)
	if err != nil {
		return nil, fmt.Errorf("avatar %s: %w", path, err)
	}
	return render.NewCPURenderer(av), nil
}

func run(ctx context.Context, args []string) error {
	o, err := parse(args)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	renderer, err := loadRenderer(o.avatarPath, o.aspect)
	if err != nil {
		return err
	}
	token := o.token
	if token == "" {
		if token, err = livekit.JoinToken(o.apiKey, o.apiSecret, o.room, room.AgentIdentity, 24*time.Hour); err != nil {
			return err
		}
	}

	audioServer := audiows.NewServer(log, audiows.Limits{})
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	httpServer := &http.Server{Handler: audioServer, ReadHeaderTimeout: 10 * time.Second}
	go httpServer.Serve(ln)
	defer httpServer.Close()

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	var expires time.Time
	if o.expire > 0 {
		expires = time.Now().Add(o.expire)
	}
	s, err := rendersession.Start(ctx, rendersession.Config{
		SessionID: o.sessionID,
		TokenHash: audiows.HashToken(o.sessionToken),
		Room: room.Config{
			URL: o.url, Token: token,
			GracePeriod: o.grace, JoinTimeout: o.joinTimeout, ExpiresAt: expires,
		},
		Renderer: renderer,
		Audio:    audioServer,
		Logger:   log,
	})
	if err != nil {
		return err
	}
	wsURI := fmt.Sprintf("ws://%s/ws/%s", ln.Addr(), o.sessionID)
	fmt.Printf("ws_uri:        %s\nsession_id:    %s\nsession_token: %s\nagent_identity: %s\n\n",
		wsURI, o.sessionID, o.sessionToken, room.AgentIdentity)
	fmt.Printf("send speech:   go run ./scripts/speak -ws %s -session-id %s -session-token %s -wav gpu-fleet/testfiles/audio/speech-16k.wav\n\n",
		wsURI, o.sessionID, o.sessionToken)

	select {
	case <-ctx.Done():
		s.Stop()
	case <-s.Done():
	}
	reason, err := s.Wait()
	stats := s.Stats()
	fmt.Printf("session ended: %s (frames %d, late %d, max lateness %v)\n", reason, stats.Frames, stats.LateFrames, stats.MaxLateness)
	return err
}
