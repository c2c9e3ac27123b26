package httpapi

import (
	"encoding/json"
	"net/http"
	"time"

	"avatarsvc/shared/domain"
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

func handleStartSession(svc *sessions.Service) handlerFunc {
	type response struct {
		Success    bool    `json:"success"`
		WSURI      string  `json:"ws_uri"`
		Expiration *string `json:"expiration"`
		Message    string  `json:"message"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		st, err := svc.Start(r.Context(), principal(r.Context()).UserID, r.PathValue("session_id"), domain.EventStart)
		if err != nil {
			return err
		}
		msg := "Session started"
		if st.WSURI == domain.TryAgain {
			msg = "Session started; an avatar server is being allocated. Repeat this call in a few seconds to get ws_uri"
		}
		encode(w, http.StatusOK, response{Success: true, WSURI: st.WSURI, Expiration: isoOrNull(st.Session.Expiration), Message: msg})
		return nil
	}
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
