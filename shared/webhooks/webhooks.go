// Package webhooks is the service's own lifecycle webhooks (an API
// extension): the endpoints accounts register (Service), the events the
// service publishes into a queue when sessions start, near their expiration
// and end, and when links run out (Publisher), and the queue consumer that
// signs and POSTs them with retries (Deliverer).
//
// Deliveries follow the Standard Webhooks convention (webhook-id,
// webhook-timestamp, webhook-signature: v1,<base64 HMAC-SHA256 of
// "id.timestamp.body">, whsec_ secrets), so receivers can verify them with
// the off-the-shelf libraries. They go out from the queue, never from the
// request path that caused them.
package webhooks

import (
	"context"
	"encoding/json"
	"time"

	"avatarsvc/shared/domain"
)

// Store is the DynamoDB side (*store.Store).
type Store interface {
	CreateWebhook(ctx context.Context, w domain.Webhook) error
	GetWebhook(ctx context.Context, userID, id string) (domain.Webhook, error)
	WebhookByID(ctx context.Context, id string) (domain.Webhook, error)
	ListWebhooks(ctx context.Context, userID string) ([]domain.Webhook, error)
	UpdateWebhook(ctx context.Context, w domain.Webhook) error
	DeleteWebhook(ctx context.Context, userID, id string) error
	WebhookFailed(ctx context.Context, id string, at time.Time, disable string) error
	WebhookSucceeded(ctx context.Context, id string) error

	PutDelivery(ctx context.Context, d domain.WebhookDelivery) error
	GetDelivery(ctx context.Context, id string) (domain.WebhookDelivery, error)
	ListDeliveries(ctx context.Context, userID, webhookID string, page domain.Page) ([]domain.WebhookDelivery, string, error)
	RecordAttempt(ctx context.Context, d domain.WebhookDelivery, readSeq int) error
	RescheduleDelivery(ctx context.Context, userID, id string, at time.Time) (domain.WebhookDelivery, error)
}

// Queue carries delivery messages to the Deliverer (*SQSQueue).
type Queue interface {
	Send(ctx context.Context, m Message, delay time.Duration) error
}

// Message asks the Deliverer for one attempt of a delivery. It carries ids
// only: the payload and the secret stay in DynamoDB.
type Message struct {
	DeliveryID string `json:"delivery_id"`
	// Seq is the delivery's schedule number this message is for; a
	// message for an older one is stale and dropped.
	Seq int `json:"seq"`
	// WaitS is how much longer to wait before the attempt: SQS delays a
	// message by at most 15 minutes, so longer waits hop through the queue.
	WaitS int `json:"wait_s,omitempty"`
}

func parseMessage(body string) (Message, error) {
	var m Message
	err := json.Unmarshal([]byte(body), &m)
	if err == nil && m.DeliveryID == "" {
		err = errMalformed
	}
	return m, err
}

// Event is one thing that happened, as every subscribed endpoint receives
// it: the body is {"type", "timestamp", "data"}, the recommended shape of
// Standard Webhooks.
type Event struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      any       `json:"data"`
}
