package httpapi

import (
	"encoding/json"
	"net/http"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/webhooks"
)

// Webhooks (an API extension): an account's lifecycle event endpoints and
// their delivery log.

type webhookView struct {
	WebhookID      string   `json:"webhook_id"`
	URL            string   `json:"url"`
	Events         []string `json:"events"`
	Description    string   `json:"description"`
	Enabled        bool     `json:"enabled"`
	DisabledReason *string  `json:"disabled_reason"`
	FailingSince   *string  `json:"failing_since"`
	CreatedAt      string   `json:"created_at"`
	UpdatedAt      string   `json:"updated_at"`
	// Secret is shown once, in the answer to its registration.
	Secret string `json:"secret,omitempty"`
}

func viewWebhook(w domain.Webhook) webhookView {
	v := webhookView{WebhookID: w.ID, URL: w.URL, Events: w.Events, Description: w.Description, Enabled: w.Enabled,
		FailingSince: isoOrNull(w.FailingSince), CreatedAt: iso(w.CreatedAt), UpdatedAt: iso(w.UpdatedAt)}
	if w.DisabledReason != "" {
		v.DisabledReason = &w.DisabledReason
	}
	return v
}

type deliveryView struct {
	DeliveryID    string          `json:"delivery_id"`
	WebhookID     string          `json:"webhook_id"`
	MessageID     string          `json:"message_id"`
	EventType     string          `json:"event_type"`
	Status        string          `json:"status"`
	CreatedAt     string          `json:"created_at"`
	NextAttemptAt *string         `json:"next_attempt_at"`
	Attempts      []attemptView   `json:"attempts"`
	Payload       json.RawMessage `json:"payload"`
}

type attemptView struct {
	At         string  `json:"at"`
	StatusCode *int    `json:"status_code"`
	LatencyMS  int64   `json:"latency_ms"`
	Error      *string `json:"error"`
}

func viewDelivery(d domain.WebhookDelivery) deliveryView {
	v := deliveryView{DeliveryID: d.ID, WebhookID: d.WebhookID, MessageID: d.MessageID, EventType: d.EventType,
		Status: string(d.Status), CreatedAt: iso(d.CreatedAt), Attempts: []attemptView{}, Payload: d.Payload}
	if d.Status == domain.DeliveryPending {
		v.NextAttemptAt = isoOrNull(d.NextAttemptAt)
	}
	for _, a := range d.Attempts {
		av := attemptView{At: iso(a.At), LatencyMS: a.LatencyMS}
		if a.StatusCode != 0 {
			code := a.StatusCode
			av.StatusCode = &code
		}
		if a.Error != "" {
			e := a.Error
			av.Error = &e
		}
		v.Attempts = append(v.Attempts, av)
	}
	return v
}

type webhookRequest struct {
	URL         optional[string]   `json:"url"`
	Events      optional[[]string] `json:"events"`
	Description optional[string]   `json:"description"`
	Enabled     optional[bool]     `json:"enabled"`
}

func (r webhookRequest) input() (webhooks.Input, error) {
	for _, f := range []struct {
		name string
		null bool
	}{{"url", r.URL.Null}, {"events", r.Events.Null}, {"enabled", r.Enabled.Null}} {
		if f.null {
			return webhooks.Input{}, domain.Errorf(domain.Invalid, "%s cannot be null", f.name)
		}
	}
	in := webhooks.Input{URL: r.URL.ptr(), Events: r.Events.Value, EventsSet: r.Events.Set, Enabled: r.Enabled.ptr()}
	if r.Description.Set {
		d := r.Description.Value // null clears it
		in.Description = &d
	}
	return in, nil
}

func handleCreateWebhook(svc *webhooks.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decode[webhookRequest](r)
		if err != nil {
			return err
		}
		in, err := req.input()
		if err != nil {
			return err
		}
		hook, err := svc.Create(r.Context(), principal(r.Context()).UserID, in)
		if err != nil {
			return err
		}
		v := viewWebhook(hook)
		v.Secret = hook.Secret
		encode(w, http.StatusCreated, map[string]any{"success": true, "webhook": v})
		return nil
	}
}

func handleListWebhooks(svc *webhooks.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		hooks, err := svc.List(r.Context(), principal(r.Context()).UserID)
		if err != nil {
			return err
		}
		views := make([]webhookView, len(hooks))
		for i, h := range hooks {
			views[i] = viewWebhook(h)
		}
		encode(w, http.StatusOK, map[string]any{"success": true, "webhooks": views})
		return nil
	}
}

func handleGetWebhook(svc *webhooks.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		hook, err := svc.Get(r.Context(), principal(r.Context()).UserID, r.PathValue("webhook_id"))
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]any{"success": true, "webhook": viewWebhook(hook)})
		return nil
	}
}

func handleUpdateWebhook(svc *webhooks.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		req, err := decode[webhookRequest](r)
		if err != nil {
			return err
		}
		if !req.URL.Set && !req.Events.Set && !req.Description.Set && !req.Enabled.Set {
			return domain.Errorf(domain.Invalid, "No fields to update").
				WithSuggestion("Pass at least one of url, events, description, enabled")
		}
		in, err := req.input()
		if err != nil {
			return err
		}
		hook, err := svc.Update(r.Context(), principal(r.Context()).UserID, r.PathValue("webhook_id"), in)
		if err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]any{"success": true, "webhook": viewWebhook(hook)})
		return nil
	}
}

func handleDeleteWebhook(svc *webhooks.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		if err := svc.Delete(r.Context(), principal(r.Context()).UserID, r.PathValue("webhook_id")); err != nil {
			return err
		}
		encode(w, http.StatusOK, map[string]bool{"success": true})
		return nil
	}
}

func handleRetryDelivery(svc *webhooks.Service) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		d, err := svc.Retry(r.Context(), principal(r.Context()).UserID, r.PathValue("webhook_id"), r.PathValue("delivery_id"))
		if err != nil {
			return err
		}
		encode(w, http.StatusAccepted, map[string]any{"success": true, "delivery": viewDelivery(d)})
		return nil
	}
}
