package httpapi_test

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"
)

var isoMillis = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)

func TestUsage(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	a, _ := createSession(t, acct.LiveKey)
	b, _ := createSession(t, acct.LiveKey)
	call(t, "PUT", "/v1/sessions/"+a+"/start", acct.LiveKey, nil)
	call(t, "PUT", "/v1/sessions/"+b+"/start", acct.LiveKey, nil)
	serve(t, a)
	serve(t, b)
	stack.Clock.Advance(90 * time.Second)
	call(t, "POST", "/v1/sessions/"+b+"/end", acct.LiveKey, nil) // billed 2 minutes

	res := call(t, "GET", "/v1/usage", acct.LiveKey, nil)
	if res.Status != http.StatusOK {
		t.Fatalf("status %d: %s", res.Status, res.Body)
	}
	u := res.JSON(t)["usage"]
	for _, k := range []string{"start", "end"} {
		if s, _ := dig(u, "period", k).(string); !isoMillis.MatchString(s) {
			t.Errorf("period.%s: got %q, want ISO 8601 with milliseconds", k, s)
		}
	}
	for path, want := range map[string]any{
		"included_minutes.total":      float64(3000),
		"included_minutes.used":       float64(4), // 2 billed + 2 active (90 s rounds up)
		"included_minutes.remaining":  float64(2996),
		"purchased_minutes.total":     float64(0),
		"purchased_minutes.remaining": float64(0),
		"total_remaining":             float64(2996),
		"active_minutes":              float64(2),
		"concurrency.current":         float64(1),
		"concurrency.max":             float64(20),
		"concurrency.available":       float64(19),
		"avatars.used":                float64(0),
		"avatars.limit":               float64(180),
		"avatars.remaining":           float64(180),
		"plan.key":                    "pro",
		"plan.name":                   "Pro",
		"plan.max_session_duration":   float64(180),
		"plan.will_renew":             true,
	} {
		if got := dig(u, splitDots(path)...); got != want {
			t.Errorf("%s: got %v, want %v", path, got, want)
		}
	}
	active, _ := dig(u, "active_sessions").([]any)
	if len(active) != 1 || dig(active[0], "session_id") != a || dig(active[0], "status") != "active" || dig(active[0], "ended_at") != nil {
		t.Errorf("active_sessions: got %v, want session %s labelled active", active, a)
	}
	call(t, "POST", "/v1/sessions/"+a+"/end", acct.LiveKey, nil)
}

// TestMinutesIncludedThenPurchased runs a Free account out of its included
// minutes, refuses a start, then draws on purchased minutes.
func TestMinutesIncludedThenPurchased(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "free")
	key := acct.LiveKey
	for i := 0; i < 6; i++ { // 6 sessions x 5 minutes = the 30 included
		id, _ := createSession(t, key)
		if res := call(t, "PUT", "/v1/sessions/"+id+"/start", key, nil); res.Status != http.StatusOK {
			t.Fatalf("start %d: %d %s", i, res.Status, res.Body)
		}
		serve(t, id)
		stack.Clock.Advance(5 * time.Minute)
		call(t, "POST", "/v1/sessions/"+id+"/end", key, nil)
	}
	id, _ := createSession(t, key)
	res := call(t, "PUT", "/v1/sessions/"+id+"/start", key, nil)
	assertStructuredError(t, res, http.StatusForbidden, "No minutes remaining")

	if _, err := stack.App.Accounts.AddMinutes(context.Background(), acct.User.ID, 10); err != nil {
		t.Fatal(err)
	}
	if res := call(t, "PUT", "/v1/sessions/"+id+"/start", key, nil); res.Status != http.StatusOK {
		t.Fatalf("start with purchased minutes: %d %s", res.Status, res.Body)
	}
	serve(t, id)
	stack.Clock.Advance(150 * time.Second)
	s := dig(call(t, "POST", "/v1/sessions/"+id+"/end", key, nil).JSON(t), "session")
	for k, want := range map[string]any{"minutes_consumed": float64(3), "minutes_source": "purchased_minutes", "billing_status": "charged", "minutes_billed": float64(3)} {
		if got := dig(s, "billing", k); got != want {
			t.Errorf("billing.%s: got %v, want %v", k, got, want)
		}
	}
	u := call(t, "GET", "/v1/usage", key, nil).JSON(t)["usage"]
	for path, want := range map[string]any{
		"included_minutes.remaining":  float64(0),
		"purchased_minutes.total":     float64(10),
		"purchased_minutes.remaining": float64(7),
		"total_remaining":             float64(7),
		"plan.max_session_duration":   float64(5),
		"avatars.limit":               float64(0),
		"concurrency.max":             float64(1),
	} {
		if got := dig(u, splitDots(path)...); got != want {
			t.Errorf("%s: got %v, want %v", path, got, want)
		}
	}
}

func splitDots(p string) []string {
	var out []string
	start := 0
	for i := 0; i < len(p); i++ {
		if p[i] == '.' {
			out = append(out, p[start:i])
			start = i + 1
		}
	}
	return append(out, p[start:])
}
