// Package jobs is the contract between the API and the renderer fleet: the
// message a session start puts on the SQS queue, and the queue adapter.
package jobs

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"avatarsvc/shared/domain"
)

// StartJob asks a renderer to run one session. SQS delivers it at least once:
// a renderer claims the session in DynamoDB with a condition before working,
// then deletes the message, so a duplicate is harmless.
type StartJob struct {
	Version     int                 `json:"version"` // 1; bumped on incompatible changes
	SessionID   string              `json:"session_id"`
	UserID      string              `json:"user_id"`
	Avatar      domain.AvatarSource `json:"avatar"`
	AspectRatio string              `json:"aspect_ratio"`
	Room        domain.Room         `json:"room"`
	// SessionTokenSHA256 lets the renderer check session.init on ws_uri
	// without another read; the token itself is never stored.
	SessionTokenSHA256 string `json:"session_token_sha256"`
	// Expiration is when the renderer must end the session (null: none).
	Expiration *time.Time `json:"expiration"`
	// Deadline is when an unclaimed job is stale: a renderer that receives it
	// later drops it, and the reaper ends the session unbilled.
	Deadline   time.Time `json:"deadline"`
	EnqueuedAt time.Time `json:"enqueued_at"`
}

// Version of StartJob this code writes.
const Version = 1

// ClaimWindow is how long after enqueueing a renderer may still claim a job.
const ClaimWindow = 2 * time.Minute

// NewStartJob builds the job for a started session.
func NewStartJob(s domain.Session, now time.Time) StartJob {
	j := StartJob{
		Version: Version, SessionID: s.ID, UserID: s.UserID, Avatar: s.Avatar, AspectRatio: s.AspectRatio,
		Room: s.Room, SessionTokenSHA256: s.TokenHash, Deadline: now.Add(ClaimWindow).UTC(), EnqueuedAt: now.UTC(),
	}
	if !s.Expiration.IsZero() {
		exp := s.Expiration.UTC()
		j.Expiration = &exp
	}
	return j
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
