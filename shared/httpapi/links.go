package httpapi

import (
	"encoding/json"
	"math"
	"net/http"
	"strconv"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/links"
	"avatarsvc/shared/ratelimit"
)

type linkView struct {
	LinkID    string    `json:"link_id"`
	Name      *string   `json:"name"`
	URL       string    `json:"url"`
	Agent     agentView `json:"agent"`
	Status    string    `json:"status"`
	Uses      int       `json:"uses"`
	UseLimit  *int      `json:"use_limit"`
	CreatedAt string    `json:"created_at"`
	ExpiresAt *string   `json:"expires_at"`
	// Extensions: the link's policy (domain.LinkPolicy).
	MaxConcurrent     *int     `json:"max_concurrent_sessions"`
	VisitorStarts     int      `json:"max_starts_per_visitor_per_minute"` // the effective value
	AllowedOrigins    []string `json:"allowed_origins"`
	MaxSessionMinutes *int     `json:"max_session_minutes"`
}

func viewLink(svc *links.Service, l links.Link, now time.Time) linkView {
	v := linkView{
		LinkID: l.ID, Name: l.Name, URL: svc.URL(l.ID), Agent: viewAgent(l.Agent), Status: string(l.StatusAt(now)),
		Uses: l.Uses, UseLimit: l.UseLimit, CreatedAt: iso(l.CreatedAt),
		MaxConcurrent: l.MaxConcurrent, VisitorStarts: l.VisitorStartLimit(), AllowedOrigins: l.AllowedOrigins,
		MaxSessionMinutes: l.MaxSessionMinutes,
	}
	if l.ExpiresAt != nil {
		v.ExpiresAt = isoOrNull(*l.ExpiresAt)
	}
	return v
}

// parseTimestamp reads an ISO 8601 timestamp (RFC 3339, with or without
// fractional seconds).
func parseTimestamp(field, s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, domain.Errorf(domain.Invalid, "%s must be an ISO 8601 timestamp", field).
			WithSuggestion("For example 2026-12-31T23:59:59Z, or null")
	}
	return t, nil
}

// wholeNumber reads a JSON number that must be a whole number.
func wholeNumber(n json.Number) (int, bool) {
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || f > math.MaxInt32 || f < math.MinInt32 {
		return 0, false
	}
	return int(f), true
}

// policyNumber reads one of the link policy's integers; a number that is
// not a whole one becomes 0, which the policy's bounds refuse by name.
func policyNumber(n *json.Number) *int {
	if n == nil {
		return nil
	}
	v, ok := wholeNumber(*n)
	if !ok {
		v = 0
	}
	return &v
}

// originList reads allowed_origins: an array of strings.
func originList(raw json.RawMessage) ([]string, error) {
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil || list == nil {
		return nil, domain.Errorf(domain.Invalid, "allowed_origins must be an array of origins, or null").
			WithSuggestion(`For example ["https://www.example.com"]`)
	}
	return list, nil
}

