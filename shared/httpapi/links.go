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
}

func viewLink(svc *links.Service, l links.Link, now time.Time) linkView {
	v := linkView{
		LinkID: l.ID, Name: l.Name, URL: svc.URL(l.ID), Agent: viewAgent(l.Agent), Status: string(l.StatusAt(now)),
		Uses: l.Uses, UseLimit: l.UseLimit, CreatedAt: iso(l.CreatedAt),
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

// positiveInt reads a JSON number that must be a whole number.
func wholeNumber(n json.Number) (int, bool) {
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) || f > math.MaxInt32 || f < math.MinInt32 {
		return 0, false
	}
	return int(f), true
}

func handleCreateLink(svc *links.Service, now func() time.Time) handlerFunc {
	type request struct {
		AgentID   flexibleID   `json:"agent_id"`
		Name      *string      `json:"name"`
		UseLimit  *json.Number `json:"use_limit"`
		ExpiresAt *string      `json:"expires_at"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decode[request](r)
		if err != nil {
			return err
		}
		in := links.CreateInput{AgentID: string(req.AgentID), Name: req.Name}
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
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decodeOptional[request](r)
		if err != nil {
			return err
		}
		c := links.Changes{
			Name: req.Name.ptr(), ClearName: req.Name.Null, Status: req.Status.ptr(),
			ClearExpires: req.ExpiresAt.Null, ClearUseLimit: req.UseLimit.Null,
			Present: req.Name.Set || req.Status.Set || req.ExpiresAt.Set || req.UseLimit.Set,
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
// credential. It is rate limited per client address (by withRoute) and per
// link (here), so one leaked link cannot be hammered from many addresses.
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
		if id, err := domain.ParseLinkID(req.LinkID); err == nil {
			dec, err := limiter.Allow(r.Context(), "link:"+id, ratelimit.SessionStart)
			if err == nil && !dec.Allowed {
				w.Header().Set("Retry-After", strconv.Itoa(dec.Reset))
				return domain.Errorf(domain.RateLimited, rateLimitBody)
			}
		}
		st, err := svc.Start(r.Context(), req.LinkID, req.AspectRatio)
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
