// Package httpapi is the HTTP surface: one route table (this file), the
// handlers, and the single place that maps domain errors to responses. The
// same http.Handler serves the local server, the tests and every Lambda.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/ratelimit"
	"avatarsvc/shared/sessions"
)

// Prefixes: every route answers under both address forms.
var Prefixes = []string{"/v1", "/api/v1"}

// Route is one endpoint. Name is also the Lambda function that serves it.
type Route struct {
	Name   string
	Method string
	Path   string // after the prefix, with {param} segments
	// Style is the error body shape the spec gives this endpoint.
	Style errorStyle
	// Class is the rate-limit quota the route counts against.
	Class ratelimit.Class
	// Public routes need no API key.
	Public  bool
	handler handlerFunc
}

// handlerFunc is a handler that returns its failure; withRoute writes it in
// the route's error style.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// Deps are what the handlers need.
type Deps struct {
	Sessions      *sessions.Service
	Authenticator Authenticator
	Limiter       Limiter
	Log           *slog.Logger
	Now           func() time.Time
}

// Authenticator checks an x-api-key value.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (domain.APIKey, error)
}

// Limiter counts a request against a quota.
type Limiter interface {
	Allow(ctx context.Context, subject string, class ratelimit.Class) (ratelimit.Decision, error)
}

// Routes is the whole API surface. Session start endpoints count against the
// session-start quota only (not also against writes).
func Routes(d Deps) []Route {
	return []Route{
		{Name: "sessions-create", Method: "POST", Path: "/sessions", Style: structured, Class: ratelimit.Write,
			handler: handleCreateSession(d.Sessions)},
		{Name: "sessions-list", Method: "GET", Path: "/sessions", Style: structured, Class: ratelimit.Read,
			handler: handleListSessions(d.Sessions, d.Now)},
		{Name: "sessions-get", Method: "GET", Path: "/sessions/{session_id}", Style: structured, Class: ratelimit.Read,
			handler: handleGetSession(d.Sessions, d.Now)},
		{Name: "sessions-start", Method: "PUT", Path: "/sessions/{session_id}/start", Style: structured, Class: ratelimit.SessionStart,
			handler: handleStartSession(d.Sessions)},
		{Name: "sessions-start-once", Method: "POST", Path: "/sessions/{session_id}/start", Style: successString, Class: ratelimit.SessionStart,
			handler: handleStartSessionOnce(d.Sessions)},
		{Name: "sessions-end", Method: "POST", Path: "/sessions/{session_id}/end", Style: structured, Class: ratelimit.Write,
			handler: handleEndSession(d.Sessions, d.Now)},
		{Name: "sessions-delete", Method: "DELETE", Path: "/sessions/{session_id}", Style: structured, Class: ratelimit.Write,
			handler: handleDeleteSession(d.Sessions)},
		{Name: "usage-get", Method: "GET", Path: "/usage", Style: structured, Class: ratelimit.Read,
			handler: handleUsage(d.Sessions, d.Now)},
	}
}

// NewHandler serves the routes named in only (all routes when only is empty),
// under both prefixes, wrapped in the middleware every request gets.
func NewHandler(d Deps, only ...string) http.Handler {
	want := map[string]bool{}
	for _, n := range only {
		want[n] = true
	}
	mux := http.NewServeMux()
	paths := map[string]bool{}
	for _, rt := range Routes(d) {
		if len(want) > 0 && !want[rt.Name] {
			continue
		}
		h := withRoute(d, rt)
		for _, p := range Prefixes {
			mux.Handle(rt.Method+" "+p+rt.Path, h)
			paths[p+rt.Path] = true
		}
	}
	// A known path with another method answers 405 in the JSON shape rather
	// than ServeMux's plain text.
	for p := range paths {
		mux.Handle(p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeError(w, r, d.Log, structured, &domain.Error{Code: domain.Invalid, Message: "Method not allowed",
				Suggestion: "See the API reference for the methods this path accepts"}, http.StatusMethodNotAllowed)
		}))
	}
	mux.Handle("/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, d.Log, structured, domain.Errorf(domain.NotFound, "Not found").
			WithSuggestion("Check the path; endpoints live under /v1/... and /api/v1/..."), 0)
	}))
	return withRequestContext(d.Log, mux)
}
