package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"avatarsvc/shared/jobs"
	"avatarsvc/shared/webhooks"
)

// delivering runs one Deliverer over the stack's webhook queue for the
// package, with retries milliseconds apart (the real schedule waits 5 s,
// then minutes to hours) and a 1 s attempt timeout, so retries and hangs
// show within a test.
var delivering sync.Once

func startDeliverer(t *testing.T) {
	t.Helper()
	skipShort(t)
	delivering.Do(func() {
		a := stack.App
		d := webhooks.NewDeliverer(a.Store, a.WebhookQueue, stack.Clock.Now, slog.New(slog.NewJSONHandler(io.Discard, nil)),
			webhooks.DelivererOptions{
				Policy:         a.Config.WebhookPolicy,
				Schedule:       []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond},
				AttemptTimeout: time.Second,
			})
		// The stack lives until the package's tests end.
		go d.Run(context.Background(), jobs.NewConsumer(a.SQS, a.Config.WebhookQueueURL, time.Second))
	})
}

// receiver is a webhook endpoint on 127.0.0.1 that verifies every request
// with the Standard Webhooks library and answers from a script.
type receiver struct {
	*httptest.Server
	t      *testing.T
	mu     sync.Mutex
	secret string
	got    []received
	answer func(n int, w http.ResponseWriter, r *http.Request) int // status for the n-th request (0-based)
}

type received struct {
	ID, Type  string
	Verified  bool
	Body      map[string]any
	Timestamp string
}

func newReceiver(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request) int) *receiver {
	rc := &receiver{t: t, answer: answer}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		rc.mu.Lock()
		secret := rc.secret
		n := len(rc.got)
		rc.mu.Unlock()
		wh, err := standardwebhooks.NewWebhook(secret)
		verified := err == nil && wh.Verify(body, r.Header) == nil
		var m map[string]any
		_ = json.Unmarshal(body, &m)
		typ, _ := m["type"].(string)
		rc.mu.Lock()
		rc.got = append(rc.got, received{ID: r.Header.Get("webhook-id"), Type: typ, Verified: verified, Body: m,
			Timestamp: r.Header.Get("webhook-timestamp")})
		rc.mu.Unlock()
		if code := rc.answer(n, w, r); code != 0 { // 0: the answer wrote itself
			w.WriteHeader(code)
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *receiver) requests() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.got...)
}

// waitFor polls cond for up to 15 s, gently: the deliveries log counts
// against the account's read quota (300 a minute).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(150 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// register makes an endpoint at url and returns its id and secret.
func register(t *testing.T, key, url string, events ...string) (id, secret string) {
	t.Helper()
	res := call(t, "POST", "/v1/webhooks", key, map[string]any{"url": url, "events": events})
	if res.Status != http.StatusCreated {
		t.Fatalf("register webhook: status %d: %s", res.Status, res.Body)
	}
	m := res.JSON(t)
	return dig(m, "webhook", "webhook_id").(string), dig(m, "webhook", "secret").(string)
}

// deliveries reads an endpoint's delivery log.
func deliveries(t *testing.T, key, webhookID string) []map[string]any {
	t.Helper()
	res := call(t, "GET", "/v1/webhooks/"+webhookID+"/deliveries", key, nil)
	if res.Status != http.StatusOK {
		t.Fatalf("deliveries: status %d: %s", res.Status, res.Body)
	}
	var out []map[string]any
	for _, d := range res.JSON(t)["deliveries"].([]any) {
		out = append(out, d.(map[string]any))
	}
	return out
}

func deliveryOf(ds []map[string]any, eventType string) map[string]any {
	for _, d := range ds {
		if d["event_type"] == eventType {
			return d
		}
	}
	return nil
}

func attemptCodes(d map[string]any) []int {
	var codes []int
	for _, a := range d["attempts"].([]any) {
		c, _ := a.(map[string]any)["status_code"].(float64)
		codes = append(codes, int(c))
	}
	return codes
}

