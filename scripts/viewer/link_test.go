package viewer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/stttest"
	"avatarsvc/gpu-fleet/worker"
	"avatarsvc/scripts/localstack"
	"avatarsvc/scripts/stacktest"
	"avatarsvc/scripts/viewer"
)

// TestLinkPageInChromium is the whole product from a visitor's side: the
// real stack (API, DynamoDB Local, SQS, S3, livekit-server with webhooks to
// the API) and a renderer worker; a link's url opened in Debian's Chromium
// with a fake microphone plays the avatar, counts a use, and its end button
// ends the session, billed. An expired link shows its message.
// LINK_SCREENSHOT=path keeps a screenshot of the live page (the README's).
func TestLinkPageInChromium(t *testing.T) {
	localstack.SkipShort(t)
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	// The page server's address goes into links' urls, so it is bound first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pageBase := "http://" + ln.Addr().String() + "/link/"
	stack, err := stacktest.StartWith(ctx, stacktest.Options{RealClock: true, LinkPageURL: pageBase})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Stop() })
	dir := t.TempDir()
	if err := viewer.Build(ctx, root, dir, stack.Server.URL); err != nil {
		t.Fatal(err)
	}
	pages := &http.Server{Handler: viewer.Handler(dir), ReadHeaderTimeout: 10 * time.Second}
	go pages.Serve(ln)
	t.Cleanup(func() { pages.Close() })
	startWorker(t, stack)

	acct, err := stack.NewAccount(ctx, "pro")
	if err != nil {
		t.Fatal(err)
	}
	const greeting = "Hello, I am the link test avatar."
	agent := api(t, stack, "POST", "/v1/agents", acct.LiveKey, map[string]any{"name": "Greeter", "avatar_id": "catalog/nasa/eileen-collins", "custom_greeting": greeting})
	agentID := agent["agent"].(map[string]any)["agent_id"]
	link := api(t, stack, "POST", "/v1/links", acct.LiveKey, map[string]any{"agent_id": agentID})["link"].(map[string]any)
	url := link["url"].(string)
	if !strings.HasPrefix(url, pageBase+"#lnk_") {
		t.Fatalf("link url: got %q, want the link page with the id in the fragment", url)
	}

	t.Run("live conversation", func(t *testing.T) {
		shot := os.Getenv("LINK_SCREENSHOT")
		if shot == "" {
			shot = filepath.Join(t.TempDir(), "link.png")
		}
		var got struct {
			SessionID    string
			Frames0      int
			Frames1      int
			MicPublished bool
			Shown        string
			Notice       string
			Talked       bool
			BargedIn     bool
			AvatarLoudMs int
			Captions     []struct {
				Who, Text string
				Final     bool
			}
		}
		checkLink(t, ctx, root, url, "live", shot, &got)
		t.Logf("page: %+v", got)
		// The conversation, as the visitor saw and heard it: greeted first
		// (audible, captioned), their words captioned, then answered.
		if len(got.Captions) == 0 || got.Captions[0].Who != "avatar" || got.Captions[0].Text != greeting {
			t.Errorf("first caption: got %+v, want the avatar's greeting %q", got.Captions, greeting)
		}
		if got.AvatarLoudMs < 500 {
			t.Errorf("the avatar's audio carried speech for %d ms, want >= 500 (greeting and answer)", got.AvatarLoudMs)
		}
		if !got.Talked {
			t.Errorf("no caption of the visitor's words followed by the avatar's answer; captions: %+v", got.Captions)
		}
		if !got.BargedIn {
			t.Errorf("the visitor talked over the answer, but no answer was cut short; captions: %+v", got.Captions)
		}
		if n := got.Frames1 - got.Frames0; n < 25 {
			t.Errorf("frames decoded over 3 s: got %d, want >= 25 (the avatar's video must keep coming)", n)
		}
		if !got.MicPublished {
			t.Error("the page did not join with the microphone")
		}
		// The worker here warns of the expiration as soon as a session
		// starts (EXPIRY_WARNING=24h): the page shows the countdown.
		if !regexp.MustCompile(`^This conversation ends in \d+ seconds?\.$`).MatchString(got.Notice) {
			t.Errorf("expiry notice: got %q, want the countdown", got.Notice)
		}
		links := api(t, stack, "GET", "/v1/links", acct.LiveKey, nil)["links"].([]any)
		if uses := links[0].(map[string]any)["uses"]; uses != 1.0 {
			t.Errorf("link uses: got %v, want 1", uses)
		}
		// The end button left the room: the session ends, billed to the
		// link's owner.
		deadline := time.Now().Add(30 * time.Second)
		var sess map[string]any
		for time.Now().Before(deadline) {
			sess = api(t, stack, "GET", "/v1/sessions/"+got.SessionID, acct.LiveKey, nil)["session"].(map[string]any)
			if sess["status"] == "ended" {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if sess["status"] != "ended" || sess["end_reason"] != "participants_left" {
			t.Fatalf("session after the end button: got status %v, end_reason %v; want ended, participants_left", sess["status"], sess["end_reason"])
		}
		if billing, _ := sess["billing"].(map[string]any); billing == nil || billing["minutes_consumed"] != 1.0 {
			t.Errorf("billing: got %v, want 1 minute consumed (a served session bills at least a minute)", sess["billing"])
		}
	})

	t.Run("expired link", func(t *testing.T) {
		exp := time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)
		l := api(t, stack, "POST", "/v1/links", acct.LiveKey, map[string]any{"agent_id": agentID, "expires_at": exp})["link"].(map[string]any)
		time.Sleep(2 * time.Second)
		var got struct{ Error, Shown string }
		checkLink(t, ctx, root, l["url"].(string), "refused", "", &got)
		if got.Error != "This link has expired" || !strings.Contains(got.Shown, "expired") {
			t.Errorf("page: got %+v, want the expired message", got)
		}
	})
}

