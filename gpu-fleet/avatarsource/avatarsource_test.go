package avatarsource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"avatarsvc/gpu-fleet/avatar"
	"avatarsvc/gpu-fleet/netguard"
	"avatarsvc/gpu-fleet/testfiles"
	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/domain"
)

// The https paths (forbidden addresses, redirects, a 50 MB body, a faceless
// image) run end to end in gpu-fleet/worker's integration tests; these cover
// the media-bucket path, the cache and the end reasons.

func bucket(t *testing.T) *s3.Client {
	t.Helper()
	ctx := context.Background()
	srv := localstack.S3T(t)
	c := localstack.S3Client(localstack.AWSConfig(ctx, srv.Endpoint), func(o *s3.Options) {
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	if _, err := c.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("media")}); err != nil {
		t.Fatal(err)
	}
	for key, file := range map[string]string{"face": testfiles.FacePNG, "noface": testfiles.NoFaceJPEG,
		"face.mp4": testfiles.FaceMP4, "face.webm": testfiles.FaceWebM} {
		if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("media"), Key: aws.String(key),
			Body: bytes.NewReader(testfiles.Read(t, file))}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func TestLoadFromBucket(t *testing.T) {
	l := New(Config{S3: bucket(t)})
	ctx := context.Background()
	tests := []struct {
		name, key, wantReason string
	}{
		{"face", "face", ""},
		{"video avatar (MP4): animated from a still", "face.mp4", ""},
		{"video avatar (WebM)", "face.webm", ""},
		{"no face", "noface", "avatar_rejected: no face found"},
		{"missing object", "gone", "avatar_unavailable: could not fetch the image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := l.Load(ctx, domain.AvatarSource{Bucket: "media", Key: tt.key}, 512, 512)
			if tt.wantReason == "" {
				if err != nil || p == nil {
					t.Fatalf("got %v, %v; want a prepared avatar", p, err)
				}
				return
			}
			if got := EndReason(err); got != tt.wantReason {
				t.Errorf("end reason: got %q (err %v), want %q", got, err, tt.wantReason)
			}
		})
	}
}

func TestCacheSkipsTheFaceSearch(t *testing.T) {
	l := New(Config{S3: bucket(t)})
	src := domain.AvatarSource{Bucket: "media", Key: "face"}
	a, err := l.Load(context.Background(), src, 512, 512)
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Load(context.Background(), src, 512, 512)
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Error("the same bytes at the same size were prepared twice")
	}
	c, err := l.Load(context.Background(), src, 640, 480)
	if err != nil {
		t.Fatal(err)
	}
	if c == a || c.Image.Rect.Dx() != 640 {
		t.Errorf("another size: got %dx%d from the cache", c.Image.Rect.Dx(), c.Image.Rect.Dy())
	}
}

func TestSmallCapRefusesWhileReading(t *testing.T) {
	l := New(Config{S3: bucket(t), MaxBytes: 1000})
	_, err := l.Load(context.Background(), domain.AvatarSource{Bucket: "media", Key: "face"}, 512, 512)
	if got := EndReason(err); got != "avatar_rejected: image too large" {
		t.Errorf("got %q (err %v), want avatar_rejected: image too large", got, err)
	}
}

func TestURLRules(t *testing.T) {
	tests := []struct {
		name, url  string
		policy     netguard.Policy
		wantReason string
	}{
		{"plain http", "http://images.example.com/face.png", netguard.Policy{}, "avatar_unavailable: not an https URL"},
		{"host not on the list", "https://images.example.com/face.png", netguard.Policy{AllowHosts: []string{".cdn.example"}}, "avatar_unavailable: host not allowed"},
		{"loopback", "https://127.0.0.1:1/face.png", netguard.Policy{}, "avatar_unavailable: address not allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(Config{Policy: tt.policy}).Load(context.Background(), domain.AvatarSource{URL: tt.url}, 512, 512)
			if got := EndReason(err); got != tt.wantReason {
				t.Errorf("got %q (err %v), want %q", got, err, tt.wantReason)
			}
		})
	}
}

func TestEndReasons(t *testing.T) {
	tests := []struct {
		err  error
		want string
	}{
		{avatar.ErrManyFaces, "avatar_rejected: more than one face"},
		{avatar.ErrFaceTooSmall, "avatar_rejected: face too small"},
		{avatar.ErrCorruptImage, "avatar_rejected: unreadable image"},
		{fmt.Errorf("wrapped: %w", &statusError{status: 404, host: "x"}), "avatar_unavailable: HTTP 404"},
		{context.DeadlineExceeded, "avatar_unavailable: timed out"},
		{errors.New("anything else"), "avatar_unavailable: could not load the image"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := EndReason(tt.err); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