func TestWebhookRegistration(t *testing.T) {
	t.Parallel()
	acct := newAccount(t, "pro")
	other := newAccount(t, "pro")
	for _, tc := range []struct {
		name string
		body any
		want string // message of the 400
	}{
		{"not https", map[string]any{"url": "http://hooks.example.com/x", "events": []string{"session.ended"}}, "Invalid webhook url"},
		{"private address", map[string]any{"url": "https://10.1.2.3/x", "events": []string{"session.ended"}}, "Invalid webhook url"},
		{"metadata address", map[string]any{"url": "https://169.254.169.254/latest", "events": []string{"session.ended"}}, "Invalid webhook url"},
		{"loopback over https", map[string]any{"url": "https://127.0.0.2/x", "events": []string{"session.ended"}}, "Invalid webhook url"},
		{"credentials in the url", map[string]any{"url": "https://u:p@127.0.0.1/x", "events": []string{"session.ended"}}, "Invalid webhook url"},
		{"unknown event", map[string]any{"url": "http://127.0.0.1:9/x", "events": []string{"session.exploded"}}, "Unknown event type"},
		{"no events", map[string]any{"url": "http://127.0.0.1:9/x", "events": []string{}}, "events must list at least one event type"},
		{"events missing", map[string]any{"url": "http://127.0.0.1:9/x"}, "events is required"},
		{"url missing", map[string]any{"events": []string{"session.ended"}}, "url is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, "POST", "/v1/webhooks", acct.LiveKey, tc.body)
			if res.Status != http.StatusBadRequest {
				t.Fatalf("status: got %d, want 400: %s", res.Status, res.Body)
			}
			if got := res.JSON(t)["error"]; !strings.Contains(jsonString(got), tc.want) {
				t.Errorf("error: got %s, want one saying %q", res.Body, tc.want)
			}
		})
	}

	id, secret := register(t, acct.LiveKey, "http://127.0.0.1:9/hooks", "session.ended", "session.started")
	if !strings.HasPrefix(secret, "whsec_") {
		t.Errorf("secret: got %q, want whsec_...", secret)
	}
	t.Run("the secret is shown once", func(t *testing.T) {
		res := call(t, "GET", "/api/v1/webhooks/"+id, acct.LiveKey, nil)
		if res.Status != 200 || strings.Contains(string(res.Body), "whsec_") {
			t.Errorf("get: status %d, body %s: want 200 without the secret", res.Status, res.Body)
		}
		events := dig(res.JSON(t), "webhook", "events").([]any)
		if len(events) != 2 || events[0] != "session.started" || events[1] != "session.ended" {
			t.Errorf("events: got %v, want [session.started session.ended] (documented order)", events)
		}
	})
	t.Run("another account's webhook is not found", func(t *testing.T) {
		for _, c := range []struct{ method, path string }{
			{"GET", "/v1/webhooks/" + id}, {"PUT", "/v1/webhooks/" + id}, {"DELETE", "/v1/webhooks/" + id},
			{"GET", "/v1/webhooks/" + id + "/deliveries"}, {"POST", "/v1/webhooks/" + id + "/deliveries/whdl_x/retry"},
		} {
			var body any
			if c.method == "PUT" {
				body = map[string]any{"enabled": false}
			}
			if res := call(t, c.method, c.path, other.LiveKey, body); res.Status != http.StatusNotFound {
				t.Errorf("%s %s by another account: got %d, want 404", c.method, c.path, res.Status)
			}
		}
		if res := call(t, "GET", "/v1/webhooks", other.LiveKey, nil); len(res.JSON(t)["webhooks"].([]any)) != 0 {
			t.Errorf("another account's list: got %s, want none", res.Body)
		}
	})
	t.Run("update", func(t *testing.T) {
		res := call(t, "PUT", "/v1/webhooks/"+id, acct.LiveKey, map[string]any{"events": []string{"link.exhausted"}, "enabled": false})
		if res.Status != 200 || dig(res.JSON(t), "webhook", "enabled") != false {
			t.Fatalf("update: status %d: %s", res.Status, res.Body)
		}
		if res := call(t, "PUT", "/v1/webhooks/"+id, acct.LiveKey, map[string]any{"url": "ftp://127.0.0.1/x"}); res.Status != 400 {
			t.Errorf("update to a bad url: got %d, want 400", res.Status)
		}
		if res := call(t, "PUT", "/v1/webhooks/"+id, acct.LiveKey, map[string]any{}); res.Status != 400 {
			t.Errorf("update with nothing: got %d, want 400", res.Status)
		}
	})
	t.Run("at most ten per account", func(t *testing.T) {
		for i := 0; i < 9; i++ {
			register(t, acct.LiveKey, "http://127.0.0.1:9/more", "session.ended")
		}
		if res := call(t, "POST", "/v1/webhooks", acct.LiveKey, map[string]any{"url": "http://127.0.0.1:9/x", "events": []string{"session.ended"}}); res.Status != http.StatusForbidden {
			t.Errorf("the eleventh: got %d, want 403: %s", res.Status, res.Body)
		}
		if res := call(t, "DELETE", "/v1/webhooks/"+id, acct.LiveKey, nil); res.Status != 200 {
			t.Fatalf("delete: got %d: %s", res.Status, res.Body)
		}
		register(t, acct.LiveKey, "http://127.0.0.1:9/again", "session.ended") // room again after a delete
	})
}