func checkLink(t *testing.T, ctx context.Context, root, url, mode, shot string, out any) {
	t.Helper()
	args := []string{filepath.Join("web", "check-link.mjs"), url, mode, micFile(t)}
	if shot != "" {
		args = append(args, shot)
	}
	cmd := exec.CommandContext(ctx, "node", args...)
	cmd.Dir = filepath.Join(root, "scripts")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("check-link %s: %v\n%s", mode, err, stderr.String())
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		t.Fatalf("check-link output %q: %v", stdout.String(), err)
	}
}

// micFile is what the fake microphone plays (Chromium loops it): silence
// while the avatar greets, recorded human speech (LibriVox clips of
// Debian's pocketsphinx-testdata), a pause in which the avatar starts its
// answer (about 6 s long), a second sentence over that answer (barge-in),
// then silence for the second answer.
func micFile(t *testing.T) string {
	t.Helper()
	clips, err := stttest.Clips()
	if err != nil {
		t.Fatal(err)
	}
	pcm := append(make([]int16, 16000*5), clips[0].PCM...)
	pcm = append(pcm, make([]int16, 16000*5/2)...)
	pcm = append(pcm, clips[1].PCM...)
	pcm = append(pcm, make([]int16, 16000*12)...)
	path := filepath.Join(t.TempDir(), "mic.wav")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := audio.WriteWAV(f, pcm, 16000); err != nil {
		t.Fatal(err)
	}
	return path
}

// startWorker runs an in-process renderer worker on the stack until the
// test ends.
func startWorker(t *testing.T, stack *stacktest.Stack) {
	t.Helper()
	env := map[string]string{}
	for k, v := range stack.Env {
		env[k] = v
	}
	for k, v := range map[string]string{
		"WS_LISTEN": "127.0.0.1:0", "QUEUE_WAIT": "1s", "ROOM_ALLOW_PREFIXES": "127.0.0.1/32",
		"ROOM_GRACE_PERIOD": "2s", "WORKER_SLOTS": "2", "DRAIN_TIMEOUT": "5s",
		"EXPIRY_WARNING": "24h", // every session warns at once: the link page shows it
	} {
		env[k] = v
	}
	s, err := worker.SettingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if os.Getenv("LINK_TEST_LOG") != "" {
		log = slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	p, err := worker.Start(context.Background(), s, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func api(t *testing.T, stack *stacktest.Stack, method, path, key string, body any) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, stack.Server.URL+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(b, &m); err != nil || res.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	return m
}
