package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"runtime/debug"
	"strconv"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/ratelimit"
)

type ctxKey int

const (
	principalKey ctxKey = iota
	requestKey
)

// requestInfo is filled in as the request goes through, for the access log.
type requestInfo struct {
	id     string
	userID string
}

// Principal is the authenticated caller.
type Principal struct {
	UserID  string
	KeyMode string
	KeyHash string
}

func principal(ctx context.Context) Principal {
	p, _ := ctx.Value(principalKey).(Principal)
	return p
}

// RequestID returns the request id carried by ctx.
func RequestID(ctx context.Context) string {
	if info, ok := ctx.Value(requestKey).(*requestInfo); ok {
		return info.id
	}
	return ""
}

var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._-]{8,64}$`)

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// withRequestContext gives every request an id (kept from X-Request-Id when
// sane), logs it once as JSON, and turns a panic into a 500.
func withRequestContext(log *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID.MatchString(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = "req_" + hex.EncodeToString(b[:])
		}
		info := &requestInfo{id: id}
		ctx := context.WithValue(r.Context(), requestKey, info)
		r = r.WithContext(ctx)
		w.Header().Set("X-Request-Id", id)
		rec := &statusRecorder{ResponseWriter: w}
		start := time.Now()
		defer func() {
			if v := recover(); v != nil {
				log.ErrorContext(ctx, "panic", "request_id", id, "panic", v, "stack", string(debug.Stack()))
				if rec.status == 0 {
					writeError(rec, r, log, structured, domain.Errorf(domain.Internal, "Internal server error"), 0)
				}
			}
			log.InfoContext(ctx, "request", "request_id", id, "method", r.Method, "path", r.URL.Path,
				"status", rec.status, "user_id", info.userID, "ms", time.Since(start).Milliseconds())
		}()
		next.ServeHTTP(rec, r)
	})
}

// withRoute applies what depends on the route: the body bound, the API key,
// and the rate limit, whose headers go on every response, errors included.
// Unauthenticated requests are limited per client address, so key guessing is
// throttled too.
func withRoute(d Deps, rt Route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bodyLimit := int64(MaxBodyBytes)
		if rt.MaxBody > 0 {
			bodyLimit = rt.MaxBody
		}
		r.Body = http.MaxBytesReader(w, r.Body, bodyLimit)
		subject := "ip:" + clientIP(r)
		var authErr error
		if !rt.Public {
			key, err := d.Authenticator.Authenticate(r.Context(), r.Header.Get("x-api-key"))
			if err == nil {
				subject = "key:" + key.Hash
				p := Principal{UserID: key.UserID, KeyMode: key.Mode, KeyHash: key.Hash}
				r = r.WithContext(context.WithValue(r.Context(), principalKey, p))
				if info, ok := r.Context().Value(requestKey).(*requestInfo); ok {
					info.userID = key.UserID
				}
			} else {
				authErr = err
			}
		}
		if rt.Signed {
			serveSigned(d, rt, subject, w, r)
			return
		}
		class := rt.Class
		if rt.ClassFor != nil && authErr == nil {
			class = rt.ClassFor(r)
		}
		dec, ok := countRequest(d, r, subject, class)
		setCORS(w, rt)
		setRateLimit(w, dec)
		if !ok {
			writeError(w, r, d.Log, rt.Style, domain.Errorf(domain.RateLimited, rateLimitBody), 0)
			return
		}
		if authErr != nil {
			writeError(w, r, d.Log, plainString, authErr, 0)
			return
		}
		if err := rt.handler(w, r); err != nil {
			writeError(w, r, d.Log, rt.Style, err, 0)
		}
	})
}

// serveSigned runs a Signed route: the handler verifies the signature, and
// only a request that fails it is counted against subject's quota. The
// handler writes nothing on failure, so the 401 or 429 is written here.
func serveSigned(d Deps, rt Route, subject string, w http.ResponseWriter, r *http.Request) {
	setCORS(w, rt)
	err := rt.handler(w, r)
	if err == nil {
		return
	}
	if domain.ErrorCode(err) == domain.Unauthorized {
		dec, ok := countRequest(d, r, subject, rt.Class)
		setRateLimit(w, dec)
		if !ok {
			err = domain.Errorf(domain.RateLimited, rateLimitBody)
		}
	}
	writeError(w, r, d.Log, rt.Style, err, 0)
}

// countRequest counts a request against subject's quota for class. A counter outage
// fails open (the Decision allows): it must not take the API down.
func countRequest(d Deps, r *http.Request, subject string, class ratelimit.Class) (ratelimit.Decision, bool) {
	dec, err := d.Limiter.Allow(r.Context(), subject, class)
	if err != nil {
		d.Log.WarnContext(r.Context(), "rate limiter unavailable", "request_id", RequestID(r.Context()), "err", err)
	}
	return dec, dec.Allowed
}

// setCORS lets web pages on other origins call a public route; public
// routes take no cookies or keys, so any origin may.
func setCORS(w http.ResponseWriter, rt Route) {
	if !rt.Public {
		return
	}
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Expose-Headers", "RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset, Retry-After, X-Request-Id")
}

// setRateLimit puts a decision's headers on the response (on errors too),
// and Retry-After on a refusal.
func setRateLimit(w http.ResponseWriter, dec ratelimit.Decision) {
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(dec.Limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(dec.Remaining))
	h.Set("RateLimit-Reset", strconv.Itoa(dec.Reset))
	if !dec.Allowed {
		h.Set("Retry-After", strconv.Itoa(dec.Reset))
	}
}

// handlePreflight answers a CORS preflight for a public route.
func handlePreflight(methods string) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		h := w.Header()
		h.Set("Access-Control-Allow-Methods", methods)
		h.Set("Access-Control-Allow-Headers", "Content-Type")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
}

// withFallback answers paths and methods no route serves with err, rate
// limited per client address like any unauthenticated request, so the
// RateLimit headers are on these responses too.
func withFallback(d Deps, style errorStyle, err error) http.Handler {
	return withRoute(d, Route{Style: style, Class: ratelimit.Read, Public: true,
		handler: func(http.ResponseWriter, *http.Request) error { return err }})
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