func handleCreateLink(svc *links.Service, now func() time.Time) handlerFunc {
	type request struct {
		AgentID   flexibleID   `json:"agent_id"`
		Name      *string      `json:"name"`
		UseLimit  *json.Number `json:"use_limit"`
		ExpiresAt *string      `json:"expires_at"`
		// Extensions.
		MaxConcurrent     *json.Number    `json:"max_concurrent_sessions"`
		VisitorStarts     *json.Number    `json:"max_starts_per_visitor_per_minute"`
		AllowedOrigins    json.RawMessage `json:"allowed_origins"`
		MaxSessionMinutes *json.Number    `json:"max_session_minutes"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decode[request](r)
		if err != nil {
			return err
		}
		in := links.CreateInput{AgentID: string(req.AgentID), Name: req.Name, Policy: domain.LinkPolicy{
			MaxConcurrent: policyNumber(req.MaxConcurrent), VisitorStartsPerMinute: policyNumber(req.VisitorStarts),
			MaxSessionMinutes: policyNumber(req.MaxSessionMinutes),
		}}
		if len(req.AllowedOrigins) > 0 && string(req.AllowedOrigins) != "null" {
			if in.Policy.AllowedOrigins, err = originList(req.AllowedOrigins); err != nil {
				return err
			}
		}
		if req.UseLimit != nil {
			n, ok := wholeNumber(*req.UseLimit)
			if !ok || n < 1 {
				return domain.Errorf(domain.Invalid, "use_limit must be a positive integer or null")
			}
			in.UseLimit = &n
		}
		if req.ExpiresAt != nil {
			t, err := parseTimestamp("expires_at", *req.ExpiresAt)
			if err != nil {
				return err
			}
			in.ExpiresAt = &t
		}
		l, err := svc.Create(r.Context(), principal(r.Context()).UserID, in)
		if err != nil {
			return err
		}
		encode(w, http.StatusCreated, map[string]any{"success": true, "link": viewLink(svc, l, now())})
		return nil
	}
}

func handleUpdateLink(svc *links.Service, now func() time.Time) handlerFunc {
	type request struct {
		Name      optional[string]      `json:"name"`
		Status    optional[string]      `json:"status"`
		ExpiresAt optional[string]      `json:"expires_at"`
		UseLimit  optional[json.Number] `json:"use_limit"`
		// Extensions: null removes each.
		MaxConcurrent     optional[json.Number]     `json:"max_concurrent_sessions"`
		VisitorStarts     optional[json.Number]     `json:"max_starts_per_visitor_per_minute"`
		AllowedOrigins    optional[json.RawMessage] `json:"allowed_origins"`
		MaxSessionMinutes optional[json.Number]     `json:"max_session_minutes"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decodeOptional[request](r)
		if err != nil {
			return err
		}
		c := links.Changes{
			Name: req.Name.ptr(), ClearName: req.Name.Null, Status: req.Status.ptr(),
			ClearExpires: req.ExpiresAt.Null, ClearUseLimit: req.UseLimit.Null,
			Present: req.Name.Set || req.Status.Set || req.ExpiresAt.Set || req.UseLimit.Set ||
				req.MaxConcurrent.Set || req.VisitorStarts.Set || req.AllowedOrigins.Set || req.MaxSessionMinutes.Set,
			Policy: domain.LinkPolicy{
				MaxConcurrent: policyNumber(req.MaxConcurrent.ptr()), VisitorStartsPerMinute: policyNumber(req.VisitorStarts.ptr()),
				MaxSessionMinutes: policyNumber(req.MaxSessionMinutes.ptr()),
			},
			SetMaxConcurrent: req.MaxConcurrent.Set, SetVisitorStarts: req.VisitorStarts.Set,
			SetOrigins: req.AllowedOrigins.Set, SetMaxMinutes: req.MaxSessionMinutes.Set,
		}
		if v := req.AllowedOrigins.ptr(); v != nil {
			if c.Policy.AllowedOrigins, err = originList(*v); err != nil {
				return err
			}
		}
		if req.Status.Null {
			return domain.Errorf(domain.Invalid, "status cannot be null").WithSuggestion("Use active, paused or expired")
		}
		if v := req.ExpiresAt.ptr(); v != nil {
			t, err := parseTimestamp("expires_at", *v)
			if err != nil {
				return err
			}
			c.ExpiresAt = &t
		}
		if v := req.UseLimit.ptr(); v != nil {
			n, ok := wholeNumber(*v)
			c.UseLimit, c.InvalidUseLimitNumber = &n, !ok
		}
		l, err := svc.Update(r.Context(), principal(r.Context()).UserID, r.PathValue("link_id"), c)
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]any{"success": true, "link": viewLink(svc, l, now())})
		return nil
	}
}

func handleDeleteLink(svc *links.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := svc.Delete(r.Context(), principal(r.Context()).UserID, r.PathValue("link_id")); err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]bool{"success": true})
		return nil
	}
}

// handleStartViaLink is the public route: no API key, the link id is the
// credential. It is rate limited per client address (by withRoute), then,
// once the link has passed its own checks, per visitor (the link and the
// client address: the link's max_starts_per_visitor_per_minute) and per link
// (150 a minute). The visitor's count comes first, so one address cannot
// use up the link's bucket, nor start more than a few of the owner's
// sessions a minute. Refusals for the link's state (paused, expired, used
// up, busy, another origin) count against neither, as they cost nothing.
func handleStartViaLink(svc *links.Service, limiter Limiter) handlerFunc {
	type request struct {
		LinkID      string `json:"link_id"`
		AspectRatio string `json:"aspect_ratio"`
	}
	type response struct {
		Success          bool   `json:"success"`
		SessionID        string `json:"session_id"`
		RTCURL           string `json:"rtc_url"`
		ParticipantToken string `json:"participant_token"`
		AgentIdentity    string `json:"agent_identity"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decode[request](r)
		if err != nil {
			return err
		}
		if req.LinkID == "" {
			return domain.Errorf(domain.Invalid, "link_id is required")
		}
		l, err := svc.Open(r.Context(), req.LinkID, r.Header.Get("Origin"))
		if err != nil {
			return err
		}
		if err := admit(w, r, limiter, "link:"+l.ID+"#ip:"+domain.VisitorAddress(clientIP(r)), ratelimit.LinkVisitor, l.VisitorStartLimit()); err != nil {
			return err
		}
		if err := admit(w, r, limiter, "link:"+l.ID, ratelimit.SessionStart, ratelimit.Limits[ratelimit.SessionStart]); err != nil {
			return err
		}
		st, err := svc.Start(r.Context(), l, req.AspectRatio)
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, response{
			Success: true, SessionID: st.SessionID, RTCURL: st.RoomURL, ParticipantToken: st.ParticipantToken,
			AgentIdentity: st.AgentIdentity,
		})
		return nil
	}
}

// admit counts a link start against one of its buckets. A refusal reports
// that bucket in the RateLimit headers (withRoute set the address's), so
// the caller sees which limit it hit. A counter outage fails open, as in
// withRoute.
func admit(w http.ResponseWriter, r *http.Request, limiter Limiter, subject string, class ratelimit.Class, limit int) error {
	dec, err := limiter.AllowWithin(r.Context(), subject, class, limit)
	if err != nil || dec.Allowed {
		return nil
	}
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(dec.Limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(dec.Remaining))
	h.Set("RateLimit-Reset", strconv.Itoa(dec.Reset))
	h.Set("Retry-After", strconv.Itoa(dec.Reset))
	return domain.Errorf(domain.RateLimited, rateLimitBody)
}
