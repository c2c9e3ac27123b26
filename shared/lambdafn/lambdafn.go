// Package lambdafn runs one route of the shared HTTP handler as a Lambda
// function behind API Gateway's HTTP API (payload format 2.0).
package lambdafn

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"avatarsvc/shared/app"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/emf"
	"avatarsvc/shared/httpapi"
	"avatarsvc/shared/reaper"
)

// Option adjusts a function's configuration in code.
type Option func(*app.Config)

// WithModerator links upload moderation into the function that uploads
// (see app.Config.NewModerator).
func WithModerator(m func(ffmpeg string) avatars.Moderator) Option {
	return func(c *app.Config) { c.NewModerator = m }
}

// Handler builds the Lambda handler for route.
func Handler(ctx context.Context, route string, getenv func(string) string, opts ...Option) (func(context.Context, EventV2) (ResponseV2, error), error) {
	known := false
	for _, r := range httpapi.Routes(httpapi.Deps{}) {
		known = known || r.Name == route
	}
	if !known {
		return nil, fmt.Errorf("unknown route %q", route)
	}
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	for _, o := range opts {
		o(&cfg)
	}
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("function", route)
	a, err := app.New(ctx, cfg, time.Now, log)
	if err != nil {
		return nil, err
	}
	return httpadapter.NewV2(a.Handler(route)).ProxyWithContext, nil
}

// Serve is a function's whole main: build the handler once per cold start,
// then hand invocations to it.
func Serve(route string, opts ...Option) {
	h, err := Handler(context.Background(), route, os.Getenv, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	lambda.Start(h)
}

// ReaperHandler builds the scheduled reaper's handler: each invocation (an
// EventBridge schedule event, whose body is ignored) is one sweep.
func ReaperHandler(ctx context.Context, getenv func(string) string) (func(context.Context, json.RawMessage) (reaper.Result, error), error) {
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("function", "reaper")
	a, err := app.New(ctx, cfg, time.Now, log)
	if err != nil {
		return nil, err
	}
	metrics := emf.New(os.Stdout, emf.APINamespace)
	return func(ctx context.Context, _ json.RawMessage) (reaper.Result, error) {
		res, err := a.Reaper.Sweep(ctx)
		if merr := reaper.WriteMetrics(metrics, time.Now(), res); merr != nil {
			log.WarnContext(ctx, "reaper metrics", "err", merr)
		}
		return res, err
	}, nil
}

// ServeReaper is the reaper function's whole main.
func ServeReaper() {
	h, err := ReaperHandler(context.Background(), os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	lambda.Start(h)
}

// WebhookDeliveryHandler builds the handler of the webhook delivery queue's
// SQS trigger: each message is one attempt (webhooks.Deliverer.Handle).
// Messages that fail are reported back one by one (ReportBatchItemFailures),
// so SQS redelivers only those.
func WebhookDeliveryHandler(ctx context.Context, getenv func(string) string) (func(context.Context, events.SQSEvent) (events.SQSEventResponse, error), error) {
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("function", "webhook-deliver")
	a, err := app.New(ctx, cfg, time.Now, log)
	if err != nil {
		return nil, err
	}
	a.Deliverer.UseMetrics(emf.New(os.Stdout, emf.APINamespace))
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var res events.SQSEventResponse
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, m := range ev.Records {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := a.Deliverer.Handle(ctx, m.Body); err != nil {
					log.WarnContext(ctx, "webhook delivery attempt", "message_id", m.MessageId, "err", err)
					mu.Lock()
					res.BatchItemFailures = append(res.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return res, nil
	}, nil
}

// ServeWebhookDeliveries is the webhook-deliver function's whole main.
func ServeWebhookDeliveries() {
	h, err := WebhookDeliveryHandler(context.Background(), os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(1)
	}
	lambda.Start(h)
}
