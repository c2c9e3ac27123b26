package webhooks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/emf"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/netguard"
	"avatarsvc/shared/store"
)

// DefaultSchedule is the wait before each retry after a failed attempt:
// the first attempt goes at once, then 5 s, 5 min, 30 min, 2 h, 5 h, 10 h
// and 10 h later (Standard Webhooks' suggested schedule, about 28 hours in
// all). Each wait is jittered by up to ±10%.
var DefaultSchedule = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
	5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

// Bounds on one attempt: a receiver that hangs or answers without end
// costs at most this.
const (
	DefaultAttemptTimeout = 15 * time.Second
	maxResponseBytes      = 64 << 10
	maxErrorText          = 300
)

var errMalformed = errors.New("malformed webhook delivery message")

// Deliverer makes delivery attempts: it is the consumer of the webhook
// queue (a Lambda function in AWS, a goroutine in the local stack).
type Deliverer struct {
	store    Store
	queue    Queue
	client   *http.Client
	now      func() time.Time
	log      *slog.Logger
	schedule []time.Duration
	metrics  *emf.Writer
}

// UseMetrics writes every attempt's outcome as EMF lines to w (the Lambda
// function's stdout): WebhookAttempts, WebhookAttemptFailures (the alarm
// on failing deliveries), WebhookAttemptLatency, and WebhookDeliveriesFailed
// when a delivery runs out of retries.
func (d *Deliverer) UseMetrics(w *emf.Writer) { d.metrics = w }

// WriteAttemptMetrics writes one attempt's EMF line (see UseMetrics); a
// nil w writes nothing.
func WriteAttemptMetrics(w *emf.Writer, a domain.WebhookAttempt, gaveUp bool) error {
	failed, dead := 0, 0
	if !a.Succeeded() {
		failed = 1
	}
	if gaveUp {
		dead = 1
	}
	return w.Write(a.At, nil,
		emf.Metric{Name: "WebhookAttempts", Unit: "Count", Value: 1},
		emf.Metric{Name: "WebhookAttemptFailures", Unit: "Count", Value: failed},
		emf.Metric{Name: "WebhookAttemptLatency", Unit: "Milliseconds", Value: a.LatencyMS},
		emf.Metric{Name: "WebhookDeliveriesFailed", Unit: "Count", Value: dead},
	)
}

// DelivererOptions vary a Deliverer; zero values take the defaults.
type DelivererOptions struct {
	Policy         netguard.Policy // where endpoints may be; the zero Policy: public addresses only
	Schedule       []time.Duration // DefaultSchedule
	AttemptTimeout time.Duration   // DefaultAttemptTimeout
}

