// Package store is the DynamoDB adapter: the only package that imports
// guregu/dynamo. Every state change is a conditional write; changes that span
// items (a session and its account's counters) are transactions.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/guregu/dynamo/v2"

	"avatarsvc/shared/domain"
)

// Tables names the physical tables (they differ per stack).
type Tables struct {
	Users, APIKeys, Sessions, RateLimits string
	Avatars, Agents, Links, Counters     string
	Webhooks, WebhookDeliveries          string
}

// Store reads and writes the service's items.
type Store struct {
	db         *dynamo.DB
	users      dynamo.Table
	keys       dynamo.Table
	sessions   dynamo.Table
	rateLimits dynamo.Table
	avatars    dynamo.Table
	agents     dynamo.Table
	links      dynamo.Table
	counters   dynamo.Table
	webhooks   dynamo.Table
	deliveries dynamo.Table
}

// byUserIndex is each table's GSI on (user_id, created_at).
const byUserIndex = "by-user"

// New returns a Store over cfg. Transaction conflicts and throttling are
// retried with jittered backoff (guregu/dynamo does not retry them by
// itself), at most 5 attempts and 200 ms apart, so one call gives up within
// about a second and the services' own loops (shared/retry, 4 s) stay well
// inside a Lambda's 10 s. The client-side retry quota is off so a burst of
// contending starts is retried rather than failed.
func New(cfg aws.Config, endpoint string, t Tables) *Store {
	db := dynamo.New(cfg, func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.Retryer = retry.NewStandard(dynamo.RetryTxConflicts, func(so *retry.StandardOptions) {
			so.MaxAttempts = 5
			so.MaxBackoff = 200 * time.Millisecond
			so.RateLimiter = noRetryQuota{}
		})
	})
	return &Store{
		db: db, users: db.Table(t.Users), keys: db.Table(t.APIKeys),
		sessions: db.Table(t.Sessions), rateLimits: db.Table(t.RateLimits),
		avatars: db.Table(t.Avatars), agents: db.Table(t.Agents), links: db.Table(t.Links), counters: db.Table(t.Counters),
		webhooks: db.Table(t.Webhooks), deliveries: db.Table(t.WebhookDeliveries),
	}
}

type noRetryQuota struct{}

func (noRetryQuota) GetToken(context.Context, uint) (func() error, error) {
	return func() error { return nil }, nil
}
func (noRetryQuota) AddTokens(uint) error { return nil }

// tsLayout is fixed-width so that timestamps sort as strings in indexes.
const tsLayout = "2006-01-02T15:04:05.000000Z"

func formatTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(tsLayout)
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(tsLayout, s)
	if err != nil {
		t, _ = time.Parse(time.RFC3339Nano, s)
	}
	return t
}

// runTx runs a transaction with an idempotency token, and learns its
// outcome when an answer is lost. The SDK already re-sends a failed request
// with the same token, but once its attempts run out (the connection kept
// dropping after DynamoDB committed, say) the outcome is unknown: reporting
// it as a failure would lose a session start, a link use or an uploaded
// avatar that did commit. So an unknown outcome is asked again with the
// same token, which DynamoDB answers from the committed result for 10
// minutes, while a definite answer (a failed condition, a bad request) is
// returned at once.
func (s *Store) runTx(ctx context.Context, tx *dynamo.WriteTx) error {
	tx.Idempotent(true)
	err := tx.Run(ctx)
	for attempt := 1; err != nil && outcomeUnknown(err) && attempt <= txOutcomeRetries; attempt++ {
		// The caller's deadline may be what cut the answer off: finding out
		// what happened is worth a short grace beyond it.
		askCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), txOutcomeTimeout)
		t := time.NewTimer(time.Duration(attempt) * 100 * time.Millisecond)
		select {
		case <-t.C:
		case <-askCtx.Done():
		}
		err = tx.Run(askCtx)
		cancel()
		var mismatch *types.IdempotentParameterMismatchException
		if errors.As(err, &mismatch) {
			// Only a committed transaction leaves its token behind, and
			// this one has the very same items: DynamoDB Local compares the
			// request's bytes, whose map order the SDK varies between
			// serializations, so it answers a same-token re-ask this way.
			return nil
		}
	}
	return err
}

// How often and how long runTx asks again for a transaction's outcome.
const (
	txOutcomeRetries = 3
	txOutcomeTimeout = 3 * time.Second
)

// outcomeUnknown tells whether err leaves open whether the transaction
// committed: anything but DynamoDB's own definite answers.
func outcomeUnknown(err error) bool {
	var canceled *types.TransactionCanceledException
	var mismatch *types.IdempotentParameterMismatchException
	var inProgress *types.TransactionInProgressException
	var apiErr smithy.APIError
	switch {
	case errors.As(err, &inProgress):
		return true // the first attempt is still being applied
	case errors.As(err, &canceled), errors.As(err, &mismatch):
		return false
	case errors.As(err, &apiErr):
		// A 4xx is DynamoDB refusing the request (validation, throttling
		// that the SDK gave up on): nothing was written. Server faults and
		// anything without an answer (timeouts, dropped connections) are
		// unknown.
		return apiErr.ErrorFault() != smithy.FaultClient
	}
	return true
}

// unavailable wraps a DynamoDB failure as a retryable service error.
func unavailable(err error, what string) error {
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) || errors.Is(err, context.DeadlineExceeded) {
		return &domain.Error{Code: domain.Unavailable, Message: "The service is busy, please retry", Err: err}
	}
	return &domain.Error{Code: domain.Internal, Message: "Internal server error", Err: errors.Join(errors.New(what), err)}
}

// cancelReasons returns which items of a canceled transaction failed their
// condition, by position.
func cancelReasons(err error) (failed []bool, ok bool) {
	var canceled *types.TransactionCanceledException
	if !errors.As(err, &canceled) {
		return nil, false
	}
	failed = make([]bool, len(canceled.CancellationReasons))
	any := false
	for i, r := range canceled.CancellationReasons {
		if r.Code != nil && *r.Code == "ConditionalCheckFailed" {
			failed[i], any = true, true
		}
	}
	return failed, any
}
