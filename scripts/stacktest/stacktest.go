// Package stacktest runs the API against the real local stand-ins (DynamoDB
// Local, the SQS server, S3) for integration tests and benchmarks: tables,
// queue and bucket are created from template.yaml, as in AWS.
package stacktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"time"

	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/app"
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/webhooks"
)

// Clock is a settable clock shared by the app under test, or the real
// clock for stacks that run beside real renderer workers.
type Clock struct {
	mu   sync.Mutex
	t    time.Time
	real bool
}

// Now returns the clock's time. Each reading moves it on by a microsecond,
// so records made one after another keep their order.
func (c *Clock) Now() time.Time {
	if c.real {
		return time.Now()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Microsecond)
	return c.t
}

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Stack is a running API over the local stand-ins.
type Stack struct {
	App    *app.App
	Server *httptest.Server
	// LiveKit is a livekit-server whose webhooks go to Server, and which the
	// API uses for the rooms it creates (links, rooms/initiate).
	LiveKit *localstack.LiveKit
	Clock   *Clock
	Env     map[string]string
	stops   []func() error
}

// Start brings up DynamoDB Local, the SQS server, S3 and livekit-server,
// creates the template's resources and serves every route on a loopback
// httptest server.
func Start(ctx context.Context) (*Stack, error) { return StartWith(ctx, Options{}) }

// StartRealTime is Start with the real clock, for tests where renderer
// workers (which run on the real clock) claim, bill and end sessions.
func StartRealTime(ctx context.Context) (*Stack, error) {
	return StartWith(ctx, Options{RealClock: true})
}

// Options vary the stack.
type Options struct {
	RealClock bool
	// LinkPageURL is where links' urls point (default: an unused port).
	LinkPageURL string
}

// StartWith is Start with options.
func StartWith(ctx context.Context, o Options) (*Stack, error) {
	realClock := o.RealClock
	linkPage := o.LinkPageURL
	if linkPage == "" {
		linkPage = "http://127.0.0.1:1/link/"
	}
	// The clock starts a little ahead of now (DynamoDB Local really deletes
	// items whose ttl has passed, such as old rate-limit windows), and never
	// within a few days of a month's end, so free-plan periods (calendar
	// months) stay put while tests advance it.
	start := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	if start.Day() >= 26 {
		start = time.Date(start.Year(), start.Month()+1, 1, 1, 0, 0, 0, time.UTC)
	}
	s := &Stack{Clock: &Clock{t: start, real: realClock}}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	root, err := localstack.RepoRoot()
	if err != nil {
		return nil, err
	}
	logDir, err := os.MkdirTemp("", "stacktest-logs-")
	if err != nil {
		return nil, err
	}
	db, err := localstack.StartDynamoDB(ctx, localstack.Options{LogDir: logDir})
	if err != nil {
		return nil, fmt.Errorf("start DynamoDB Local: %w", err)
	}
	s.stops = append(s.stops, db.Stop)
	q, err := localstack.StartSQS(ctx, localstack.Options{LogDir: logDir})
	if err != nil {
		return nil, fmt.Errorf("start SQS server: %w", err)
	}
	s.stops = append(s.stops, q.Stop)
	s3, err := localstack.StartS3(ctx)
	if err != nil {
		return nil, fmt.Errorf("start S3: %w", err)
	}
	s.stops = append(s.stops, s3.Stop)

	// The API's address must be known before livekit-server starts, to
	// send it webhooks.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	apiURL := "http://" + ln.Addr().String()
	lk, err := localstack.StartLiveKit(ctx, localstack.Options{LogDir: logDir, WebhookURLs: []string{apiURL + "/v1/livekit/webhook"}})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("start livekit-server: %w", err)
	}
	s.stops = append(s.stops, lk.Stop)
	s.LiveKit = lk

	env, err := localstack.CreateStack(ctx, filepath.Join(root, "template.yaml"), localstack.Endpoints{
		DynamoDB: db.Endpoint, SQS: q.Endpoint, S3: s3.Endpoint,
	}, "test", localstack.LocalEnv(s3.Endpoint, linkPage, lk))
	if err != nil {
		ln.Close()
		return nil, err
	}
	env["MEDIA_BASE_URL"] = s3.Endpoint + "/" + env["MEDIA_BUCKET"]
	s.Env = env
	cfg, err := app.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		return nil, err
	}
	cfg.NewModerator = func(ffmpeg string) avatars.Moderator { return avatarimage.Moderation{FFmpeg: ffmpeg} }
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if os.Getenv("STACKTEST_LOG") != "" {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	a, err := app.New(ctx, cfg, s.Clock.Now, log)
	if err != nil {
		return nil, err
	}
	s.App = a
	if _, err := a.Avatars.SeedCatalog(ctx, filepath.Join(root, "infra", "catalog")); err != nil {
		return nil, fmt.Errorf("seed the avatar catalog: %w", err)
	}
	s.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: a.Handler()}}
	s.Server.Start()
	s.stops = append(s.stops, func() error { s.Server.Close(); return nil })
	ok = true
	return s, nil
}

// Stop stops everything Start started, newest first.
func (s *Stack) Stop() error {
	var errs []error
	for i := len(s.stops) - 1; i >= 0; i-- {
		errs = append(errs, s.stops[i]())
	}
	s.stops = nil
	return errors.Join(errs...)
}

// Account is a user with a live and a test key.
type Account struct {
	User    domain.User
	LiveKey string
	TestKey string
}

// NewAccount creates a user on plan with one key of each mode.
func (s *Stack) NewAccount(ctx context.Context, plan string) (Account, error) {
	u, err := s.App.Accounts.CreateUser(ctx, "", "", plan)
	if err != nil {
		return Account{}, err
	}
	live, _, err := s.App.Accounts.CreateKey(ctx, u.ID, domain.ModeLive, "test")
	if err != nil {
		return Account{}, err
	}
	test, _, err := s.App.Accounts.CreateKey(ctx, u.ID, domain.ModeTest, "test")
	if err != nil {
		return Account{}, err
	}
	return Account{User: u, LiveKey: live, TestKey: test}, nil
}

// Serve does what a renderer worker does once it joined a session's room:
// claim the session and report its ws_uri, and in a room the service made
// report that a person is there, so the session bills like a served one.
// Like the worker, it then publishes session.started to the account's
// webhooks. API tests that run no worker use it; the lease is long so the
// test clock can move freely.
func (s *Stack) Serve(ctx context.Context, sessionID string) error {
	now := s.Clock.Now()
	sess, err := s.App.Store.ClaimSession(ctx, sessionID, "test-worker", now, now.Add(24*time.Hour))
	if err != nil {
		return fmt.Errorf("claim %s: %w", sessionID, err)
	}
	wsURI := "ws://127.0.0.1:1/ws/" + sessionID
	if err := s.App.Store.ReportServing(ctx, sessionID, "test-worker", wsURI, now); err != nil {
		return err
	}
	if sess.Hosted() {
		if err := s.App.Store.ReportPersonJoined(ctx, sessionID, "test-worker", now); err != nil {
			return err
		}
	}
	return s.App.Events.Publish(ctx, sess.UserID, webhooks.SessionStarted(sess, wsURI, now))
}

// Call sends a JSON request to the stack's API with key and decodes a 2xx
// answer's body into into (when not nil); other statuses are errors.
func (s *Stack) Call(method, path, key string, body, into any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.Server.URL+path, r)
	if err != nil {
		return err
	}
	req.Header.Set("x-api-key", key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	if into != nil {
		return json.Unmarshal(raw, into)
	}
	return nil
}
