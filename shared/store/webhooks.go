// Webhook endpoints and their deliveries (an API extension). An account's
// endpoint count is kept on its user item, so the limit holds under
// concurrent registrations (one transaction with the endpoint's put).

package store

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

type webhookItem struct {
	WebhookID      string   `dynamo:"webhook_id,hash"`
	UserID         string   `dynamo:"user_id"`
	URL            string   `dynamo:"url"`
	Events         []string `dynamo:"events,set"`
	Description    string   `dynamo:"description,omitempty"`
	Secret         string   `dynamo:"secret"`
	Enabled        bool     `dynamo:"enabled"`
	DisabledReason string   `dynamo:"disabled_reason,omitempty"`
	FailingSince   string   `dynamo:"failing_since,omitempty"`
	CreatedAt      string   `dynamo:"created_at"`
	UpdatedAt      string   `dynamo:"updated_at"`
}

func toWebhookItem(w domain.Webhook) webhookItem {
	return webhookItem{WebhookID: w.ID, UserID: w.UserID, URL: w.URL, Events: w.Events, Description: w.Description,
		Secret: w.Secret, Enabled: w.Enabled, DisabledReason: w.DisabledReason, FailingSince: formatTime(w.FailingSince),
		CreatedAt: formatTime(w.CreatedAt), UpdatedAt: formatTime(w.UpdatedAt)}
}

func (it webhookItem) domain() domain.Webhook {
	return domain.Webhook{ID: it.WebhookID, UserID: it.UserID, URL: it.URL, Events: sortedEvents(it.Events),
		Description: it.Description, Secret: it.Secret, Enabled: it.Enabled, DisabledReason: it.DisabledReason,
		FailingSince: parseTime(it.FailingSince), CreatedAt: parseTime(it.CreatedAt), UpdatedAt: parseTime(it.UpdatedAt)}
}

// sortedEvents puts a stored set (unordered) back in the documented order.
func sortedEvents(set []string) []string {
	out, err := domain.ValidateWebhookEvents(set)
	if err != nil {
		return set
	}
	return out
}

// CreateWebhook stores a new endpoint and counts it on the account, which
// may hold at most domain.MaxWebhooksPerAccount.
func (s *Store) CreateWebhook(ctx context.Context, w domain.Webhook) error {
	put := s.webhooks.Put(toWebhookItem(w)).If("attribute_not_exists($)", "webhook_id")
	count := s.users.Update("user_id", w.UserID).Add("webhook_count", 1).
		If("attribute_exists($)", "user_id").
		If("(attribute_not_exists($) OR $ < ?)", "webhook_count", "webhook_count", domain.MaxWebhooksPerAccount)
	err := s.runTx(ctx, s.db.WriteTx().Put(put).Update(count))
	if reasons, _ := cancelReasons(err); len(reasons) == 2 && reasons[1] {
		return domain.ErrTooManyWebhooks
	}
	if err != nil {
		return unavailable(err, "create webhook")
	}
	return nil
}

// GetWebhook reads an endpoint of userID's; another account's is not found.
func (s *Store) GetWebhook(ctx context.Context, userID, id string) (domain.Webhook, error) {
	w, err := s.WebhookByID(ctx, id)
	if err == nil && w.UserID != userID {
		return domain.Webhook{}, domain.ErrWebhookNotFound
	}
	return w, err
}

// WebhookByID reads an endpoint whoever owns it (the delivery side).
func (s *Store) WebhookByID(ctx context.Context, id string) (domain.Webhook, error) {
	var it webhookItem
	err := s.webhooks.Get("webhook_id", id).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) {
		return domain.Webhook{}, domain.ErrWebhookNotFound
	}
	if err != nil {
		return domain.Webhook{}, unavailable(err, "get webhook")
	}
	return it.domain(), nil
}

// ListWebhooks returns an account's endpoints, newest first (at most
// domain.MaxWebhooksPerAccount, so one page).
func (s *Store) ListWebhooks(ctx context.Context, userID string) ([]domain.Webhook, error) {
	var items []webhookItem
	if err := s.webhooks.Get("user_id", userID).Index(byUserIndex).Order(dynamo.Descending).All(ctx, &items); err != nil {
		return nil, unavailable(err, "list webhooks")
	}
	out := make([]domain.Webhook, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	return out, nil
}

// UpdateWebhook writes an endpoint's editable fields (url, events,
// description, enabled and the failure state that goes with them).
func (s *Store) UpdateWebhook(ctx context.Context, w domain.Webhook) error {
	u := s.webhooks.Update("webhook_id", w.ID).
		Set("url", w.URL).SetSet("events", w.Events).Set("enabled", w.Enabled).Set("updated_at", formatTime(w.UpdatedAt)).
		If("$ = ?", "user_id", w.UserID)
	u = setOrRemoveString(u, "description", w.Description)
	u = setOrRemoveString(u, "disabled_reason", w.DisabledReason)
	u = setOrRemoveString(u, "failing_since", formatTime(w.FailingSince))
	err := u.Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return domain.ErrWebhookNotFound
	}
	if err != nil {
		return unavailable(err, "update webhook")
	}
	return nil
}

