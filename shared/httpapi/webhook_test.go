package httpapi_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/livekit/protocol/auth"
)

// TestSignedWebhooksAreNeverRateLimited: livekit-server sends every room's
// events from one address (~15 per hosted session), so its signed webhooks
// must not share an anonymous caller's 60/min quota, while unsigned ones
// from one address are refused and then limited.
func TestSignedWebhooksAreNeverRateLimited(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	// One window for the whole run, and a fresh one for the tests after.
	stack.Clock.Set(stack.Clock.Now().Truncate(time.Minute).Add(time.Minute))
	defer stack.Clock.Advance(time.Minute)

	res := call(t, "POST", "/v1/rooms/initiate", acct.LiveKey, nil)
	if res.Status != 201 {
		t.Fatalf("initiate: %d %s", res.Status, res.Body)
	}
	m := res.JSON(t)
	room := dig(m, "room", "name").(string)
	id := m["session_id"].(string)

	// 599 room events, then the visitor's participant_joined, all signed and
	// from one address: the last must still start the session.
	const signed = 600
	events := make([]map[string]any, signed)
	for i := range events[:signed-1] {
		events[i] = map[string]any{"event": "track_published", "room": map[string]any{"name": room},
			"participant": map[string]any{"identity": "visitor"}}
	}
	events[signed-1] = map[string]any{"event": "participant_joined", "room": map[string]any{"name": room},
		"participant": map[string]any{"identity": "visitor"}}

	statuses := make([]int, signed)
	began := time.Now()
	var wg sync.WaitGroup
	work := make(chan int)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				statuses[i] = postWebhook(t, events[i], true)
			}
		}()
	}
	for i := range events[:signed-1] {
		work <- i
	}
	close(work)
	wg.Wait()
	statuses[signed-1] = postWebhook(t, events[signed-1], true)
	took := time.Since(began)
	for i, s := range statuses {
		if s != http.StatusOK {
			t.Fatalf("signed webhook %d of %d: got %d, want 200", i+1, signed, s)
		}
	}
	t.Logf("%d signed webhooks from one address in %s (%.0f per minute)", signed, took.Round(time.Millisecond), signed/took.Minutes())
	s := dig(call(t, "GET", "/v1/sessions/"+id, acct.LiveKey, nil).JSON(t), "session").(map[string]any)
	if s["status"] != "started" {
		t.Errorf("session after the burst's participant_joined: got %v, want started", s["status"])
	}

	// Unsigned ones from the same address: refused, and limited after 60.
	counts := map[int]int{}
	for i := 0; i < 100; i++ {
		counts[postWebhook(t, events[0], false)]++
	}
	if counts[http.StatusUnauthorized] != 60 || counts[http.StatusTooManyRequests] != 40 {
		t.Errorf("100 unsigned webhooks: got %v, want 60 refused with 401 and 40 with 429", counts)
	}
	if got := postWebhook(t, events[0], true); got != http.StatusOK {
		t.Errorf("signed webhook after the address's quota is spent: got %d, want 200", got)
	}
}

// postWebhook sends ev as LiveKit does: signed with the API secret over the
// body's SHA-256 when signed, with a wrong secret otherwise.
func postWebhook(t testing.TB, ev map[string]any, signed bool) int {
	body, err := json.Marshal(ev)
	if err != nil {
		t.Error(err)
		return 0
	}
	secret := stack.LiveKit.APISecret
	if !signed {
		secret = "not-the-secret-not-the-secret-not-the-secret"
	}
	sum := sha256.Sum256(body)
	tok, err := auth.NewAccessToken(stack.LiveKit.APIKey, secret).
		SetValidFor(5 * time.Minute).SetSha256(base64.StdEncoding.EncodeToString(sum[:])).ToJWT()
	if err != nil {
		t.Error(err)
		return 0
	}
	req, _ := http.NewRequest("POST", stack.Server.URL+"/v1/livekit/webhook", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/webhook+json")
	req.Header.Set("Authorization", tok)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return 0
	}
	res.Body.Close()
	return res.StatusCode
}
