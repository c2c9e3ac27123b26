// Package app wires the HTTP service on top of shared/backend: the API's
// services (avatars, agents, links, rooms it hosts, accounts), the reaper and
// the HTTP handler. Lambda functions, the local server, the admin tool and
// the tests all build it the same way; the renderer worker uses
// shared/backend alone.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"avatarsvc/shared/accounts"
	"avatarsvc/shared/agents"
	"avatarsvc/shared/auth"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/backend"
	"avatarsvc/shared/httpapi"
	"avatarsvc/shared/links"
	"avatarsvc/shared/ratelimit"
	"avatarsvc/shared/reaper"
	"avatarsvc/shared/roomhost"
	"avatarsvc/shared/webhooks"
)

// Config is the backend's configuration plus the API's own settings.
type Config struct {
	backend.Config
	// MediaBaseURL serves the media bucket's objects to browsers and
	// callers (MEDIA_BASE_URL: a CloudFront distribution in AWS).
	MediaBaseURL string
	// LinkPageURL is the link page; a link's url is LinkPageURL#<link_id>.
	LinkPageURL string
	// DefaultAvatar is rooms/initiate's avatar when none is given.
	DefaultAvatar string
	// Moderation of avatar uploads (MODERATION=off turns it off); FFmpeg
	// is the binary that reads video uploads (FFMPEG_PATH).
	Moderation bool
	FFmpeg     string
	// NewModerator makes the upload checks (shared/avatarimage's face
	// detector). It is set in code by what uploads (the avatars-upload
	// function, the local server, the admin tool), so the detector and its
	// cascades are linked only into those binaries; without it, uploads
	// under moderation are refused rather than unchecked.
	NewModerator func(ffmpeg string) avatars.Moderator
}

// ConfigFromEnv reads Config; the backend's names, MEDIA_BASE_URL and
// LINK_PAGE_URL must be set.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	b, err := backend.ConfigFromEnv(getenv)
	c := Config{
		Config:        b,
		MediaBaseURL:  getenv("MEDIA_BASE_URL"),
		LinkPageURL:   getenv("LINK_PAGE_URL"),
		DefaultAvatar: getenv("DEFAULT_AVATAR"),
		Moderation:    getenv("MODERATION") != "off",
		FFmpeg:        getenv("FFMPEG_PATH"),
	}
	if err != nil {
		return c, err
	}
	for name, v := range map[string]string{"MEDIA_BASE_URL": c.MediaBaseURL, "LINK_PAGE_URL": c.LinkPageURL} {
		if v == "" {
			return c, fmt.Errorf("environment variable %s is not set", name)
		}
	}
	return c, nil
}

// Env renders c as environment variables, for child processes.
func (c Config) Env() []string {
	return append(c.Config.Env(),
		"MEDIA_BASE_URL="+c.MediaBaseURL, "LINK_PAGE_URL="+c.LinkPageURL, "DEFAULT_AVATAR="+c.DefaultAvatar,
		"MODERATION="+map[bool]string{true: "on", false: "off"}[c.Moderation], "FFMPEG_PATH="+c.FFmpeg)
}

// App is the wired service: the backend and the API around it.
type App struct {
	*backend.Backend
	Config   Config
	Avatars  *avatars.Service
	Agents   *agents.Service
	Links    *links.Service
	Accounts *accounts.Service
	Reaper   *reaper.Reaper
	// Deliverer sends the queued webhook deliveries (the webhook-deliver
	// function in AWS; a goroutine in the local stack).
	Deliverer *webhooks.Deliverer
	Deps      httpapi.Deps
}

// New wires an App. now is the clock; log receives JSON logs.
func New(ctx context.Context, c Config, now func() time.Time, log *slog.Logger) (*App, error) {
	b, err := backend.New(ctx, c.Config, now, log)
	if err != nil {
		return nil, err
	}
	var moderator avatars.Moderator
	switch {
	case c.Moderation && c.NewModerator != nil:
		moderator = c.NewModerator(c.FFmpeg)
	case c.Moderation:
		moderator = avatars.NoModerator{}
	}
	st, svc := b.Store, b.Sessions
	avatarSvc := avatars.New(st, b.Bucket, moderator, c.MediaBaseURL, now, log)
	svc.UseAvatars(avatarSvc)
	agentSvc := agents.New(st, avatarSvc, now)
	var roomHost roomhost.RoomHost
	var livekitWebhooks httpapi.WebhookVerifier
	if b.Rooms != nil { // a nil *livekit.Client in an interface would not read as nil
		roomHost, livekitWebhooks = b.Rooms, b.Rooms
	}
	hosting := roomhost.New(svc, agentSvc, avatarSvc, roomHost, c.DefaultAvatar, log)
	linkSvc := links.New(st, agentSvc, avatarSvc, svc, hosting, c.LinkPageURL, now)
	linkSvc.UseEvents(b.Events)
	return &App{
		Backend: b, Config: c, Avatars: avatarSvc, Agents: agentSvc, Links: linkSvc,
		Accounts: accounts.New(st, now), Reaper: reaper.New(st, svc, reaper.DefaultPolicy, now, log),
		Deliverer: webhooks.NewDeliverer(st, b.WebhookQueue, now, log, webhooks.DelivererOptions{Policy: c.WebhookPolicy}),
		Deps: httpapi.Deps{
			Sessions: svc, Avatars: avatarSvc, Agents: agentSvc, Links: linkSvc,
			RoomHost: hosting, LiveKitWebhooks: livekitWebhooks,
			Webhooks:      webhooks.NewService(st, b.WebhookQueue, c.WebhookPolicy, now),
			Authenticator: auth.New(st), Limiter: ratelimit.New(st, now), Log: log, Now: now,
		},
	}, nil
}

// Handler serves the named routes (all when none are named).
func (a *App) Handler(only ...string) http.Handler { return httpapi.NewHandler(a.Deps, only...) }