func jsonString(v any) string { b, _ := json.Marshal(v); return string(b) }

// TestWebhookDeliveries drives a session's events to a real receiver on
// 127.0.0.1 through the SQS queue and DynamoDB's delivery log: signed
// (verified with the Standard Webhooks library), retried after failures
// with one webhook-id, in a usable order, resendable.
func TestWebhookDeliveries(t *testing.T) {
	t.Parallel()
	startDeliverer(t)
	acct := newAccount(t, "pro")
	rc := newReceiver(t, func(n int, _ http.ResponseWriter, _ *http.Request) int {
		if n < 2 {
			return http.StatusInternalServerError
		}
		return http.StatusOK
	})
	hookID, secret := register(t, acct.LiveKey, rc.URL+"/hooks", "session.started", "session.ended", "session.failed")
	rc.mu.Lock()
	rc.secret = secret
	rc.mu.Unlock()

	id, _ := createSession(t, acct.LiveKey)
	if res := call(t, "PUT", "/v1/sessions/"+id+"/start", acct.LiveKey, nil); res.Status != 200 {
		t.Fatalf("start: %d %s", res.Status, res.Body)
	}
	serve(t, id)
	waitFor(t, "session.started delivered", func() bool {
		d := deliveryOf(deliveries(t, acct.LiveKey, hookID), "session.started")
		return d != nil && d["status"] == "succeeded"
	})
	started := deliveryOf(deliveries(t, acct.LiveKey, hookID), "session.started")
	if got := attemptCodes(started); len(got) != 3 || got[0] != 500 || got[1] != 500 || got[2] != 200 {
		t.Errorf("started attempts: got %v, want [500 500 200]", got)
	}
	if res := call(t, "POST", "/v1/sessions/"+id+"/end", acct.LiveKey, nil); res.Status != 200 {
		t.Fatalf("end: %d %s", res.Status, res.Body)
	}
	waitFor(t, "session.ended delivered", func() bool {
		d := deliveryOf(deliveries(t, acct.LiveKey, hookID), "session.ended")
		return d != nil && d["status"] == "succeeded"
	})

	got := rc.requests()
	if len(got) != 4 {
		t.Fatalf("requests: got %d, want 4 (started x3, ended)", len(got))
	}
	for i, r := range got {
		if !r.Verified {
			t.Errorf("request %d (%s): signature did not verify", i, r.Type)
		}
	}
	if got[0].ID != got[1].ID || got[1].ID != got[2].ID || got[2].ID == got[3].ID {
		t.Errorf("webhook-id: got %s %s %s %s, want one id across the retries and another for the next event",
			got[0].ID, got[1].ID, got[2].ID, got[3].ID)
	}
	if got[2].Type != "session.started" || got[3].Type != "session.ended" {
		t.Errorf("order: got %s then %s, want session.started then session.ended", got[2].Type, got[3].Type)
	}
	if uri := dig(got[2].Body, "data", "ws_uri"); uri != "ws://127.0.0.1:1/ws/"+id {
		t.Errorf("started ws_uri: got %v", uri)
	}
	if dig(got[3].Body, "data", "end_reason") != "ended_by_caller" || dig(got[3].Body, "data", "billing", "minutes_consumed") == nil {
		t.Errorf("ended data: got %v, want end_reason and billing", got[3].Body["data"])
	}
	if strings.Contains(jsonString(got), "join-token") {
		t.Error("an event carried the room's join token")
	}

	t.Run("a delivery is resent on request, with the same webhook-id", func(t *testing.T) {
		path := "/v1/webhooks/" + hookID + "/deliveries/" + started["delivery_id"].(string) + "/retry"
		if res := call(t, "POST", path, acct.LiveKey, nil); res.Status != http.StatusAccepted {
			t.Fatalf("retry: got %d: %s", res.Status, res.Body)
		}
		waitFor(t, "the resend", func() bool { return len(rc.requests()) == 5 })
		if r := rc.requests()[4]; r.ID != got[0].ID || !r.Verified {
			t.Errorf("resend: id %s verified %v, want id %s, verified", r.ID, r.Verified, got[0].ID)
		}
		waitFor(t, "the resend's attempt in the log", func() bool {
			return len(attemptCodes(deliveryOf(deliveries(t, acct.LiveKey, hookID), "session.started"))) == 4
		})
	})
}

