package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/scripts/localstack"
)

// TestRestartKeepsAvatars is a second `make run` as a new user meets it: the
// stack (the real stand-ins, API, renderer worker, pages) is run, an avatar
// uploaded and agents and links made for it and for the catalog avatar, the
// stack stopped and started again on the same .local. Then, in Chromium, a
// link to the uploaded avatar and one to the catalog avatar still get a
// session the renderer serves (video frames keep coming and the avatar's
// greeting is captioned), and a link whose avatar's image was deleted from S3
// says, within 2 s of the session ending, that the avatar is unavailable.
func TestRestartKeepsAvatars(t *testing.T) {
	localstack.SkipShort(t)
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := testConfig(t)

	// First run: what a user makes in it must still work after a restart.
	dev, stop := startStack(t, ctx, root, c)
	const greeting = "Hello, I came back after the restart."
	uploaded := upload(t, dev, filepath.Join(root, "gpu-fleet", "testfiles", "images", "face-astronaut.png"), "Kept")
	doomed := upload(t, dev, filepath.Join(root, "gpu-fleet", "testfiles", "images", "face-astronaut.png"), "Doomed")
	urls := map[string]string{}
	for name, avatarID := range map[string]string{"uploaded": uploaded.AvatarID, "catalog": "catalog/nasa/eileen-collins", "gone": doomed.AvatarID} {
		agent := call(t, dev, "POST", "/v1/agents", map[string]any{"name": name, "avatar_id": avatarID, "custom_greeting": greeting})
		agentID := agent["agent"].(map[string]any)["agent_id"]
		link := call(t, dev, "POST", "/v1/links", map[string]any{"agent_id": agentID})["link"].(map[string]any)
		urls[name] = link["url"].(string)
	}
	stop()

	// Second run on the same data.
	dev, stop = startStack(t, ctx, root, c)
	defer stop()
	// The doomed avatar's item stays; its image goes, as when an object is
	// lost: every session of it ends avatar_unavailable at launch.
	s3c := localstack.S3Client(localstack.AWSConfig(ctx, dev.Env["AWS_ENDPOINT_URL_S3"]))
	if _, err := s3c.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(dev.Env["MEDIA_BUCKET"]), Key: aws.String(doomed.Key)}); err != nil {
		t.Fatal(err)
	}

	type page struct {
		URL, Expect, Failed, State, SessionID, EndReason, Shown string
		Frames0, Frames1                                        int
		ConnectedAt, EndedAt                                    int64
		Captions                                                []struct{ Who, Text string }
	}
	var got []page
	runPages(t, ctx, root, []map[string]string{
		{"url": urls["uploaded"], "expect": "live"},
		{"url": urls["catalog"], "expect": "live"},
		{"url": urls["gone"], "expect": "ended"},
	}, &got)
	if len(got) != 3 {
		t.Fatalf("pages: got %d results, want 3: %+v", len(got), got)
	}
	for i, name := range []string{"uploaded", "catalog"} {
		t.Run(name+" avatar converses after the restart", func(t *testing.T) {
			p := got[i]
			if p.Failed != "" || p.State != "live" {
				t.Fatalf("page: got state %q (%s), shown %q, want live", p.State, p.Failed, p.Shown)
			}
			if n := p.Frames1 - p.Frames0; n < 10 {
				t.Errorf("frames decoded over 2 s: got %d, want >= 10 (the avatar's video must keep coming)", n)
			}
			if len(p.Captions) == 0 || p.Captions[0].Who != "avatar" || !strings.HasPrefix(greeting, strings.TrimSuffix(p.Captions[0].Text, "…")) {
				t.Errorf("first caption: got %+v, want the avatar's greeting %q", p.Captions, greeting)
			}
		})
	}
	t.Run("a link whose avatar image is gone says so", func(t *testing.T) {
		p := got[2]
		if p.Failed != "" || p.State != "ended" || p.EndReason != "avatar_unavailable" {
			t.Fatalf("page: got state %q, end reason %q (%s), want ended, avatar_unavailable", p.State, p.EndReason, p.Failed)
		}
		if want := "The avatar is unavailable right now. Please try again later."; p.Shown != want {
			t.Errorf("message: got %q, want %q", p.Shown, want)
		}
		sess := call(t, dev, "GET", "/v1/sessions/"+p.SessionID, nil)["session"].(map[string]any)
		reason, _ := sess["end_reason"].(string)
		if sess["status"] != "ended" || !strings.HasPrefix(reason, "avatar_unavailable") {
			t.Fatalf("session: got status %v, end_reason %v; want ended, avatar_unavailable: ...", sess["status"], sess["end_reason"])
		}
		if strings.Contains(p.Shown, reason) {
			t.Errorf("message %q shows the owner's detail %q", p.Shown, reason)
		}
		// The page can learn of the end only once it is in the room: the
		// deadline runs from the later of the end and the page's joining.
		endedAt, err := time.Parse(time.RFC3339Nano, sess["ended_at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		from := max(endedAt.UnixMilli(), p.ConnectedAt)
		if late := p.EndedAt - from; late > 2000 {
			t.Errorf("message shown %d ms after the session ended (at %v) and the page joined (at %d), want <= 2000", late, endedAt, p.ConnectedAt)
		}
	})
}

// testConfig is the stack on free ports in a temporary .local.
func testConfig(t *testing.T) config {
	t.Helper()
	ports := make([]int, 7)
	for i := range ports {
		p, err := localstack.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	return config{
		local:   t.TempDir(),
		apiAddr: port(ports[0]), wsAddr: port(ports[1]), webAddr: port(ports[2]),
		dynamoPort: ports[3], sqsPort: ports[4], s3Port: ports[5], livekitPort: ports[6],
	}
}

// startStack runs the stack until the returned stop is called, and answers
// its dev.json once everything serves.
func startStack(t *testing.T, ctx context.Context, root string, c config) (devFile, func()) {
	t.Helper()
	ready := make(chan devFile, 1)
	c.ready = func(d devFile) { ready <- d }
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	var out bytes.Buffer
	go func() { done <- runStack(runCtx, root, c, &syncWriter{w: &out}) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("devstack stopped with %v", err)
		}
	}
	select {
	case d := <-ready:
		return d, stop
	case err := <-done:
		t.Fatalf("devstack ended before it was ready: %v\n%s", err, out.String())
	case <-time.After(2 * time.Minute):
		cancel()
		<-done
		t.Fatalf("devstack not ready within 2 minutes")
	}
	return devFile{}, nil
}

type uploadedAvatar struct {
	AvatarID string `json:"avatar_id"`
	Key      string `json:"cloudinary_id"` // the object key in the media bucket
}

func upload(t *testing.T, dev devFile, path, name string) uploadedAvatar {
	t.Helper()
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", filepath.Base(path))
	fw.Write(img)
	mw.WriteField("name", name)
	mw.Close()
	req, _ := http.NewRequest("POST", dev.APIURL+"/v1/avatars/upload", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("x-api-key", dev.LiveKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var a uploadedAvatar
	if err := json.Unmarshal(b, &a); err != nil || res.StatusCode != http.StatusCreated || a.AvatarID == "" || a.Key == "" {
		t.Fatalf("upload %s: %d %s", name, res.StatusCode, b)
	}
	return a
}

func call(t *testing.T, dev devFile, method, path string, body any) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, dev.APIURL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", dev.LiveKey)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	return m
}

// runPages opens plan's link pages in one Chromium (scripts/web/check-links.mjs)
// with a silent microphone, so the avatar's greeting is not interrupted.
func runPages(t *testing.T, ctx context.Context, root string, plan []map[string]string, out any) {
	t.Helper()
	dir := t.TempDir()
	planFile := filepath.Join(dir, "plan.json")
	b, _ := json.Marshal(plan)
	if err := os.WriteFile(planFile, b, 0o644); err != nil {
		t.Fatal(err)
	}
	wav := filepath.Join(dir, "silence.wav")
	f, err := os.Create(wav)
	if err != nil {
		t.Fatal(err)
	}
	if err := audio.WriteWAV(f, make([]int16, 16000*2), 16000); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("web", "check-links.mjs"), planFile, wav)
	cmd.Dir = filepath.Join(root, "scripts")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("check-links: %v\n%s", err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("check-links output %q: %v\n%s", stdout.String(), err, stderr.String())
	}
	t.Logf("pages: %s", stdout.String())
}

// syncWriter lets the stack's goroutines print into one buffer.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
