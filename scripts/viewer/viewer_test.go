package viewer_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/rendersession"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/scripts/localstack"
	"avatarsvc/scripts/viewer"
	"avatarsvc/shared/livekit"
)

// TestViewerInChromium publishes a real avatar session into a real
// livekit-server, opens the viewer page in Debian's Chromium and checks that
// it decodes the avatar's video at its size, and that frames keep coming.
// VIEWER_SCREENSHOT=path keeps a screenshot (the README's).
func TestViewerInChromium(t *testing.T) {
	localstack.SkipShort(t)
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	lk := localstack.LiveKitT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	av := roomtest.Face(t, render.Square)
	rendererToken, err := livekit.JoinToken(lk.APIKey, lk.APISecret, "viewer-test", room.AgentIdentity, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	s, err := rendersession.Start(ctx, rendersession.Config{
		SessionID: "sess_viewer", TokenHash: audiows.HashToken("tok"),
		Room:     room.Config{URL: lk.URL, Token: rendererToken, JoinTimeout: time.Minute},
		Renderer: render.NewCPURenderer(av), Audio: audiows.NewServer(log, audiows.Limits{}), Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Stop(); s.Wait() })

	dir := t.TempDir()
	if err := viewer.Build(ctx, root, dir, "http://127.0.0.1:1"); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(viewer.Handler(dir))
	defer srv.Close()
	viewerToken, err := livekit.JoinToken(lk.APIKey, lk.APISecret, "viewer-test", "viewer", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	page := srv.URL + "/viewer/?" + url.Values{"url": {lk.URL}, "token": {viewerToken}}.Encode()

	const seconds = 4
	shot := os.Getenv("VIEWER_SCREENSHOT")
	if shot == "" {
		shot = filepath.Join(t.TempDir(), "viewer.png")
	}
	cmd := exec.CommandContext(ctx, "node", filepath.Join("web", "check-viewer.mjs"), page, "4", shot)
	cmd.Dir = filepath.Join(root, "scripts")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("check-viewer: %v\n%s", err, stderr.String())
	}
	var got struct {
		FramesDecoded0, FramesDecoded1, Width, Height int
		FPS                                           float64
	}
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("check-viewer output %q: %v", stdout.String(), err)
	}
	t.Logf("viewer: %+v", got)
	if got.Width != 512 || got.Height != 512 {
		t.Errorf("video size in the page: got %dx%d, want 512x512", got.Width, got.Height)
	}
	// 25 fps for 4 s is 100 frames; headless Chromium on a busy 2-core box
	// presents fewer, but a stalled stream presents none.
	if n := got.FramesDecoded1 - got.FramesDecoded0; n < 40 {
		t.Errorf("frames decoded over %d s: got %d, want >= 40 (frames must keep coming)", seconds, n)
	}
	if info, err := os.Stat(shot); err != nil || info.Size() == 0 {
		t.Errorf("screenshot %s: %v", shot, err)
	}
}
