package httpapi

import (
	"net/http"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/livekit"
	"avatarsvc/shared/roomhost"
)

func handleInitiateRoom(svc *roomhost.Service) handlerFunc {
	type request struct {
		Avatar              string `json:"avatar"`
		AspectRatio         string `json:"aspect_ratio"`
		VoiceID             string `json:"voice_id"`
		EnableTranscription *bool  `json:"enable_transcription"`
		AgentID             string `json:"agent_id"`
	}
	type room struct {
		Name  string `json:"name"`
		URL   string `json:"url"`
		Token string `json:"token"`
	}
	type response struct {
		Success   bool   `json:"success"`
		Room      room   `json:"room"`
		SessionID string `json:"session_id"`
	}
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decodeOptional[request](r)
		if err != nil {
			return err
		}
		transcribe := req.EnableTranscription == nil || *req.EnableTranscription
		p := principal(r.Context())
		in, err := svc.Initiate(r.Context(), p.UserID, p.KeyMode, roomhost.Request{
			Avatar: req.Avatar, AspectRatio: req.AspectRatio, VoiceID: req.VoiceID, Transcription: transcribe, Agent: req.AgentID,
		})
		if err != nil {
			return err
		}
		encode(w, http.StatusCreated, response{
			Success: true, Room: room{Name: in.Room.Name, URL: in.Room.URL, Token: in.Room.UserToken}, SessionID: in.SessionID,
		})
		return nil
	}
}

// WebhookVerifier checks LiveKit's webhook signatures (shared/livekit).
type WebhookVerifier interface {
	ReceiveWebhook(r *http.Request) (livekit.Event, error)
}

// handleLiveKitWebhook receives livekit-server's webhooks. The body is
// verified against the signed Authorization header (the LiveKit API secret
// signs it), so nobody else can start or end sessions through this public
// route.
func handleLiveKitWebhook(svc *roomhost.Service, verifier WebhookVerifier) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if verifier == nil {
			return roomhost.ErrNotConfigured
		}
		ev, err := verifier.ReceiveWebhook(r)
		if err != nil {
			return domain.Errorf(domain.Unauthorized, "Invalid webhook signature")
		}
		if err := svc.HandleEvent(r.Context(), ev); err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]bool{"success": true})
		return nil
	}
}
