package avatarsource

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"avatarsvc/gpu-fleet/testfiles"
	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/netguard"
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
		{avatarimage.ErrManyFaces, "avatar_rejected: more than one face"},
		{avatarimage.ErrFaceTooSmall, "avatar_rejected: face too small"},
		{avatarimage.ErrCorruptImage, "avatar_rejected: unreadable image"},
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

// TestURLAvatarsMeetTheUploadChecks: an avatar given by URL to Create
// Session gets the verdict an upload of the same bytes gets from upload
// moderation (avatarimage.Moderation), as the session's end reason: the same
// size bounds, the same video box, the same face checks.
func TestURLAvatarsMeetTheUploadChecks(t *testing.T) {
	dir := t.TempDir()
	ffmpeg := func(out string, args ...string) []byte {
		t.Helper()
		cmd := exec.Command("ffmpeg", append(append([]string{"-v", "error", "-y"}, args...),
			"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", filepath.Join(dir, out))...)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ffmpeg %s: %v %s", out, err, b)
		}
		b, err := os.ReadFile(filepath.Join(dir, out))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	face := testfiles.Read(t, testfiles.FacePNG)
	files := map[string][]byte{
		"/face.png":   face,
		"/noface.jpg": testfiles.Read(t, testfiles.NoFaceJPEG),
		"/face.mp4":   testfiles.Read(t, testfiles.FaceMP4),
		"/noface.mp4": ffmpeg("noface.mp4", "-loop", "1", "-i", testfiles.Path(testfiles.NoFaceJPEG),
			"-t", "1", "-r", "5", "-vf", "scale=512:-2"),
		"/huge.mp4": ffmpeg("huge.mp4", "-f", "lavfi", "-i", "color=c=gray:s=4200x4100:d=0.2:r=5"),
		// The face PNG padded to 11 MiB: a good picture, but over the
		// upload's 10 MiB for images.
		"/padded.png":   append(append([]byte{}, face...), make([]byte, 11<<20-len(face))...),
		"/playlist.mp4": []byte("#EXTM3U\n#EXTINF:1,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n"),
	}
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b, ok := files[r.URL.Path]; ok {
			w.Write(b)
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	l := New(Config{Policy: netguard.Policy{AllowPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}, RootCAs: roots})
	// upload is upload moderation's check for the bytes, chosen by the
	// sniffed type as avatars.Service.Upload chooses it.
	upload := func(data []byte) error {
		m := avatarimage.Moderation{}
		if avatarimage.IsVideo(data) {
			return m.CheckVideo(context.Background(), data)
		}
		return m.CheckImage(data)
	}
	tests := []struct {
		path, want string // want "": accepted
	}{
		{"/face.png", ""},
		{"/face.mp4", ""},
		{"/noface.jpg", "avatar_rejected: no face found"},
		{"/noface.mp4", "avatar_rejected: no face found"},
		{"/huge.mp4", "avatar_rejected: image too large"},
		{"/padded.png", "avatar_rejected: image too large"},
		{"/playlist.mp4", "avatar_rejected: unreadable image"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			_, err := l.Load(context.Background(), domain.AvatarSource{URL: srv.URL + tt.path}, 512, 512)
			modErr := upload(files[tt.path])
			if tt.want == "" {
				if err != nil || modErr != nil {
					t.Fatalf("got load error %v, upload verdict %v; want both accepted", err, modErr)
				}
				return
			}
			if got := EndReason(err); got != tt.want {
				t.Errorf("URL avatar: got %q (err %v), want %q", got, err, tt.want)
			}
			if got := EndReason(modErr); got != tt.want {
				t.Errorf("upload moderation: got %q (err %v), want the same refusal %q", got, modErr, tt.want)
			}
		})
	}
}
