// Package httpapi is the HTTP surface: one route table (this file), the
// handlers, and the single place that maps domain errors to responses. The
// same http.Handler serves the local server, the tests and every Lambda.
package httpapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"avatarsvc/shared/agents"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/links"
	"avatarsvc/shared/ratelimit"
	"avatarsvc/shared/roomhost"
	"avatarsvc/shared/sessions"
	"avatarsvc/shared/webhooks"
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
	// Class is the rate-limit quota the route counts against; ClassFor,
	// when set, chooses it per authenticated request instead.
	Class    ratelimit.Class
	ClassFor func(r *http.Request) ratelimit.Class
	// Public routes need no API key.
	Public bool
	// Signed public routes prove their caller with a signature the handler
	// checks (LiveKit's webhooks). A verified request is never rate limited:
	// one server sends every room's events from one address. A request that
	// fails verification (the handler's Unauthorized) counts against its
	// address's Class quota, and is answered 429 once that is spent.
	Signed bool
	// MaxBody bounds the request body; 0 means MaxBodyBytes.
	MaxBody int64
	handler handlerFunc
}

// handlerFunc is a handler that returns its failure; withRoute writes it in
// the route's error style.
type handlerFunc func(w http.ResponseWriter, r *http.Request) error

// Deps are what the handlers need.
type Deps struct {
	Sessions *sessions.Service
	Avatars  *avatars.Service
	Agents   *agents.Service
	Links    *links.Service
	RoomHost *roomhost.Service
	// LiveKitWebhooks verifies LiveKit's webhooks; nil when no LiveKit is
	// configured.
	LiveKitWebhooks WebhookVerifier
	// Webhooks are the account's own lifecycle webhooks (an extension).
	Webhooks      *webhooks.Service
	Authenticator Authenticator
	Limiter       Limiter
	Log           *slog.Logger
	Now           func() time.Time
}

// Authenticator checks an x-api-key value.
type Authenticator interface {
	Authenticate(ctx context.Context, key string) (domain.APIKey, error)
}

// Limiter counts a request against a quota: the class's, or (AllowWithin)
// one the caller chooses.
type Limiter interface {
	Allow(ctx context.Context, subject string, class ratelimit.Class) (ratelimit.Decision, error)
	AllowWithin(ctx context.Context, subject string, class ratelimit.Class, limit int) (ratelimit.Decision, error)
}

