package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/netguard"
)

// Service is the API side: registering endpoints, reading their delivery
// log and resending a delivery.
type Service struct {
	store  Store
	queue  Queue
	policy netguard.Policy
	now    func() time.Time
}

// NewService returns a Service. policy is the Deliverer's: an endpoint it
// would refuse is refused at registration.
func NewService(st Store, q Queue, policy netguard.Policy, now func() time.Time) *Service {
	return &Service{store: st, queue: q, policy: policy, now: now}
}

// Input is what a caller registers or changes; nil fields are unchanged
// on update.
type Input struct {
	URL         *string
	Events      []string
	EventsSet   bool
	Description *string
	Enabled     *bool
}

// Create registers an endpoint; the result carries its secret, which is
// shown this once.
func (s *Service) Create(ctx context.Context, userID string, in Input) (domain.Webhook, error) {
	if in.URL == nil {
		return domain.Webhook{}, domain.Errorf(domain.Invalid, "url is required").
			WithSuggestion("The https:// address that receives the events")
	}
	if !in.EventsSet {
		return domain.Webhook{}, domain.Errorf(domain.Invalid, "events is required").
			WithSuggestion("List the event types to receive, such as [\"session.started\", \"session.ended\"]")
	}
	now := s.now().UTC()
	w := domain.Webhook{ID: domain.NewWebhookID(), UserID: userID, Enabled: true, CreatedAt: now, UpdatedAt: now}
	if err := s.apply(ctx, &w, in); err != nil {
		return domain.Webhook{}, err
	}
	secret, err := domain.NewWebhookSecret()
	if err != nil {
		return domain.Webhook{}, domain.Wrap(err, "Internal server error")
	}
	w.Secret = secret
	if err := s.store.CreateWebhook(ctx, w); err != nil {
		return domain.Webhook{}, err
	}
	return w, nil
}

// apply validates in and writes it on w.
func (s *Service) apply(ctx context.Context, w *domain.Webhook, in Input) error {
	if in.URL != nil {
		if err := s.checkURL(ctx, *in.URL); err != nil {
			return err
		}
		w.URL = *in.URL
	}
	if in.EventsSet {
		events, err := domain.ValidateWebhookEvents(in.Events)
		if err != nil {
			return err
		}
		w.Events = events
	}
	if in.Description != nil {
		if err := domain.ValidateWebhookDescription(*in.Description); err != nil {
			return err
		}
		w.Description = *in.Description
	}
	if in.Enabled != nil {
		if *in.Enabled && !w.Enabled {
			// Turned back on: it starts with a clean failure record.
			w.DisabledReason, w.FailingSince = "", time.Time{}
		}
		w.Enabled = *in.Enabled
	}
	return nil
}

// checkURL refuses what the Deliverer would never reach: not https (http
// only to 127.0.0.1 where the policy allows loopback, in the local stack),
// a host that does not resolve, or one resolving to a refused address.
func (s *Service) checkURL(ctx context.Context, raw string) error {
	u, err := domain.ValidateWebhookURL(raw, s.policy.AddrAllowed(loopback))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := s.policy.CheckURL(ctx, u.String()); err != nil {
		why := "Its host could not be resolved; register an address that resolves now"
		if errors.Is(err, netguard.ErrAddressNotAllowed) || errors.Is(err, netguard.ErrHostNotAllowed) {
			why = "It resolves to a private, loopback or reserved address; webhooks go to public https endpoints only"
		}
		return domain.Errorf(domain.Invalid, "Invalid webhook url").WithSuggestion(why)
	}
	return nil
}

// Get returns an endpoint of userID's.
func (s *Service) Get(ctx context.Context, userID, id string) (domain.Webhook, error) {
	return s.own(ctx, userID, id)
}

// own reads an endpoint of userID's; an id no endpoint could have (any
// length a path allows) is not found without asking DynamoDB, whose keys
// are bounded.
func (s *Service) own(ctx context.Context, userID, id string) (domain.Webhook, error) {
	if !strings.HasPrefix(id, domain.WebhookPrefix) || !domain.PlausibleID(id) {
		return domain.Webhook{}, domain.ErrWebhookNotFound
	}
	return s.store.GetWebhook(ctx, userID, id)
}

// List returns userID's endpoints, newest first.
func (s *Service) List(ctx context.Context, userID string) ([]domain.Webhook, error) {
	return s.store.ListWebhooks(ctx, userID)
}

// Update changes an endpoint's url, events, description or enabled.
func (s *Service) Update(ctx context.Context, userID, id string, in Input) (domain.Webhook, error) {
	w, err := s.own(ctx, userID, id)
	if err != nil {
		return domain.Webhook{}, err
	}
	if err := s.apply(ctx, &w, in); err != nil {
		return domain.Webhook{}, err
	}
	w.UpdatedAt = s.now().UTC()
	if err := s.store.UpdateWebhook(ctx, w); err != nil {
		return domain.Webhook{}, err
	}
	return w, nil
}

// Delete removes an endpoint; its pending deliveries fail.
func (s *Service) Delete(ctx context.Context, userID, id string) error {
	if _, err := s.own(ctx, userID, id); err != nil {
		return err
	}
	return s.store.DeleteWebhook(ctx, userID, id)
}

// Deliveries returns a page of an endpoint's deliveries, newest first.
func (s *Service) Deliveries(ctx context.Context, userID, id string, page domain.Page) ([]domain.WebhookDelivery, string, error) {
	if _, err := s.own(ctx, userID, id); err != nil {
		return nil, "", err
	}
	return s.store.ListDeliveries(ctx, userID, id, page)
}

// Retry resends a delivery now, whatever its status. If that attempt
// fails, the schedule goes on from where its attempt count stands (a
// delivery that already used all of it stays failed).
func (s *Service) Retry(ctx context.Context, userID, webhookID, deliveryID string) (domain.WebhookDelivery, error) {
	if _, err := s.own(ctx, userID, webhookID); err != nil {
		return domain.WebhookDelivery{}, err
	}
	if !strings.HasPrefix(deliveryID, domain.WebhookDeliveryPrefix) || !domain.PlausibleID(deliveryID) {
		return domain.WebhookDelivery{}, domain.ErrDeliveryNotFound
	}
	d, err := s.store.GetDelivery(ctx, deliveryID)
	if err != nil || d.UserID != userID || d.WebhookID != webhookID {
		if err == nil || errors.Is(err, domain.ErrDeliveryNotFound) {
			return domain.WebhookDelivery{}, domain.ErrDeliveryNotFound
		}
		return domain.WebhookDelivery{}, err
	}
	d, err = s.store.RescheduleDelivery(ctx, userID, deliveryID, s.now().UTC())
	if err != nil {
		return domain.WebhookDelivery{}, err
	}
	if err := s.queue.Send(ctx, Message{DeliveryID: d.ID, Seq: d.Seq}, 0); err != nil {
		return domain.WebhookDelivery{}, &domain.Error{Code: domain.Unavailable, Message: "The service is busy, please retry",
			Err: fmt.Errorf("queue the retry: %w", err)}
	}
	return d, nil
}

var loopback = netip.MustParseAddr("127.0.0.1")
