package domain

import (
	"crypto/rand"
	"encoding/base64"
	"net/url"
	"slices"
	"strings"
	"time"
)

// Webhook is an endpoint an account registered to receive lifecycle
// events (an API extension). Deliveries follow the Standard Webhooks
// convention: webhook-id, webhook-timestamp and webhook-signature headers,
// signed with Secret.
type Webhook struct {
	ID          string
	UserID      string
	URL         string
	Events      []string // subscribed event types; empty never (validated)
	Description string
	Secret      string // whsec_<base64>; shown once, at registration
	Enabled     bool
	// DisabledReason says why the service disabled it (failing for
	// WebhookDisableAfter); empty when the owner disabled it or it is on.
	DisabledReason string
	// FailingSince is the first failed attempt since the last success;
	// zero while it succeeds.
	FailingSince time.Time
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// Lifecycle event types a webhook may subscribe to.
const (
	EventSessionStarted  = "session.started"  // the renderer serves it: ws_uri and room
	EventSessionEnded    = "session.ended"    // ended after serving: end_reason, billing, quality
	EventSessionFailed   = "session.failed"   // ended without ever being served: reason
	EventSessionExpiring = "session.expiring" // its expiration is near
	EventLinkExhausted   = "link.exhausted"   // a link reached its use limit or expired
)

// WebhookEventTypes are the event types in the order a session has them.
var WebhookEventTypes = []string{EventSessionStarted, EventSessionExpiring, EventSessionEnded, EventSessionFailed, EventLinkExhausted}

// Bounds on webhooks.
const (
	MaxWebhooksPerAccount  = 10
	maxWebhookURLLength    = 2048
	maxWebhookDescription  = 200
	WebhookPrefix          = "wh_"
	WebhookDeliveryPrefix  = "whdl_"
	WebhookMessagePrefix   = "msg_"
	WebhookSecretPrefix    = "whsec_"
	webhookSecretBytes     = 32
	WebhookDisableAfter    = 24 * time.Hour
	MaxWebhookAttemptsKept = 20
)

// Errors of webhook registration and delivery.
var (
	ErrWebhookNotFound  = Errorf(NotFound, "Webhook not found")
	ErrDeliveryNotFound = Errorf(NotFound, "Webhook delivery not found")
	ErrTooManyWebhooks  = Errorf(LimitExceeded, "Too many webhooks").
				WithSuggestion("An account may register up to 10 webhook endpoints; delete one first")
)

// NewWebhookID returns a fresh webhook id.
func NewWebhookID() string { return NewID(WebhookPrefix) }

// NewWebhookSecret returns a fresh signing secret in the Standard Webhooks
// form: whsec_ then the base64 of 32 random bytes.
func NewWebhookSecret() (string, error) {
	b := make([]byte, webhookSecretBytes)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return WebhookSecretPrefix + base64.StdEncoding.EncodeToString(b), nil
}

// ValidateWebhookURL checks the form of an endpoint URL: https with a host
// and no credentials, or http://127.0.0.1 when allowLoopbackHTTP (the local
// stack). Where it resolves is checked separately (netguard), at
// registration and again at every connection.
func ValidateWebhookURL(raw string, allowLoopbackHTTP bool) (*url.URL, error) {
	bad := func(why string) error {
		return Errorf(Invalid, "Invalid webhook url").WithSuggestion(why)
	}
	if raw == "" {
		return nil, bad("url is required: the https:// address that receives the events")
	}
	if len(raw) > maxWebhookURLLength {
		return nil, bad("The url is longer than 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return nil, bad("The url must be an absolute https:// address, such as https://example.com/hooks/avatar")
	}
	if u.User != nil {
		return nil, bad("The url must not carry credentials; verify deliveries by their webhook-signature instead")
	}
	if u.Fragment != "" {
		return nil, bad("The url must not have a #fragment")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowLoopbackHTTP && u.Hostname() == "127.0.0.1":
	default:
		return nil, bad("The url must use https://")
	}
	return u, nil
}

// ValidateWebhookEvents checks a subscription list: known types, no
// repeats, at least one. It returns them in WebhookEventTypes' order.
func ValidateWebhookEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return nil, Errorf(Invalid, "events must list at least one event type").
			WithSuggestion("Known event types: " + strings.Join(WebhookEventTypes, ", "))
	}
	var out []string
	for _, e := range events {
		if !slices.Contains(WebhookEventTypes, e) {
			return nil, Errorf(Invalid, "Unknown event type %q", truncate(e, 64)).
				WithSuggestion("Known event types: " + strings.Join(WebhookEventTypes, ", "))
		}
	}
	for _, e := range WebhookEventTypes {
		if slices.Contains(events, e) {
			out = append(out, e)
		}
	}
	return out, nil
}

// ValidateWebhookDescription bounds the free-text description.
func ValidateWebhookDescription(d string) error {
	if len(d) > maxWebhookDescription {
		return Errorf(Invalid, "description must be at most %d characters", maxWebhookDescription)
	}
	return nil
}

// Subscribes reports whether w is on and receives events of type t.
func (w Webhook) Subscribes(t string) bool { return w.Enabled && slices.Contains(w.Events, t) }

// ShouldDisable reports whether a webhook failing since its FailingSince
// has failed long enough, at now, to be turned off.
func (w Webhook) ShouldDisable(now time.Time) bool {
	return !w.FailingSince.IsZero() && now.Sub(w.FailingSince) >= WebhookDisableAfter
}

// WebhookDelivery is one event on its way to one endpoint, with every
// attempt made so far. Its MessageID is the webhook-id header: the same on
// every attempt, so receivers can drop repeats.
type WebhookDelivery struct {
	ID        string
	WebhookID string
	UserID    string
	MessageID string
	EventType string
	Payload   []byte // the signed body, exactly as sent
	Status    DeliveryStatus
	Attempts  []WebhookAttempt // oldest first; the last MaxWebhookAttemptsKept
	// Seq numbers the delivery's schedule: every (re)schedule bumps it,
	// and a queue message for an older Seq is stale.
	Seq           int
	NextAttemptAt time.Time // zero when none is scheduled
	CreatedAt     time.Time
}

// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

const (
	DeliveryPending   DeliveryStatus = "pending"   // an attempt is scheduled
	DeliverySucceeded DeliveryStatus = "succeeded" // an attempt got a 2xx
	DeliveryFailed    DeliveryStatus = "failed"    // the schedule ran out, or the endpoint is off
)

// WebhookAttempt is one POST to the endpoint.
type WebhookAttempt struct {
	At         time.Time
	StatusCode int    // 0 when no answer came
	LatencyMS  int64  // request sent to answer read (or failure)
	Error      string // why it failed; empty on a 2xx
}

// Succeeded reports whether the attempt got a 2xx answer.
func (a WebhookAttempt) Succeeded() bool { return a.StatusCode >= 200 && a.StatusCode < 300 }