// TestWebhookFailures: what a receiver does wrong costs one bounded
// attempt each, and an endpoint failing for a day is turned off.
func TestWebhookFailures(t *testing.T) {
	t.Parallel()
	startDeliverer(t)
	acct := newAccount(t, "pro")
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the redirect was followed to %s", r.URL)
	}))
	t.Cleanup(target.Close)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var hugeSent atomic.Int64
	rc := newReceiver(t, func(n int, w http.ResponseWriter, r *http.Request) int {
		switch {
		case strings.HasSuffix(r.URL.Path, "/redirect"):
			// To another server on an allowed address: never followed.
			w.Header().Set("Location", target.URL+"/elsewhere")
			return http.StatusFound
		case strings.HasSuffix(r.URL.Path, "/huge"):
			// 64 MiB of answer: the deliverer reads a bounded part and
			// hangs up, so most of it is never sent.
			w.WriteHeader(http.StatusOK)
			chunk := bytes.Repeat([]byte("x"), 1<<20)
			for i := 0; i < 64; i++ {
				if _, err := w.Write(chunk); err != nil {
					break
				}
				hugeSent.Add(int64(len(chunk)))
			}
			return 0
		case strings.HasSuffix(r.URL.Path, "/hang"):
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
			return http.StatusOK
		}
		return http.StatusInternalServerError
	})

	redirectID, _ := register(t, acct.LiveKey, rc.URL+"/redirect", "session.ended")
	hangID, _ := register(t, acct.LiveKey, rc.URL+"/hang", "session.ended")
	failingID, _ := register(t, acct.LiveKey, rc.URL+"/fail", "session.ended")
	hugeID, _ := register(t, acct.LiveKey, rc.URL+"/huge", "session.ended")
	// The failing endpoint has failed for a day already (its record says so).
	if err := stack.App.Store.WebhookFailed(context.Background(), failingID, stack.Clock.Now().Add(-25*time.Hour), ""); err != nil {
		t.Fatal(err)
	}

	id, _ := createSession(t, acct.LiveKey)
	call(t, "PUT", "/v1/sessions/"+id+"/start", acct.LiveKey, nil)
	serve(t, id)
	call(t, "POST", "/v1/sessions/"+id+"/end", acct.LiveKey, nil)

	final := func(hook string) map[string]any {
		var d map[string]any
		waitFor(t, "the "+hook+" delivery to fail for good", func() bool {
			d = deliveryOf(deliveries(t, acct.LiveKey, hook), "session.ended")
			return d != nil && d["status"] == "failed"
		})
		return d
	}
	t.Run("a redirect is an error, not followed", func(t *testing.T) {
		d := final(redirectID)
		a := d["attempts"].([]any)[0].(map[string]any)
		if a["status_code"] != 302.0 || !strings.Contains(jsonString(a["error"]), "redirects are not followed") {
			t.Errorf("attempt: got %v, want 302 and the reason", a)
		}
	})
	t.Run("a hanging receiver costs one bounded attempt", func(t *testing.T) {
		d := final(hangID)
		for _, a := range d["attempts"].([]any) {
			a := a.(map[string]any)
			if ms := a["latency_ms"].(float64); ms > 3000 || !strings.Contains(jsonString(a["error"]), "did not answer in time") {
				t.Errorf("attempt: got %v, want a timeout after about the 1 s attempt limit", a)
			}
		}
	})
	t.Run("a huge answer is not read", func(t *testing.T) {
		var d map[string]any
		waitFor(t, "the huge receiver's delivery", func() bool {
			d = deliveryOf(deliveries(t, acct.LiveKey, hugeID), "session.ended")
			return d != nil && d["status"] == "succeeded"
		})
		if codes := attemptCodes(d); len(codes) != 1 || codes[0] != 200 {
			t.Errorf("attempts: got %v, want one 200", codes)
		}
		if sent := hugeSent.Load(); sent >= 64<<20 {
			t.Errorf("the receiver wrote all %d bytes: the deliverer read the whole answer", sent)
		}
	})
	t.Run("an endpoint failing for a day is disabled with a reason", func(t *testing.T) {
		final(failingID)
		res := call(t, "GET", "/v1/webhooks/"+failingID, acct.LiveKey, nil)
		hook := res.JSON(t)["webhook"].(map[string]any)
		if hook["enabled"] != false || !strings.Contains(jsonString(hook["disabled_reason"]), "failing for 24h0m0s") {
			t.Errorf("webhook: got %v, want disabled with the reason", hook)
		}
		// Turned back on, it starts clean.
		res = call(t, "PUT", "/v1/webhooks/"+failingID, acct.LiveKey, map[string]any{"enabled": true})
		if hook := res.JSON(t)["webhook"].(map[string]any); hook["disabled_reason"] != nil || hook["failing_since"] != nil {
			t.Errorf("re-enabled: got %v, want no reason and no failing_since", hook)
		}
	})
}

