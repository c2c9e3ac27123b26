package store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/media"
	"avatarsvc/shared/sessions"
	"avatarsvc/shared/store"
)

// losingAnswers passes requests to DynamoDB Local, but while armed it
// drops the answer to each TransactWriteItems after DynamoDB has applied it,
// as a connection that breaks on the way back does: the caller cannot tell
// whether its transaction committed.
type losingAnswers struct {
	mu     sync.Mutex
	armed  int // answers still to drop
	passed int // transactions DynamoDB applied (answered or not)
}

func (l *losingAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	res, err := http.DefaultTransport.RoundTrip(r)
	if err != nil || r.Header.Get("X-Amz-Target") != "DynamoDB_20120810.TransactWriteItems" {
		return res, err
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.passed++
	if l.armed > 0 {
		l.armed--
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	res.Body = io.NopCloser(bytes.NewReader(body))
	return res, nil
}

// arm drops the next n answers: more than the SDK's own attempts (5), so
// the SDK gives up and the store must find the outcome itself.
func (l *losingAnswers) arm(n int) {
	l.mu.Lock()
	l.armed = n
	l.mu.Unlock()
}

// TestCommittedTransactionWhoseAnswerWasLost: a session start, a link start
// and an avatar upload whose transactions commit while every answer the SDK
// waits for is lost succeed, exactly once: the slot, the link's use and the
// avatar's file and quota are each taken once and kept.
func TestCommittedTransactionWhoseAnswerWasLost(t *testing.T) {
	ctx := context.Background()
	ddb, q, s3 := localstack.DynamoDBT(t), localstack.SQST(t), localstack.S3T(t)
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	refs, err := localstack.CreateFromTemplate(ctx, localstack.Endpoints{DynamoDB: ddb.Endpoint, SQS: q.Endpoint, S3: s3.Endpoint},
		filepath.Join(root, "template.yaml"), localstack.PrefixNames("lost"))
	if err != nil {
		t.Fatal(err)
	}
	tables := store.Tables{Users: refs["UsersTable"], APIKeys: refs["ApiKeysTable"], Sessions: refs["SessionsTable"],
		RateLimits: refs["RateLimitsTable"], Avatars: refs["AvatarsTable"], Agents: refs["AgentsTable"],
		Links: refs["LinksTable"], Counters: refs["CountersTable"]}
	for name, v := range map[string]string{"users": tables.Users, "sessions": tables.Sessions, "links": tables.Links, "avatars": tables.Avatars, "queue": refs["SessionStartQueue"], "bucket": refs["MediaBucket"]} {
		if v == "" {
			t.Fatalf("template has no %s resource under the expected logical id (got %v)", name, refs)
		}
	}
	lossy := &losingAnswers{}
	cfg := localstack.AWSConfig(ctx, ddb.Endpoint)
	cfg.HTTPClient = &http.Client{Transport: lossy}
	st := store.New(cfg, ddb.Endpoint, tables)
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	bucket := media.NewBucket(s3.Client(ctx), refs["MediaBucket"])
	svc := sessions.New(st, jobs.NewQueue(sqs.NewFromConfig(localstack.AWSConfig(ctx, q.Endpoint)), refs["SessionStartQueue"]), bucket, time.Now, log)

	user := domain.User{ID: "usr_lost", PlanKey: "explorer", CreatedAt: time.Now()}
	if err := st.CreateUser(ctx, user); err != nil {
		t.Fatal(err)
	}
	account := func() domain.User {
		u, err := st.GetUser(ctx, user.ID)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}

	t.Run("session start", func(t *testing.T) {
		c, err := svc.Create(ctx, user.ID, domain.ModeLive, sessions.CreateInput{Avatar: "https://images.example.com/a.png",
			Room: &domain.Room{Platform: "livekit", URL: "wss://rooms.example.com", Token: "t"}})
		if err != nil {
			t.Fatal(err)
		}
		lossy.arm(5)
		got, err := svc.Start(ctx, user.ID, c.Session.ID, domain.EventStart)
		if err != nil || got.WSURI != domain.TryAgain {
			t.Fatalf("start whose answer was lost: got %+v, %v (%v); want try_again", got.WSURI, err, errors.Unwrap(err))
		}
		if u := account(); u.ActiveSessions != 1 {
			t.Errorf("active sessions: got %d, want 1", u.ActiveSessions)
		}
		if _, err := svc.End(ctx, user.ID, c.Session.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("link start", func(t *testing.T) {
		link := domain.Link{ID: "lnk_lostanswer00000000000000000000", UserID: user.ID, Name: ptr("l"), AgentID: "agt_x",
			Status: domain.LinkActive, UseLimit: ptr(1), CreatedAt: time.Now()}
		if err := st.CreateLink(ctx, link); err != nil {
			t.Fatal(err)
		}
		lossy.arm(5)
		sess, err := svc.StartHosted(ctx, sessions.Hosted{SessionID: domain.NewSessionID(), OwnerID: user.ID, KeyMode: domain.ModeLive,
			Avatar: domain.AvatarSource{URL: "https://images.example.com/a.png"}, AspectRatio: "1:1",
			Room: domain.Room{Platform: "livekit", URL: "wss://rooms.example.com", Token: "t"}, RoomName: "lost-room", LinkID: link.ID})
		if err != nil {
			t.Fatalf("link start whose answer was lost: %v (%v)", err, errors.Unwrap(err))
		}
		got, err := st.GetLink(ctx, link.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.Uses != 1 {
			t.Errorf("link uses: got %d, want 1", got.Uses)
		}
		if u := account(); u.ActiveSessions != 1 {
			t.Errorf("active sessions: got %d, want 1", u.ActiveSessions)
		}
		if _, err := svc.End(ctx, user.ID, sess.ID); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("avatar upload", func(t *testing.T) {
		face, err := os.ReadFile(filepath.Join(root, "gpu-fleet", "testfiles", "images", "face-astronaut.png"))
		if err != nil {
			t.Fatal(err)
		}
		av := avatars.New(st, bucket, nil, "http://media.local", time.Now, log)
		lossy.arm(5)
		a, err := av.Upload(ctx, user.ID, avatars.Upload{Name: "me", Data: face})
		if err != nil {
			t.Fatalf("upload whose answer was lost: %v", err)
		}
		if _, err := av.Get(ctx, user.ID, a.ID); err != nil {
			t.Errorf("uploaded avatar: %v", err)
		}
		objects, err := s3.Client(ctx).HeadObject(ctx, headObject(refs["MediaBucket"], a.StorageKey))
		if err != nil || objects == nil {
			t.Errorf("the avatar's file is gone: %v", err)
		}
		if u := account(); u.AvatarsUsed != 1 {
			t.Errorf("avatars used: got %d, want 1", u.AvatarsUsed)
		}
	})
}

func ptr[T any](v T) *T { return &v }

func headObject(bucket, key string) *s3.HeadObjectInput {
	return &s3.HeadObjectInput{Bucket: &bucket, Key: &key}
}