// NewDeliverer returns a Deliverer. Its client dials only addresses the
// policy allows (checked at connect time, so DNS rebinding cannot move an
// endpoint onto the VPC), never follows redirects and gives each attempt
// AttemptTimeout in all.
func NewDeliverer(st Store, q Queue, now func() time.Time, log *slog.Logger, o DelivererOptions) *Deliverer {
	if o.Schedule == nil {
		o.Schedule = DefaultSchedule
	}
	if o.AttemptTimeout <= 0 {
		o.AttemptTimeout = DefaultAttemptTimeout
	}
	transport := &http.Transport{
		DialContext:            o.Policy.Dialer(5 * time.Second).DialContext,
		TLSHandshakeTimeout:    5 * time.Second,
		ResponseHeaderTimeout:  o.AttemptTimeout,
		MaxResponseHeaderBytes: 16 << 10,
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        30 * time.Second,
		ForceAttemptHTTP2:      true,
	}
	client := &http.Client{
		Transport: transport,
		Timeout:   o.AttemptTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
	return &Deliverer{store: st, queue: q, client: client, now: now, log: log, schedule: o.Schedule}
}

// Handle runs one queue message. An error asks the queue to deliver the
// message again later; a message that is stale or names nothing is done.
func (d *Deliverer) Handle(ctx context.Context, body string) error {
	m, err := parseMessage(body)
	if err != nil {
		d.log.WarnContext(ctx, "drop malformed webhook message", "err", err)
		return nil
	}
	if m.WaitS > 0 {
		wait := time.Duration(m.WaitS) * time.Second
		m.WaitS = 0
		return d.queue.Send(ctx, m, wait)
	}
	del, err := d.store.GetDelivery(ctx, m.DeliveryID)
	// A retry is queued before its schedule is recorded (see record): a
	// message that outran that write waits for it a little, then goes
	// back to the queue.
	for wait := 0; err == nil && del.Seq < m.Seq && wait < 5; wait++ {
		time.Sleep(50 * time.Millisecond)
		del, err = d.store.GetDelivery(ctx, m.DeliveryID)
	}
	if errors.Is(err, domain.ErrDeliveryNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if del.Seq < m.Seq {
		return fmt.Errorf("delivery %s: schedule %d not recorded yet", del.ID, m.Seq)
	}
	if del.Seq != m.Seq || del.Status != domain.DeliveryPending {
		return nil // a newer schedule (a manual retry) or an outcome replaced this message
	}
	hook, err := d.store.WebhookByID(ctx, del.WebhookID)
	switch {
	case errors.Is(err, domain.ErrWebhookNotFound):
		return d.giveUp(ctx, del, "The webhook was deleted")
	case err != nil:
		return err
	case !hook.Enabled:
		return d.giveUp(ctx, del, "The webhook is disabled")
	}
	attempt := d.post(ctx, hook, del)
	return d.record(ctx, hook, del, attempt)
}

// giveUp ends a delivery that cannot be attempted.
func (d *Deliverer) giveUp(ctx context.Context, del domain.WebhookDelivery, why string) error {
	readSeq := del.Seq
	del.Attempts = append(del.Attempts, domain.WebhookAttempt{At: d.now(), Error: why})
	del.Status, del.NextAttemptAt = domain.DeliveryFailed, time.Time{}
	if err := d.store.RecordAttempt(ctx, del, readSeq); err != nil && !errors.Is(err, store.ErrChanged) {
		return err
	}
	return nil
}

// post makes one signed attempt.
func (d *Deliverer) post(ctx context.Context, hook domain.Webhook, del domain.WebhookDelivery) domain.WebhookAttempt {
	at := d.now()
	a := domain.WebhookAttempt{At: at}
	signer, err := standardwebhooks.NewWebhook(hook.Secret)
	if err != nil {
		a.Error = "The webhook's secret is unusable: " + err.Error()
		return a
	}
	sentAt := time.Now()
	sig, err := signer.Sign(del.MessageID, sentAt, del.Payload)
	if err != nil {
		a.Error = "sign: " + err.Error()
		return a
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hook.URL, bytes.NewReader(del.Payload))
	if err != nil {
		a.Error = "The webhook's url is unusable: " + err.Error()
		return a
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "avatarsvc-webhooks/1")
	req.Header.Set("webhook-id", del.MessageID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(sentAt.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	res, err := d.client.Do(req)
	if err != nil {
		a.LatencyMS = time.Since(sentAt).Milliseconds()
		a.Error = clip(describeFailure(err))
		return a
	}
	// Read a bounded part of the answer so the connection can be reused;
	// what a receiver says beyond that is not our business.
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, maxResponseBytes))
	res.Body.Close()
	a.LatencyMS = time.Since(sentAt).Milliseconds()
	a.StatusCode = res.StatusCode
	switch {
	case a.Succeeded():
	case res.StatusCode >= 300 && res.StatusCode < 400:
		a.Error = fmt.Sprintf("The endpoint answered a redirect (%d to %q); redirects are not followed: register the final url", res.StatusCode, res.Header.Get("Location"))
	default:
		a.Error = fmt.Sprintf("The endpoint answered %d", res.StatusCode)
	}
	a.Error = clip(a.Error)
	return a
}

func describeFailure(err error) string {
	switch {
	case errors.Is(err, netguard.ErrAddressNotAllowed):
		return "The endpoint's address is not allowed (private, loopback or reserved): " + err.Error()
	case errors.Is(err, context.DeadlineExceeded) || isTimeout(err):
		return "The endpoint did not answer in time"
	}
	return err.Error()
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

func clip(s string) string {
	if len(s) > maxErrorText {
		return s[:maxErrorText] + "…"
	}
	return s
}

// record writes the attempt's outcome: success, the next retry, or the end
// of the schedule; and the endpoint's failure state, which turns it off
// once it has failed for domain.WebhookDisableAfter.
func (d *Deliverer) record(ctx context.Context, hook domain.Webhook, del domain.WebhookDelivery, a domain.WebhookAttempt) error {
	readSeq := del.Seq
	del.Attempts = append(del.Attempts, a)
	defer func() { _ = WriteAttemptMetrics(d.metrics, a, del.Status == domain.DeliveryFailed) }()
	if a.Succeeded() {
		del.Status, del.NextAttemptAt = domain.DeliverySucceeded, time.Time{}
		if err := d.store.RecordAttempt(ctx, del, readSeq); err != nil && !errors.Is(err, store.ErrChanged) {
			return err
		}
		if !hook.FailingSince.IsZero() {
			return d.store.WebhookSucceeded(ctx, hook.ID)
		}
		return nil
	}
	if failed := len(del.Attempts); failed <= len(d.schedule) {
		wait := jitter(d.schedule[failed-1])
		del.Seq++
		del.NextAttemptAt = a.At.Add(wait)
		// Queue the retry before recording it: if the record fails, this
		// message is redelivered and the retry is queued again (the extra
		// one is stale by then); the other order could lose the retry.
		if err := d.queue.Send(ctx, Message{DeliveryID: del.ID, Seq: del.Seq}, wait); err != nil {
			return err
		}
	} else {
		del.Status, del.NextAttemptAt = domain.DeliveryFailed, time.Time{}
	}
	if err := d.store.RecordAttempt(ctx, del, readSeq); err != nil && !errors.Is(err, store.ErrChanged) {
		return err
	}
	disable := ""
	if hook.ShouldDisable(a.At) {
		disable = fmt.Sprintf("Disabled after failing for %s since %s; last error: %s",
			domain.WebhookDisableAfter, hook.FailingSince.UTC().Format(time.RFC3339), a.Error)
	}
	return d.store.WebhookFailed(ctx, hook.ID, a.At, disable)
}

// jitter spreads retries of many deliveries that failed together.
func jitter(w time.Duration) time.Duration {
	return w + time.Duration((rand.Float64()*0.2-0.1)*float64(w))
}

// Receiver is the queue as the local loop reads it (*jobs.Consumer).
type Receiver interface {
	Receive(ctx context.Context, n int) ([]jobs.Message, error)
	Delete(ctx context.Context, receiptHandle string) error
}

// Run consumes the queue until ctx ends: the local stand-in for the
// webhook-deliver Lambda function's SQS trigger. Ten pollers each take one
// message at a time, so a slow receiver holds only its own poller (and the
// local SQS server, which answers a long poll early only once it has as
// many messages as asked for, hands each message over at once). A message
// whose attempt could not be recorded is left for the queue to redeliver.
func (d *Deliverer) Run(ctx context.Context, r Receiver) {
	const pollers = 10
	var wg sync.WaitGroup
	for range pollers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.poll(ctx, r)
		}()
	}
	wg.Wait()
}

func (d *Deliverer) poll(ctx context.Context, r Receiver) {
	for ctx.Err() == nil {
		msgs, err := r.Receive(ctx, 1)
		if err != nil {
			if ctx.Err() == nil {
				d.log.WarnContext(ctx, "receive webhook deliveries", "err", err)
				time.Sleep(time.Second)
			}
			continue
		}
		for _, m := range msgs {
			if err := d.Handle(ctx, m.Body); err != nil {
				d.log.WarnContext(ctx, "webhook delivery attempt", "err", err)
				continue
			}
			if err := r.Delete(context.WithoutCancel(ctx), m.ReceiptHandle); err != nil {
				d.log.WarnContext(ctx, "delete webhook message", "err", err)
			}
		}
	}
}
