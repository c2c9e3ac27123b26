// Package jobs is the contract between the API and the renderer fleet: the
// message a session start puts on the SQS queue, and the queue adapters on
// both sides (Queue sends, Consumer receives and deletes).
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// StartJob asks a renderer to run one session. It carries ids only: the
// renderer reads the room token and the avatar's location from the sessions
// table when it claims the session, so no secret ever sits in SQS or the DLQ.
// SQS delivers at least once: the renderer claims the session in DynamoDB
// with a condition before working, then deletes the message, so a duplicate
// is harmless.
type StartJob struct {
	Version   int    `json:"version"` // Version; bumped on incompatible changes
	SessionID string `json:"session_id"`
	UserID    string `json:"user_id"`
	// Deadline is when an unclaimed job is stale: a renderer that receives it
	// later drops it, and the reaper ends the session unbilled.
	Deadline   time.Time `json:"deadline"`
	EnqueuedAt time.Time `json:"enqueued_at"`
}

// Version of StartJob this code writes and reads.
const Version = 2

// ClaimWindow is how long after enqueueing a renderer may still claim a job.
const ClaimWindow = 2 * time.Minute

// NewStartJob builds the job for a started session whose claim deadline is
// deadline.
func NewStartJob(sessionID, userID string, deadline, now time.Time) StartJob {
	return StartJob{Version: Version, SessionID: sessionID, UserID: userID, Deadline: deadline.UTC(), EnqueuedAt: now.UTC()}
}

// ErrMalformed marks a message that is not a job this code understands.
var ErrMalformed = errors.New("malformed job")

// Parse decodes and checks a message body.
func Parse(body string) (StartJob, error) {
	var j StartJob
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		return j, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if j.Version != Version || j.SessionID == "" || j.UserID == "" || j.Deadline.IsZero() {
		return j, fmt.Errorf("%w: version %d, session %q, user %q, deadline %v", ErrMalformed, j.Version, j.SessionID, j.UserID, j.Deadline)
	}
	return j, nil
}

// Queue sends jobs to the session-start queue.
type Queue struct {
	client *sqs.Client
	url    string
}

// NewQueue returns a Queue for the queue at url.
func NewQueue(client *sqs.Client, url string) *Queue { return &Queue{client: client, url: url} }

// Enqueue sends one job.
func (q *Queue) Enqueue(ctx context.Context, j StartJob) error {
	body, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("encode job: %w", err)
	}
	_, err = q.client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.url), MessageBody: aws.String(string(body))})
	if err != nil {
		return fmt.Errorf("send job for %s: %w", j.SessionID, err)
	}
	return nil
}

// Message is one received queue message.
type Message struct {
	Body          string
	ReceiptHandle string
	// ReceiveCount is how often SQS has delivered it (1 the first time); the
	// queue's redrive policy moves it to the DLQ past maxReceiveCount.
	ReceiveCount int
}

// Consumer receives and deletes jobs on the renderer side.
type Consumer struct {
	client *sqs.Client
	url    string
	wait   time.Duration
}

// NewConsumer returns a Consumer long-polling the queue at url for up to wait
// (at most 20 s, SQS's limit) per Receive.
func NewConsumer(client *sqs.Client, url string, wait time.Duration) *Consumer {
	return &Consumer{client: client, url: url, wait: min(wait, 20*time.Second)}
}

// Receive long-polls for up to n messages (1..10).
func (c *Consumer) Receive(ctx context.Context, n int) ([]Message, error) {
	out, err := c.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(c.url),
		MaxNumberOfMessages:         int32(min(max(n, 1), 10)),
		WaitTimeSeconds:             int32(c.wait / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil {
		return nil, fmt.Errorf("receive jobs: %w", err)
	}
	msgs := make([]Message, 0, len(out.Messages))
	for _, m := range out.Messages {
		n := 0
		fmt.Sscan(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)], &n)
		msgs = append(msgs, Message{Body: aws.ToString(m.Body), ReceiptHandle: aws.ToString(m.ReceiptHandle), ReceiveCount: n})
	}
	return msgs, nil
}

// Delete removes a handled message.
func (c *Consumer) Delete(ctx context.Context, receiptHandle string) error {
	_, err := c.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(c.url), ReceiptHandle: aws.String(receiptHandle)})
	if err != nil {
		return fmt.Errorf("delete job message: %w", err)
	}
	return nil
}

// Release makes a message visible again after delay, so another worker (or
// the DLQ, past maxReceiveCount) gets it sooner than the visibility timeout.
func (c *Consumer) Release(ctx context.Context, receiptHandle string, delay time.Duration) error {
	_, err := c.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(c.url), ReceiptHandle: aws.String(receiptHandle), VisibilityTimeout: int32(delay / time.Second),
	})
	if err != nil {
		return fmt.Errorf("release job message: %w", err)
	}
	return nil
}
