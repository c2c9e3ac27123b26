// Package lambdafn runs one route of the shared HTTP handler as a Lambda
// function behind API Gateway's HTTP API (payload format 2.0).
package lambdafn

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"avatarsvc/shared/app"
	"avatarsvc/shared/avatars"
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
	return func(ctx context.Context, _ json.RawMessage) (reaper.Result, error) { return a.Reaper.Sweep(ctx) }, nil
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