// TestLinkExhaustedWebhook: a link's last use, and a refusal of an expired
// link, each send link.exhausted once.
func TestLinkExhaustedWebhook(t *testing.T) {
	t.Parallel()
	startDeliverer(t)
	acct := newAccount(t, "pro")
	rc := newReceiver(t, func(int, http.ResponseWriter, *http.Request) int { return http.StatusOK })
	_, secret := register(t, acct.LiveKey, rc.URL+"/hooks", "link.exhausted")
	rc.mu.Lock()
	rc.secret = secret
	rc.mu.Unlock()

	used := linkFor(t, acct.LiveKey, map[string]any{"use_limit": 1})
	usedID := used["link_id"].(string)
	if res := visitorFrom("127.0.0.41").start(t, usedID); res.Status != http.StatusOK {
		t.Fatalf("start via link: %d %s", res.Status, res.Body)
	}
	if res := visitorFrom("127.0.0.42").start(t, usedID); res.Status != http.StatusForbidden {
		t.Fatalf("start via a used-up link: got %d, want 403", res.Status)
	}
	expired := linkFor(t, acct.LiveKey, map[string]any{"expires_at": stack.Clock.Now().Add(time.Minute).Format(time.RFC3339)})
	expiredID := expired["link_id"].(string)
	// The clock is shared by the package's tests: move the expiry back
	// rather than the clock forward.
	if res := call(t, "PUT", "/v1/links/"+expiredID, acct.LiveKey, map[string]any{"expires_at": stack.Clock.Now().Add(-time.Second).Format(time.RFC3339)}); res.Status != 200 {
		t.Fatalf("expire the link: %d %s", res.Status, res.Body)
	}
	for _, ip := range []string{"127.0.0.43", "127.0.0.44"} {
		if res := visitorFrom(ip).start(t, expiredID); res.Status != http.StatusForbidden {
			t.Fatalf("start via an expired link: got %d, want 403: %s", res.Status, res.Body)
		}
	}

	waitFor(t, "two link.exhausted events", func() bool { return len(rc.requests()) >= 2 })
	time.Sleep(500 * time.Millisecond) // a duplicate would have come by now
	got := map[string]string{}
	for _, r := range rc.requests() {
		if !r.Verified || r.Type != "link.exhausted" {
			t.Errorf("request: %+v, want a verified link.exhausted", r)
		}
		id, _ := dig(r.Body, "data", "link_id").(string)
		if got[id] != "" {
			t.Errorf("link %s: a second link.exhausted", id)
		}
		got[id], _ = dig(r.Body, "data", "reason").(string)
	}
	if got[usedID] != "use_limit_reached" || got[expiredID] != "expired" {
		t.Errorf("reasons: got %v, want %s use_limit_reached and %s expired", got, usedID, expiredID)
	}
}
