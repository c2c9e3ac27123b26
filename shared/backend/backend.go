// Package backend wires what every process of the service shares: the AWS
// clients (pointed at the local stand-ins when their endpoints are set),
// the store, the sessions service with its job queue and media bucket, and
// the LiveKit client. The HTTP app (shared/app) is built on it; the renderer
// worker uses it alone, so it links none of the API.
package backend

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"avatarsvc/shared/jobs"
	"avatarsvc/shared/livekit"
	"avatarsvc/shared/media"
	"avatarsvc/shared/netguard"
	"avatarsvc/shared/sessions"
	"avatarsvc/shared/store"
	"avatarsvc/shared/webhooks"
)

// Config is read from the environment (template.yaml and the renderer
// hosts' user data set it in AWS; the local stack and tests set it locally).
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
	// LiveKit is the room platform for rooms the service creates (links,
	// rooms/initiate): LIVEKIT_URL, LIVEKIT_API_KEY, LIVEKIT_API_SECRET.
	// Empty: those endpoints answer that no room platform is configured.
	LiveKitURL, LiveKitAPIKey, LiveKitAPISecret string
	// WebhookQueueURL is the queue of lifecycle webhook deliveries
	// (shared/webhooks); WebhookPolicy says where their endpoints may be
	// (WEBHOOK_ALLOW_PREFIXES: the local stack allows 127.0.0.1).
	WebhookQueueURL string
	WebhookPolicy   netguard.Policy
}

func prefixList(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return strings.Join(out, ",")
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
			Webhooks: getenv("WEBHOOKS_TABLE"), WebhookDeliveries: getenv("WEBHOOK_DELIVERIES_TABLE"),
		},
		WebhookQueueURL:  getenv("WEBHOOK_QUEUE_URL"),
		LiveKitURL:       getenv("LIVEKIT_URL"),
		LiveKitAPIKey:    getenv("LIVEKIT_API_KEY"),
		LiveKitAPISecret: getenv("LIVEKIT_API_SECRET"),
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
	var err error
	if c.WebhookPolicy.AllowPrefixes, err = netguard.ParsePrefixes(getenv("WEBHOOK_ALLOW_PREFIXES")); err != nil {
		return c, fmt.Errorf("WEBHOOK_ALLOW_PREFIXES: %w", err)
	}
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	for name, v := range map[string]string{
		"USERS_TABLE": c.Tables.Users, "API_KEYS_TABLE": c.Tables.APIKeys, "SESSIONS_TABLE": c.Tables.Sessions,
		"RATE_LIMITS_TABLE": c.Tables.RateLimits, "SESSION_QUEUE_URL": c.QueueURL, "MEDIA_BUCKET": c.MediaBucket,
		"AVATARS_TABLE": c.Tables.Avatars, "AGENTS_TABLE": c.Tables.Agents, "LINKS_TABLE": c.Tables.Links,
		"COUNTERS_TABLE": c.Tables.Counters, "WEBHOOKS_TABLE": c.Tables.Webhooks,
		"WEBHOOK_DELIVERIES_TABLE": c.Tables.WebhookDeliveries, "WEBHOOK_QUEUE_URL": c.WebhookQueueURL,
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
		"COUNTERS_TABLE=" + c.Tables.Counters, "WEBHOOKS_TABLE=" + c.Tables.Webhooks,
		"WEBHOOK_DELIVERIES_TABLE=" + c.Tables.WebhookDeliveries, "WEBHOOK_QUEUE_URL=" + c.WebhookQueueURL,
		"WEBHOOK_ALLOW_PREFIXES=" + prefixList(c.WebhookPolicy.AllowPrefixes),
		"LIVEKIT_URL=" + c.LiveKitURL, "LIVEKIT_API_KEY=" + c.LiveKitAPIKey, "LIVEKIT_API_SECRET=" + c.LiveKitAPISecret,
	}
}

// Backend is the wired shared part.
type Backend struct {
	Config   Config
	AWS      aws.Config
	Store    *store.Store
	Sessions *sessions.Service
	Queue    *jobs.Queue
	Bucket   *media.Bucket
	Rooms    *livekit.Client // nil without LiveKit settings
	// Events publishes lifecycle webhook events; WebhookQueue carries
	// their deliveries.
	Events       *webhooks.Publisher
	WebhookQueue *webhooks.SQSQueue
	SQS          *sqs.Client
	S3           *s3.Client
}

// New wires a Backend. now is the clock; log receives JSON logs.
func New(ctx context.Context, c Config, now func() time.Time, log *slog.Logger) (*Backend, error) {
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
	svc := sessions.New(st, queue, bucket, now, log, c.RoomPlatforms...)
	webhookQueue := webhooks.NewSQSQueue(sqsClient, c.WebhookQueueURL)
	events := webhooks.NewPublisher(st, webhookQueue, now, log)
	svc.UseEvents(events)
	lk := livekit.New(c.LiveKitURL, c.LiveKitAPIKey, c.LiveKitAPISecret)
	if lk != nil { // a nil *livekit.Client in an interface would not read as nil
		svc.UseRooms(lk)
	}
	return &Backend{Config: c, AWS: cfg, Store: st, Sessions: svc, Queue: queue, Bucket: bucket, Rooms: lk,
		SQS: sqsClient, S3: s3Client, Events: events, WebhookQueue: webhookQueue}, nil
}
