// Package app wires the service from configuration: AWS clients, the store,
// the services and the HTTP handler. Lambda functions, the local server, the
// admin tool and the tests all build it the same way.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"avatarsvc/shared/accounts"
	"avatarsvc/shared/agents"
	"avatarsvc/shared/auth"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/httpapi"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/links"
	"avatarsvc/shared/media"
	"avatarsvc/shared/ratelimit"
	"avatarsvc/shared/reaper"
	"avatarsvc/shared/roomhost"
	"avatarsvc/shared/livekit"
	"avatarsvc/shared/sessions"
	"avatarsvc/shared/store"
)

// Config is read from the environment (template.yaml sets it in AWS; the
// local stack and tests set it locally).
type Config struct {
	Region      string
	Tables      store.Tables
	QueueURL    string
	MediaBucket string
	// Endpoints override AWS's, for the local stand-ins. Empty in AWS.
	DynamoDBEndpoint, SQSEndpoint, S3Endpoint string
	// Trace turns on X-Ray subsegments for AWS calls (in Lambda, in builds
	// with the xray tag; see tracing_xray.go).
	Trace bool
	// RoomPlatforms the renderers can join (ROOM_PLATFORMS, comma-separated;
	// default livekit). Create Session refuses the others with a clear 400.
	RoomPlatforms []string
	// MediaBaseURL serves the media bucket's objects to browsers and
	// callers (MEDIA_BASE_URL: a CloudFront distribution in AWS).
	MediaBaseURL string
	// LinkPageURL is the link page; a link's url is LinkPageURL#<link_id>.
	LinkPageURL string
	// LiveKit is the room platform for rooms the service creates (links,
	// rooms/initiate): LIVEKIT_URL, LIVEKIT_API_KEY, LIVEKIT_API_SECRET.
	// Empty: those endpoints answer that no room platform is configured.
	LiveKitURL, LiveKitAPIKey, LiveKitAPISecret string
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

// ConfigFromEnv reads Config; every table, the queue and the bucket must be named.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := Config{
		Region: getenv("AWS_REGION"),
		Tables: store.Tables{
			Users: getenv("USERS_TABLE"), APIKeys: getenv("API_KEYS_TABLE"),
			Sessions: getenv("SESSIONS_TABLE"), RateLimits: getenv("RATE_LIMITS_TABLE"),
			Avatars: getenv("AVATARS_TABLE"), Agents: getenv("AGENTS_TABLE"), Links: getenv("LINKS_TABLE"),
			Counters: getenv("COUNTERS_TABLE"),
		},
		MediaBaseURL:     getenv("MEDIA_BASE_URL"),
		LinkPageURL:      getenv("LINK_PAGE_URL"),
		LiveKitURL:       getenv("LIVEKIT_URL"),
		LiveKitAPIKey:    getenv("LIVEKIT_API_KEY"),
		LiveKitAPISecret: getenv("LIVEKIT_API_SECRET"),
		DefaultAvatar:    getenv("DEFAULT_AVATAR"),
		Moderation:       getenv("MODERATION") != "off",
		FFmpeg:           getenv("FFMPEG_PATH"),
		QueueURL:         getenv("SESSION_QUEUE_URL"),
		MediaBucket:      getenv("MEDIA_BUCKET"),
		DynamoDBEndpoint: getenv("AWS_ENDPOINT_URL_DYNAMODB"),
		SQSEndpoint:      getenv("AWS_ENDPOINT_URL_SQS"),
		S3Endpoint:       getenv("AWS_ENDPOINT_URL_S3"),
		Trace:            getenv("AWS_LAMBDA_FUNCTION_NAME") != "",
	}
	if v := getenv("ROOM_PLATFORMS"); v != "" {
		c.RoomPlatforms = strings.Split(v, ",")
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	for name, v := range map[string]string{
		"USERS_TABLE": c.Tables.Users, "API_KEYS_TABLE": c.Tables.APIKeys, "SESSIONS_TABLE": c.Tables.Sessions,
		"RATE_LIMITS_TABLE": c.Tables.RateLimits, "SESSION_QUEUE_URL": c.QueueURL, "MEDIA_BUCKET": c.MediaBucket,
		"AVATARS_TABLE": c.Tables.Avatars, "AGENTS_TABLE": c.Tables.Agents, "LINKS_TABLE": c.Tables.Links,
		"COUNTERS_TABLE": c.Tables.Counters, "MEDIA_BASE_URL": c.MediaBaseURL, "LINK_PAGE_URL": c.LinkPageURL,
	} {
		if v == "" {
			return c, fmt.Errorf("environment variable %s is not set", name)
		}
	}
	return c, nil
}

