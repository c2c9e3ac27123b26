package httpapi

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/ratelimit"
	"avatarsvc/shared/sessions"
)

// maxMetadataBytes keeps a session item far below DynamoDB's 400 KB.
const maxMetadataBytes = 16 << 10

type createSessionRequest struct {
	Avatar      string         `json:"avatar"`
	AspectRatio string         `json:"aspect_ratio"`
	Room        *domain.Room   `json:"room"`
	Metadata    map[string]any `json:"metadata"`
}

func handleCreateSession(svc *sessions.Service) handlerFunc {
	type session struct {
		SessionID    string `json:"session_id"`
		Status       string `json:"status"`
		SessionToken string `json:"session_token"`
		CreatedAt    string `json:"created_at"`
	}
	type response struct {
		Success bool    `json:"success"`
		Session session `json:"session"`
		Message string  `json:"message"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decode[createSessionRequest](r)
		if err != nil {
			return err
		}
		if err := checkStorable(req.Metadata); err != nil {
			return err
		}
		if b, _ := json.Marshal(req.Metadata); len(b) > maxMetadataBytes {
			return domain.Errorf(domain.TooLarge, "metadata is too large").
				WithSuggestion("Keep metadata under 16 KiB of JSON")
		}
		p := principal(r.Context())
		c, err := svc.Create(r.Context(), p.UserID, p.KeyMode, sessions.CreateInput{
			Avatar: req.Avatar, AspectRatio: req.AspectRatio, Room: req.Room, Metadata: req.Metadata,
		})
		if err != nil {
			return err
		}
		encode(w, http.StatusCreated, response{
			Success: true,
			Session: session{SessionID: c.Session.ID, Status: string(c.Session.Status), SessionToken: c.Token, CreatedAt: iso(c.Session.CreatedAt)},
			Message: "Session created successfully. Call PUT /v1/sessions/{session_id}/start to start it.",
		})
		return nil
	}
}

func handleGetSession(svc *sessions.Service, now func() time.Time) handlerFunc {
	type response struct {
		Success bool        `json:"success"`
		Session sessionView `json:"session"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		s, err := svc.Get(r.Context(), principal(r.Context()).UserID, r.PathValue("session_id"))
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, response{Success: true, Session: viewSession(s, now())})
		return nil
	}
}

// maxStartWait bounds PUT start's ?wait= (seconds): the function's timeout
// is 25 s and API Gateway's 30 s.
const maxStartWait = 20

func handleStartSession(svc *sessions.Service) handlerFunc {
	type response struct {
		Success    bool    `json:"success"`
		WSURI      string  `json:"ws_uri"`
		Expiration *string `json:"expiration"`
		Message    string  `json:"message"`
		// Extensions, while ws_uri is try_again: where the start is and
		// when to ask again.
		Stage        string `json:"stage,omitempty"`
		RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		wait, err := startWait(r)
		if err != nil {
			return err
		}
		user, id := principal(r.Context()).UserID, r.PathValue("session_id")
		st, err := svc.Start(r.Context(), user, id, domain.EventStart)
		if err != nil {
			return err
		}
		if st.WSURI == domain.TryAgain && wait > 0 {
			svc.AwaitRenderer(r.Context(), user, id, time.Now().Add(wait))
			if st, err = svc.Start(r.Context(), user, id, domain.EventStart); err != nil {
				return err // it ended while we waited: the answer a repeat gets
			}
		}
		out := response{Success: true, WSURI: st.WSURI, Expiration: isoOrNull(st.Session.Expiration), Message: "Session started"}
		if st.WSURI == domain.TryAgain {
			out.Stage = st.Session.StartStage()
			retry := domain.StageRetryAfter(out.Stage)
			out.RetryAfterMS = retry.Milliseconds()
			out.Message = "Session started; an avatar server is being allocated (" + out.Stage + "). Repeat this call in " +
				strconv.FormatInt(out.RetryAfterMS, 10) + " ms, or with ?wait=" + strconv.Itoa(maxStartWait) + " to be answered when ws_uri is known"
			// Retry-After is whole seconds: the body's retry_after_ms is finer.
			w.Header().Set("Retry-After", "1")
		}
		encode(w, http.StatusOK, out)
		return nil
	}
}