// Routes is the whole API surface. Session start endpoints count against the
// session-start quota only (not also against writes).
func Routes(d Deps) []Route {
	return []Route{
		{Name: "sessions-create", Method: "POST", Path: "/sessions", Style: structured, Class: ratelimit.Write,
			handler: handleCreateSession(d.Sessions)},
		{Name: "sessions-list", Method: "GET", Path: "/sessions", Style: structured, Class: ratelimit.Read,
			handler: handleList("sessions", func(r *http.Request, user string, p domain.Page) ([]domain.Session, string, error) {
				return d.Sessions.List(r.Context(), user, r.URL.Query().Get("status"), p)
			}, func(s domain.Session) sessionView { return viewSession(s, d.Now()) })},
		{Name: "sessions-get", Method: "GET", Path: "/sessions/{session_id}", Style: structured, Class: ratelimit.Read,
			handler: handleGetSession(d.Sessions, d.Now)},
		{Name: "sessions-start", Method: "PUT", Path: "/sessions/{session_id}/start", Style: structured, Class: ratelimit.SessionStart,
			ClassFor: startRepeatsCountAsReads(d.Sessions), handler: handleStartSession(d.Sessions)},
		{Name: "sessions-start-once", Method: "POST", Path: "/sessions/{session_id}/start", Style: successString, Class: ratelimit.SessionStart,
			handler: handleStartSessionOnce(d.Sessions)},
		{Name: "sessions-end", Method: "POST", Path: "/sessions/{session_id}/end", Style: structured, Class: ratelimit.Write,
			handler: handleEndSession(d.Sessions, d.Now)},
		{Name: "sessions-extend", Method: "POST", Path: "/sessions/{session_id}/extend", Style: structured, Class: ratelimit.Write,
			handler: handleExtendSession(d.Sessions, d.Now)},
		{Name: "sessions-delete", Method: "DELETE", Path: "/sessions/{session_id}", Style: structured, Class: ratelimit.Write,
			handler: handleDeleteSession(d.Sessions)},
		{Name: "usage-get", Method: "GET", Path: "/usage", Style: structured, Class: ratelimit.Read,
			handler: handleUsage(d.Sessions, d.Now)},

		{Name: "rooms-initiate", Method: "POST", Path: "/rooms/initiate", Style: structured, Class: ratelimit.SessionStart,
			handler: handleInitiateRoom(d.RoomHost)},
		{Name: "livekit-webhook", Method: "POST", Path: "/livekit/webhook", Style: structured, Class: ratelimit.Write, Public: true, Signed: true,
			handler: handleLiveKitWebhook(d.RoomHost, d.LiveKitWebhooks)},

		{Name: "avatars-upload", Method: "POST", Path: "/avatars/upload", Style: plainString, Class: ratelimit.Write,
			MaxBody: maxUploadBody, handler: handleUploadAvatar(d.Avatars)},
		{Name: "avatars-list", Method: "GET", Path: "/avatars", Style: structured, Class: ratelimit.Read,
			handler: handleList("avatars", func(r *http.Request, user string, p domain.Page) ([]domain.Avatar, string, error) {
				return d.Avatars.List(r.Context(), user, p)
			}, viewAvatar)},
		{Name: "avatars-update", Method: "PUT", Path: "/avatars/{id}", Style: plainString, Class: ratelimit.Write,
			handler: handleUpdateAvatar(d.Avatars)},
		{Name: "avatars-delete", Method: "DELETE", Path: "/avatars/{id...}", Style: structured, Class: ratelimit.Write,
			handler: handleDeleteAvatar(d.Avatars)},
		{Name: "avatars-preview", Method: "POST", Path: "/avatars/preview", Style: structured, Class: ratelimit.Write,
			handler: handlePreviewAvatar(d.Links)},

		{Name: "voices-list", Method: "GET", Path: "/voices", Style: structured, Class: ratelimit.Read,
			handler: handleListVoices()},

		{Name: "agents-create", Method: "POST", Path: "/agents", Style: structured, Class: ratelimit.Write,
			handler: handleCreateAgent(d.Agents)},
		{Name: "agents-list", Method: "GET", Path: "/agents", Style: structured, Class: ratelimit.Read,
			handler: handleList("agents", func(r *http.Request, user string, p domain.Page) ([]agents.Agent, string, error) {
				return d.Agents.List(r.Context(), user, p)
			}, viewAgent)},
		{Name: "agents-get", Method: "GET", Path: "/agents/{agent_id}", Style: structured, Class: ratelimit.Read,
			handler: handleGetAgent(d.Agents)},
		{Name: "agents-update", Method: "PUT", Path: "/agents/{agent_id}", Style: structured, Class: ratelimit.Write,
			handler: handleUpdateAgent(d.Agents)},
		{Name: "agents-delete", Method: "DELETE", Path: "/agents/{agent_id}", Style: structured, Class: ratelimit.Write,
			handler: handleDeleteAgent(d.Agents)},
		{Name: "agents-duplicate", Method: "POST", Path: "/agents/{id}/duplicate", Style: plainString, Class: ratelimit.Write,
			handler: handleDuplicateAgent(d.Agents)},

		{Name: "links-create", Method: "POST", Path: "/links", Style: structured, Class: ratelimit.Write,
			handler: handleCreateLink(d.Links, d.Now)},
		{Name: "links-list", Method: "GET", Path: "/links", Style: structured, Class: ratelimit.Read,
			handler: handleList("links", func(r *http.Request, user string, p domain.Page) ([]links.Link, string, error) {
				return d.Links.List(r.Context(), user, r.URL.Query().Get("status"), p)
			}, func(l links.Link) linkView { return viewLink(d.Links, l, d.Now()) })},
		{Name: "links-update", Method: "PUT", Path: "/links/{link_id}", Style: structured, Class: ratelimit.Write,
			handler: handleUpdateLink(d.Links, d.Now)},
		{Name: "links-delete", Method: "DELETE", Path: "/links/{link_id}", Style: structured, Class: ratelimit.Write,
			handler: handleDeleteLink(d.Links)},
		{Name: "links-start-session", Method: "POST", Path: "/links/start-session", Style: structured, Class: ratelimit.SessionStart,
			Public: true, handler: handleStartViaLink(d.Links, d.Limiter)},

		// Lifecycle webhooks (an extension): endpoints and their delivery log.
		{Name: "webhooks-create", Method: "POST", Path: "/webhooks", Style: structured, Class: ratelimit.Write,
			handler: handleCreateWebhook(d.Webhooks)},
		{Name: "webhooks-list", Method: "GET", Path: "/webhooks", Style: structured, Class: ratelimit.Read,
			handler: handleListWebhooks(d.Webhooks)},
		{Name: "webhooks-get", Method: "GET", Path: "/webhooks/{webhook_id}", Style: structured, Class: ratelimit.Read,
			handler: handleGetWebhook(d.Webhooks)},
		{Name: "webhooks-update", Method: "PUT", Path: "/webhooks/{webhook_id}", Style: structured, Class: ratelimit.Write,
			handler: handleUpdateWebhook(d.Webhooks)},
		{Name: "webhooks-delete", Method: "DELETE", Path: "/webhooks/{webhook_id}", Style: structured, Class: ratelimit.Write,
			handler: handleDeleteWebhook(d.Webhooks)},
		{Name: "webhooks-deliveries", Method: "GET", Path: "/webhooks/{webhook_id}/deliveries", Style: structured, Class: ratelimit.Read,
			handler: handleList("deliveries", func(r *http.Request, user string, p domain.Page) ([]domain.WebhookDelivery, string, error) {
				return d.Webhooks.Deliveries(r.Context(), user, r.PathValue("webhook_id"), p)
			}, viewDelivery)},
		{Name: "webhooks-retry", Method: "POST", Path: "/webhooks/{webhook_id}/deliveries/{delivery_id}/retry", Style: structured,
			Class: ratelimit.Write, handler: handleRetryDelivery(d.Webhooks)},

		// The link page calls start-session from its own origin: the CORS
		// preflight is answered by the same function.
		{Name: "links-start-session", Method: "OPTIONS", Path: "/links/start-session", Style: structured, Class: ratelimit.Read,
			Public: true, handler: handlePreflight("POST")},
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
	methods := map[string]map[string]bool{} // path -> methods served
	for _, rt := range Routes(d) {
		if len(want) > 0 && !want[rt.Name] {
			continue
		}
		h := withRoute(d, rt)
		for _, p := range Prefixes {
			mux.Handle(rt.Method+" "+p+rt.Path, h)
			if methods[p+rt.Path] == nil {
				methods[p+rt.Path] = map[string]bool{}
			}
			methods[p+rt.Path][rt.Method] = true
		}
	}
	// A known path with another method answers 405 in the JSON shape rather
	// than ServeMux's plain text. The fallbacks are registered per method so
	// they never overlap ambiguously with a wildcard route of another path.
	fallback := withFallback(d, structured, domain.Errorf(domain.NotAllowed, "Method not allowed").
		WithSuggestion("See the API reference for the methods this path accepts"))
	for p, served := range methods {
		for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
			if !served[m] && !(m == "GET" && served["HEAD"]) {
				if !overlapsRoute(methods, m, p) {
					mux.Handle(m+" "+p, fallback)
				}
			}
		}
	}
	mux.Handle("/", withFallback(d, structured, domain.Errorf(domain.NotFound, "Not found").
		WithSuggestion("Check the path; endpoints live under /v1/... and /api/v1/...")))
	return withRequestContext(d.Log, mux)
}

// overlapsRoute reports whether "m p" would also match a served route of
// another path with the same method (a literal path beside a wildcard one,
// such as PUT /v1/avatars/upload beside PUT /v1/avatars/{id}); the served
// route then answers, as it should.
func overlapsRoute(methods map[string]map[string]bool, m, p string) bool {
	for q, served := range methods {
		if q != p && served[m] && samePathShape(p, q) {
			return true
		}
	}
	return false
}

// samePathShape reports whether two patterns can match one path: each
// segment pair equal or one of them a wildcard, and equal segment counts
// unless a trailing {x...} takes the rest.
func samePathShape(a, b string) bool {
	as, bs := strings.Split(a, "/"), strings.Split(b, "/")
	for i := 0; i < len(as) && i < len(bs); i++ {
		if strings.HasSuffix(as[i], "...}") || strings.HasSuffix(bs[i], "...}") {
			return true
		}
		if as[i] != bs[i] && !strings.HasPrefix(as[i], "{") && !strings.HasPrefix(bs[i], "{") {
			return false
		}
	}
	return len(as) == len(bs)
}