func setOrRemoveString(u *dynamo.Update, name, v string) *dynamo.Update {
	if v == "" {
		return u.Remove(name)
	}
	return u.Set(name, v)
}

// DeleteWebhook removes an endpoint and uncounts it. Its deliveries stay
// until their TTL; pending ones fail as the endpoint is gone.
func (s *Store) DeleteWebhook(ctx context.Context, userID, id string) error {
	del := s.webhooks.Delete("webhook_id", id).If("$ = ?", "user_id", userID)
	count := s.users.Update("user_id", userID).Add("webhook_count", -1)
	err := s.runTx(ctx, s.db.WriteTx().Delete(del).Update(count))
	if reasons, _ := cancelReasons(err); len(reasons) > 0 && reasons[0] {
		return domain.ErrWebhookNotFound
	}
	if err != nil {
		return unavailable(err, "delete webhook")
	}
	return nil
}

// WebhookFailed records a failed attempt on the endpoint: the first since
// its last success starts failing_since; disable, when set, turns it off
// with that reason.
func (s *Store) WebhookFailed(ctx context.Context, id string, at time.Time, disable string) error {
	u := s.webhooks.Update("webhook_id", id).SetIfNotExists("failing_since", formatTime(at)).If("attribute_exists($)", "webhook_id")
	if disable != "" {
		u = u.Set("enabled", false).Set("disabled_reason", disable)
	}
	return ignoreGone(u.Run(ctx), "record webhook failure")
}

// WebhookSucceeded clears the endpoint's failure state.
func (s *Store) WebhookSucceeded(ctx context.Context, id string) error {
	u := s.webhooks.Update("webhook_id", id).Remove("failing_since").If("attribute_exists($)", "failing_since")
	return ignoreGone(u.Run(ctx), "record webhook success")
}

func ignoreGone(err error, what string) error {
	if err == nil || dynamo.IsCondCheckFailed(err) {
		return nil
	}
	return unavailable(err, what)
}

// Deliveries are kept for 30 days.
const deliveryRetention = 30 * 24 * time.Hour

type attemptItem struct {
	At         string `dynamo:"at"`
	StatusCode int    `dynamo:"status_code"`
	LatencyMS  int64  `dynamo:"latency_ms"`
	Error      string `dynamo:"error,omitempty"`
}

type deliveryItem struct {
	DeliveryID    string        `dynamo:"delivery_id,hash"`
	WebhookID     string        `dynamo:"webhook_id"`
	UserID        string        `dynamo:"user_id"`
	MessageID     string        `dynamo:"message_id"`
	EventType     string        `dynamo:"event_type"`
	Payload       []byte        `dynamo:"payload"`
	Status        string        `dynamo:"status"`
	Attempts      []attemptItem `dynamo:"attempts"`
	Seq           int           `dynamo:"seq"`
	NextAttemptAt string        `dynamo:"next_attempt_at,omitempty"`
	CreatedAt     string        `dynamo:"created_at"`
	TTL           int64         `dynamo:"ttl"`
}

func toDeliveryItem(d domain.WebhookDelivery) deliveryItem {
	it := deliveryItem{DeliveryID: d.ID, WebhookID: d.WebhookID, UserID: d.UserID, MessageID: d.MessageID,
		EventType: d.EventType, Payload: d.Payload, Status: string(d.Status), Attempts: toAttemptItems(d.Attempts), Seq: d.Seq,
		NextAttemptAt: formatTime(d.NextAttemptAt), CreatedAt: formatTime(d.CreatedAt),
		TTL: d.CreatedAt.Add(deliveryRetention).Unix()}
	return it
}

func toAttemptItems(as []domain.WebhookAttempt) []attemptItem {
	out := make([]attemptItem, 0, len(as))
	for _, a := range as {
		out = append(out, attemptItem{At: formatTime(a.At), StatusCode: a.StatusCode, LatencyMS: a.LatencyMS, Error: a.Error})
	}
	return out
}