// Env renders c as environment variables, for child processes.
func (c Config) Env() []string {
	return []string{
		"AWS_REGION=" + c.Region,
		"USERS_TABLE=" + c.Tables.Users, "API_KEYS_TABLE=" + c.Tables.APIKeys,
		"SESSIONS_TABLE=" + c.Tables.Sessions, "RATE_LIMITS_TABLE=" + c.Tables.RateLimits,
		"SESSION_QUEUE_URL=" + c.QueueURL, "MEDIA_BUCKET=" + c.MediaBucket,
		"AWS_ENDPOINT_URL_DYNAMODB=" + c.DynamoDBEndpoint, "AWS_ENDPOINT_URL_SQS=" + c.SQSEndpoint,
		"AWS_ENDPOINT_URL_S3=" + c.S3Endpoint, "ROOM_PLATFORMS=" + strings.Join(c.RoomPlatforms, ","),
		"AVATARS_TABLE=" + c.Tables.Avatars, "AGENTS_TABLE=" + c.Tables.Agents, "LINKS_TABLE=" + c.Tables.Links,
		"COUNTERS_TABLE=" + c.Tables.Counters, "MEDIA_BASE_URL=" + c.MediaBaseURL, "LINK_PAGE_URL=" + c.LinkPageURL,
		"LIVEKIT_URL=" + c.LiveKitURL, "LIVEKIT_API_KEY=" + c.LiveKitAPIKey, "LIVEKIT_API_SECRET=" + c.LiveKitAPISecret,
		"DEFAULT_AVATAR=" + c.DefaultAvatar, "MODERATION=" + map[bool]string{true: "on", false: "off"}[c.Moderation],
		"FFMPEG_PATH=" + c.FFmpeg,
	}
}

// App is the wired service.
type App struct {
	Config   Config
	AWS      aws.Config
	Store    *store.Store
	Sessions *sessions.Service
	Avatars  *avatars.Service
	Agents   *agents.Service
	Links    *links.Service
	Rooms    *livekit.Client // nil without LiveKit settings
	Accounts *accounts.Service
	Queue    *jobs.Queue
	Reaper   *reaper.Reaper
	SQS      *sqs.Client
	S3       *s3.Client
	Deps     httpapi.Deps
}

// New wires an App. now is the clock; log receives JSON logs.
func New(ctx context.Context, c Config, now func() time.Time, log *slog.Logger) (*App, error) {
	opts := []func(*config.LoadOptions) error{config.WithRegion(c.Region)}
	if c.DynamoDBEndpoint != "" || c.SQSEndpoint != "" || c.S3Endpoint != "" {
		// Local stand-ins accept any credentials; never use real ones there.
		opts = append(opts, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("local", "local", "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	if c.Trace {
		instrumentAWS(&cfg)
	}
	st := store.New(cfg, c.DynamoDBEndpoint, c.Tables)
	sqsClient := sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		if c.SQSEndpoint != "" {
			o.BaseEndpoint = aws.String(c.SQSEndpoint)
		}
	})
	s3Client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.S3Endpoint != "" {
			o.BaseEndpoint = aws.String(c.S3Endpoint)
			o.UsePathStyle = true
			// Local S3 stand-ins do not speak the SDK's streaming checksum
			// trailers; AWS accepts requests without them.
			o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
			o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		}
	})
	queue := jobs.NewQueue(sqsClient, c.QueueURL)
	bucket := media.NewBucket(s3Client, c.MediaBucket)
	var moderator avatars.Moderator
	switch {
	case c.Moderation && c.NewModerator != nil:
		moderator = c.NewModerator(c.FFmpeg)
	case c.Moderation:
		moderator = avatars.NoModerator{}
	}
	svc := sessions.New(st, queue, bucket, now, log, c.RoomPlatforms...)
	avatarSvc := avatars.New(st, bucket, moderator, c.MediaBaseURL, now, log)
	svc.UseAvatars(avatarSvc)
	agentSvc := agents.New(st, avatarSvc, now)
	lk := livekit.New(c.LiveKitURL, c.LiveKitAPIKey, c.LiveKitAPISecret)
	var roomHost roomhost.RoomHost
	var webhooks httpapi.WebhookVerifier
	if lk != nil { // a nil *livekit.Client in an interface would not read as nil
		roomHost, webhooks = lk, lk
		svc.UseRooms(lk)
	}
	hosting := roomhost.New(svc, agentSvc, avatarSvc, roomHost, c.DefaultAvatar, log)
	linkSvc := links.New(st, agentSvc, avatarSvc, svc, hosting, c.LinkPageURL, now)
	return &App{
		Config: c, AWS: cfg, Store: st, Sessions: svc, Avatars: avatarSvc, Agents: agentSvc, Links: linkSvc, Rooms: lk,
		Accounts: accounts.New(st, now), Queue: queue,
		Reaper: reaper.New(st, svc, reaper.DefaultPolicy, now, log), SQS: sqsClient, S3: s3Client,
		Deps: httpapi.Deps{
			Sessions: svc, Avatars: avatarSvc, Agents: agentSvc, Links: linkSvc,
			RoomHost: hosting, Webhooks: webhooks,
			Authenticator: auth.New(st), Limiter: ratelimit.New(st, now), Log: log, Now: now,
		},
	}, nil
}

// Handler serves the named routes (all when none are named).
func (a *App) Handler(only ...string) http.Handler { return httpapi.NewHandler(a.Deps, only...) }
