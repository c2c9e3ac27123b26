package viewer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/scripts/localstack"
	"avatarsvc/scripts/stacktest"
	"avatarsvc/scripts/viewer"
)

// TestLinkPageSaysWhenTheAvatarCannotCome: a visitor is in the room waiting
// for the avatar (no renderer runs here, so it never comes) when the session
// ends; the service marks the room and the page, in Chromium, replaces
// "Waiting for the avatar to join…" with why, within 2 s of the end.
func TestLinkPageSaysWhenTheAvatarCannotCome(t *testing.T) {
	localstack.SkipShort(t)
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stack, err := stacktest.StartWith(ctx, stacktest.Options{RealClock: true, LinkPageURL: "http://" + ln.Addr().String() + "/link/"})
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

	acct, err := stack.NewAccount(ctx, "pro")
	if err != nil {
		t.Fatal(err)
	}
	agent := api(t, stack, "POST", "/v1/agents", acct.LiveKey, map[string]any{"name": "Absent", "avatar_id": "catalog/nasa/eileen-collins"})
	link := api(t, stack, "POST", "/v1/links", acct.LiveKey, map[string]any{"agent_id": agent["agent"].(map[string]any)["agent_id"]})["link"].(map[string]any)

	var got []struct {
		Failed, State, SessionID, EndReason, Shown string
		ConnectedAt, EndedAt                       int64
	}
	runLinkPages(t, ctx, root, []map[string]any{{
		"url": link["url"], "expect": "ended",
		// The owner ends it once the visitor waits in the room.
		"end": map[string]string{"api": stack.Server.URL, "key": acct.LiveKey},
	}}, &got)
	if len(got) != 1 {
		t.Fatalf("pages: got %+v, want one", got)
	}
	p := got[0]
	if p.Failed != "" || p.State != "ended" || p.EndReason != "ended_by_caller" {
		t.Fatalf("page: got state %q, end reason %q (%s), want ended, ended_by_caller", p.State, p.EndReason, p.Failed)
	}
	if want := "The conversation was ended by the owner of this link."; p.Shown != want {
		t.Errorf("message: got %q, want %q", p.Shown, want)
	}
	sess := api(t, stack, "GET", "/v1/sessions/"+p.SessionID, acct.LiveKey, nil)["session"].(map[string]any)
	endedAt, err := time.Parse(time.RFC3339Nano, sess["ended_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if late := p.EndedAt - endedAt.UnixMilli(); late > 2000 || p.ConnectedAt > endedAt.UnixMilli() {
		t.Errorf("page joined at %d, session ended at %d, message shown at %d: want the message within 2000 ms of the end", p.ConnectedAt, endedAt.UnixMilli(), p.EndedAt)
	}
}

// runLinkPages opens plan's link pages in one Chromium
// (scripts/web/check-links.mjs) with a silent microphone.
func runLinkPages(t *testing.T, ctx context.Context, root string, plan []map[string]any, out any) {
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