func (it deliveryItem) domain() domain.WebhookDelivery {
	d := domain.WebhookDelivery{ID: it.DeliveryID, WebhookID: it.WebhookID, UserID: it.UserID, MessageID: it.MessageID,
		EventType: it.EventType, Payload: it.Payload, Status: domain.DeliveryStatus(it.Status), Seq: it.Seq,
		NextAttemptAt: parseTime(it.NextAttemptAt), CreatedAt: parseTime(it.CreatedAt)}
	for _, a := range it.Attempts {
		d.Attempts = append(d.Attempts, domain.WebhookAttempt{At: parseTime(a.At), StatusCode: a.StatusCode, LatencyMS: a.LatencyMS, Error: a.Error})
	}
	return d
}

// PutDelivery stores a new delivery.
func (s *Store) PutDelivery(ctx context.Context, d domain.WebhookDelivery) error {
	if err := s.deliveries.Put(toDeliveryItem(d)).If("attribute_not_exists($)", "delivery_id").Run(ctx); err != nil {
		return unavailable(err, "put webhook delivery")
	}
	return nil
}

// GetDelivery reads a delivery whoever owns it (the delivery side).
func (s *Store) GetDelivery(ctx context.Context, id string) (domain.WebhookDelivery, error) {
	var it deliveryItem
	err := s.deliveries.Get("delivery_id", id).Consistent(true).One(ctx, &it)
	if errors.Is(err, dynamo.ErrNotFound) {
		return domain.WebhookDelivery{}, domain.ErrDeliveryNotFound
	}
	if err != nil {
		return domain.WebhookDelivery{}, unavailable(err, "get webhook delivery")
	}
	return it.domain(), nil
}

// byWebhookIndex lists a webhook's deliveries by delivery id (ids are
// ULIDs: newest last).
const byWebhookIndex = "by-webhook"

// ListDeliveries returns a page of a webhook's deliveries, newest first.
// The caller has checked the webhook is userID's.
func (s *Store) ListDeliveries(ctx context.Context, userID, webhookID string, page domain.Page) ([]domain.WebhookDelivery, string, error) {
	start, err := decodeCursor(page.Cursor, "", "webhook_id", "delivery_id")
	if err != nil {
		return nil, "", err
	}
	if v, ok := start["webhook_id"].(*types.AttributeValueMemberS); start != nil && (!ok || v.Value != webhookID) {
		return nil, "", errBadCursor
	}
	var items []deliveryItem
	next, err := s.deliveries.Get("webhook_id", webhookID).Index(byWebhookIndex).Order(dynamo.Descending).
		Filter("$ = ?", "user_id", userID).StartFrom(start).Limit(page.Limit).AllWithLastEvaluatedKey(ctx, &items)
	if err != nil {
		return nil, "", unavailable(err, "list webhook deliveries")
	}
	out := make([]domain.WebhookDelivery, len(items))
	for i, it := range items {
		out[i] = it.domain()
	}
	return out, encodeCursor(next), nil
}

// RecordAttempt writes an attempt's outcome on a delivery read at seq:
// the attempts (capped), the new status and, when another attempt is
// scheduled, its time and the next seq. ErrChanged means another attempt
// or a manual retry moved the delivery on meanwhile.
func (s *Store) RecordAttempt(ctx context.Context, d domain.WebhookDelivery, readSeq int) error {
	attempts := d.Attempts
	if n := len(attempts); n > domain.MaxWebhookAttemptsKept {
		attempts = attempts[n-domain.MaxWebhookAttemptsKept:]
	}
	u := s.deliveries.Update("delivery_id", d.ID).
		Set("attempts", toAttemptItems(attempts)).Set("status", string(d.Status)).Set("seq", d.Seq).
		If("$ = ?", "seq", readSeq)
	u = setOrRemoveString(u, "next_attempt_at", formatTime(d.NextAttemptAt))
	err := u.Run(ctx)
	if dynamo.IsCondCheckFailed(err) {
		return ErrChanged
	}
	if err != nil {
		return unavailable(err, "record webhook attempt")
	}
	return nil
}

// RescheduleDelivery makes a delivery of userID's pending again with the
// next seq (a manual retry) and returns it.
func (s *Store) RescheduleDelivery(ctx context.Context, userID, id string, at time.Time) (domain.WebhookDelivery, error) {
	var it deliveryItem
	err := s.deliveries.Update("delivery_id", id).Add("seq", 1).Set("status", string(domain.DeliveryPending)).
		Set("next_attempt_at", formatTime(at)).
		If("$ = ?", "user_id", userID).Value(ctx, &it)
	if dynamo.IsCondCheckFailed(err) {
		return domain.WebhookDelivery{}, domain.ErrDeliveryNotFound
	}
	if err != nil {
		return domain.WebhookDelivery{}, unavailable(err, "reschedule webhook delivery")
	}
	return it.domain(), nil
}
