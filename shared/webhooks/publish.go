package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"avatarsvc/shared/domain"
)

// Publisher turns an event into one delivery per subscribed endpoint of the
// account: the delivery is written to DynamoDB, then a message for it is
// queued; the Deliverer does the rest.
type Publisher struct {
	store Store
	queue Queue
	now   func() time.Time
	log   *slog.Logger
}

// NewPublisher returns a Publisher.
func NewPublisher(st Store, q Queue, now func() time.Time, log *slog.Logger) *Publisher {
	return &Publisher{store: st, queue: q, now: now, log: log}
}

// Publish fans ev out to userID's endpoints that subscribe to its type.
// It is called after the change it reports has committed; it runs on its
// own short deadline so a caller's cancelled context does not drop it.
// A failure is logged with the event and returned.
func (p *Publisher) Publish(ctx context.Context, userID string, ev Event) error {
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	hooks, err := p.store.ListWebhooks(ctx, userID)
	if err != nil {
		return p.failed(ctx, userID, ev, err)
	}
	var body []byte
	msgID := domain.NewID(domain.WebhookMessagePrefix)
	var errs []error
	for _, h := range hooks {
		if !h.Subscribes(ev.Type) {
			continue
		}
		if body == nil {
			if body, err = json.Marshal(ev); err != nil {
				return p.failed(ctx, userID, ev, err)
			}
		}
		d := domain.WebhookDelivery{
			ID: domain.NewID(domain.WebhookDeliveryPrefix), WebhookID: h.ID, UserID: userID, MessageID: msgID,
			EventType: ev.Type, Payload: body, Status: domain.DeliveryPending, Seq: 1, NextAttemptAt: p.now(), CreatedAt: p.now(),
		}
		if err := p.store.PutDelivery(ctx, d); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := p.queue.Send(ctx, Message{DeliveryID: d.ID, Seq: d.Seq}, 0); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return p.failed(ctx, userID, ev, err)
	}
	return nil
}

func (p *Publisher) failed(ctx context.Context, userID string, ev Event, err error) error {
	p.log.ErrorContext(ctx, "publish webhook event", "user_id", userID, "event", ev.Type, "err", err)
	return fmt.Errorf("publish %s: %w", ev.Type, err)
}

// SQSQueue is the webhook delivery queue.
type SQSQueue struct {
	client *sqs.Client
	url    string
}

// NewSQSQueue returns the queue at url.
func NewSQSQueue(client *sqs.Client, url string) *SQSQueue {
	return &SQSQueue{client: client, url: url}
}

// maxSQSDelay is the longest delay SQS gives one message.
const maxSQSDelay = 15 * time.Minute

// Send queues m, delivered after delay (at most 15 minutes: a longer wait
// goes in m.WaitS and hops).
func (q *SQSQueue) Send(ctx context.Context, m Message, delay time.Duration) error {
	if delay > maxSQSDelay {
		m.WaitS += int((delay - maxSQSDelay) / time.Second)
		delay = maxSQSDelay
	}
	body, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = q.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl: aws.String(q.url), MessageBody: aws.String(string(body)), DelaySeconds: int32(max(delay, 0) / time.Second),
	})
	if err != nil {
		return fmt.Errorf("queue webhook delivery %s: %w", m.DeliveryID, err)
	}
	return nil
}
