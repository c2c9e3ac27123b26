package localstack_test

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"avatarsvc/scripts/localstack"
)

// TestS3KeepsDataAcrossRestart is what a second `make run` relies on: an S3
// started on a data directory finds its buckets and objects (bytes and
// content type) again after a stop, as DynamoDB Local does with its items.
// Without a data directory a restart starts empty, as tests want.
func TestS3KeepsDataAcrossRestart(t *testing.T) {
	t.Parallel()
	body := []byte("\x89PNG avatar bytes")
	for _, tc := range []struct {
		name     string
		dataDir  string
		wantKept bool
	}{
		{"data directory", t.TempDir(), true},
		{"in memory", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testContext(t)
			first := startS3(t, ctx, tc.dataDir)
			c := first.Client(ctx)
			if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("media")}); err != nil {
				t.Fatalf("CreateBucket: %v", err)
			}
			if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("media"), Key: aws.String("avatars/u1/a.png"),
				Body: bytes.NewReader(body), ContentType: aws.String("image/png")}); err != nil {
				t.Fatalf("PutObject: %v", err)
			}
			if err := first.Stop(); err != nil {
				t.Fatalf("Stop: %v", err)
			}

			second := startS3(t, ctx, tc.dataDir)
			defer second.Stop()
			got, err := second.Client(ctx).GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("media"), Key: aws.String("avatars/u1/a.png")})
			if !tc.wantKept {
				if err == nil {
					got.Body.Close()
					t.Fatal("GetObject after restart: got the object, want none (in memory)")
				}
				return
			}
			if err != nil {
				t.Fatalf("GetObject after restart: %v", err)
			}
			defer got.Body.Close()
			b, err := io.ReadAll(got.Body)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, body) {
				t.Errorf("body after restart: got %q, want %q", b, body)
			}
			if got, want := aws.ToString(got.ContentType), "image/png"; got != want {
				t.Errorf("content type after restart: got %q, want %q", got, want)
			}
		})
	}
}

func startS3(t *testing.T, ctx context.Context, dataDir string) *localstack.S3 {
	t.Helper()
	s, err := localstack.StartS3With(ctx, localstack.Options{DataDir: dataDir})
	if err != nil {
		t.Fatalf("start S3: %v", err)
	}
	return s
}