// startRepeatsCountAsReads: PUT start on a session already started (a
// caller asking for its ws_uri) starts nothing, so it counts against the
// read quota, not the start quota.
func startRepeatsCountAsReads(svc *sessions.Service) func(r *http.Request) ratelimit.Class {
	return func(r *http.Request) ratelimit.Class {
		s, err := svc.Get(r.Context(), principal(r.Context()).UserID, r.PathValue("session_id"))
		if err == nil && s.Status == domain.StatusStarted {
			return ratelimit.Read
		}
		return ratelimit.SessionStart
	}
}

// startWait reads PUT start's optional ?wait=<seconds>.
func startWait(r *http.Request) (time.Duration, error) {
	raw := r.URL.Query().Get("wait")
	if raw == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil || n < 0 || n > maxStartWait {
		return 0, domain.Errorf(domain.Invalid, "Invalid wait").
			WithSuggestion(fmt.Sprintf("wait is a whole number of seconds from 0 to %d", maxStartWait))
	}
	return time.Duration(n) * time.Second, nil
}

func handleStartSessionOnce(svc *sessions.Service) handlerFunc {
	type response struct {
		Success bool   `json:"success"`
		Message string `json:"message"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		if _, err := svc.Start(r.Context(), principal(r.Context()).UserID, r.PathValue("session_id"), domain.EventStartOnce); err != nil {
			return err
		}
		encode(w, http.StatusOK, response{Success: true, Message: "Session started successfully"})
		return nil
	}
}

func handleEndSession(svc *sessions.Service, now func() time.Time) handlerFunc {
	type response struct {
		Success bool        `json:"success"`
		Session sessionView `json:"session"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		s, err := svc.End(r.Context(), principal(r.Context()).UserID, r.PathValue("session_id"))
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, response{Success: true, Session: viewSession(s, now())})
		return nil
	}
}

// DefaultExtendMinutes is an extension's length when the body names none.
const DefaultExtendMinutes = 5

// handleExtendSession moves a started session's expiration later (an
// extension): {"minutes": n}, 1..60, default 5; it may grant less (the
// plan's session cap, the unreserved minutes) and says how much.
func handleExtendSession(svc *sessions.Service, now func() time.Time) handlerFunc {
	type request struct {
		Minutes *float64 `json:"minutes"`
	}
	type response struct {
		Success      bool        `json:"success"`
		Session      sessionView `json:"session"`
		MinutesAdded int         `json:"minutes_added"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		minutes := DefaultExtendMinutes
		if r.ContentLength != 0 {
			req, err := decode[request](r)
			if err != nil {
				return err
			}
			if m := req.Minutes; m != nil {
				minutes = 0 // refused by the range check, by name, unless whole and in range
				if *m == math.Trunc(*m) && *m >= 1 && *m <= domain.MaxExtendMinutes {
					minutes = int(*m)
				}
			}
		}
		ext, err := svc.Extend(r.Context(), principal(r.Context()).UserID, r.PathValue("session_id"), minutes)
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, response{Success: true, Session: viewSession(ext.Session, now()), MinutesAdded: ext.MinutesAdded})
		return nil
	}
}

func handleDeleteSession(svc *sessions.Service) handlerFunc {
	type response struct {
		Success bool   `json:"success"`
		Message string `json:"message"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := svc.Delete(r.Context(), principal(r.Context()).UserID, r.PathValue("session_id")); err != nil {
			return err
		}
		encode(w, http.StatusOK, response{Success: true, Message: "Session deleted"})
		return nil
	}
}

func handleUsage(svc *sessions.Service, now func() time.Time) handlerFunc {
	type response struct {
		Success bool      `json:"success"`
		Usage   usageView `json:"usage"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		u, err := svc.Usage(r.Context(), principal(r.Context()).UserID)
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, response{Success: true, Usage: viewUsage(u, now())})
		return nil
	}
}
