package httpapi_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"avatarsvc/shared/domain"
)

// TestStartProgress: while ws_uri is try_again, PUT start says where the
// start is and when to ask again; ?wait= answers once ws_uri is known; and
// asking again counts against the read quota, not the start quota.
func TestStartProgress(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	key := newAccount(t, "pro").LiveKey
	id, _ := createSession(t, key)
	start := func(t *testing.T, query string) response {
		t.Helper()
		res := call(t, "PUT", "/v1/sessions/"+id+"/start"+query, key, nil)
		if res.Status != http.StatusOK {
			t.Fatalf("start%s: status %d: %s", query, res.Status, res.Body)
		}
		checkAgainstSpec(t, "PUT", "/v1/sessions/"+id+"/start", res)
		return res
	}
	expectStage := func(t *testing.T, res response, stage string, retryMS float64) {
		t.Helper()
		m := res.JSON(t)
		if m["ws_uri"] != domain.TryAgain || m["stage"] != stage || m["retry_after_ms"] != retryMS {
			t.Errorf("got ws_uri=%v stage=%v retry_after_ms=%v, want try_again, %s, %v", m["ws_uri"], m["stage"], m["retry_after_ms"], stage, retryMS)
		}
		if got := res.Header.Get("Retry-After"); got != "1" {
			t.Errorf("Retry-After: got %q, want 1", got)
		}
	}

	first := start(t, "")
	expectStage(t, first, domain.StageQueued, 500)
	if got := first.Header.Get("RateLimit-Limit"); got != "150" {
		t.Errorf("first start's RateLimit-Limit: got %q, want 150 (the start quota)", got)
	}
	t.Run("a repeat counts against the read quota", func(t *testing.T) {
		if got := start(t, "").Header.Get("RateLimit-Limit"); got != "300" {
			t.Errorf("repeat's RateLimit-Limit: got %q, want 300 (the read quota)", got)
		}
	})

	now := stack.Clock.Now()
	if _, err := stack.App.Store.ClaimSession(ctx, id, "test-worker", now, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	expectStage(t, start(t, ""), domain.StageClaimed, 300)
	if err := stack.App.Store.ReportJoining(ctx, id, "test-worker", now); err != nil {
		t.Fatal(err)
	}
	expectStage(t, start(t, ""), domain.StageJoining, 200)

	t.Run("wait is checked", func(t *testing.T) {
		for _, q := range []string{"?wait=21", "?wait=-1", "?wait=soon"} {
			res := call(t, "PUT", "/v1/sessions/"+id+"/start"+q, key, nil)
			assertStructuredError(t, res, http.StatusBadRequest, "Invalid wait")
		}
	})

	t.Run("wait answers when ws_uri is known", func(t *testing.T) {
		const wsURI = "ws://127.0.0.1:1/ws/late"
		answered := make(chan response, 1)
		go func() { answered <- start(t, "?wait=10") }()
		// The renderer reports after the request is held; without the
		// wait the answer would already be try_again.
		time.Sleep(500 * time.Millisecond)
		if err := stack.App.Store.ReportServing(ctx, id, "test-worker", wsURI, now); err != nil {
			t.Fatal(err)
		}
		res := <-answered
		m := res.JSON(t)
		if m["ws_uri"] != wsURI {
			t.Errorf("ws_uri: got %v, want %s", m["ws_uri"], wsURI)
		}
		if _, ok := m["stage"]; ok || res.Header.Get("Retry-After") != "" {
			t.Errorf("served: got stage=%v Retry-After=%q, want neither", m["stage"], res.Header.Get("Retry-After"))
		}
	})

	t.Run("an ended session shows its renderer's quality figures", func(t *testing.T) {
		if res := call(t, "POST", "/v1/sessions/"+id+"/end", key, nil); res.Status != http.StatusOK {
			t.Fatalf("end: %d %s", res.Status, res.Body)
		}
		q := domain.Quality{FirstFrameMS: 240, Frames: 1500, LateFrames: 2, LatencyP50MS: 41.5, LatencyP99MS: 60.2,
			MaxAVSkewMS: 2.7, BitrateKbps: 795.1, Subscribers: 2}
		if err := stack.App.Store.ReportQuality(ctx, id, "test-worker", q); err != nil {
			t.Fatal(err)
		}
		if err := stack.App.Store.ReportQuality(ctx, id, "test-worker", domain.Quality{}); err == nil {
			t.Error("a second quality report was taken, want it refused")
		}
		res := call(t, "GET", "/v1/sessions/"+id, key, nil)
		checkAgainstSpec(t, "GET", "/v1/sessions/"+id, res)
		got, _ := dig(res.JSON(t), "session", "quality").(map[string]any)
		if got["frames"] != 1500.0 || got["latency_p99_ms"] != 60.2 || got["subscribers"] != 2.0 {
			t.Errorf("quality: got %v, want %+v", got, q)
		}
	})
}
