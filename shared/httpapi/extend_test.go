package httpapi_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestExtendSession: POST .../extend moves a started session's expiration
// within the plan's rules (an extension).
func TestExtendSession(t *testing.T) {
	t.Parallel()
	acct := newAccount(t, "enterprise") // no cap on a session's length
	other := newAccount(t, "enterprise")
	id, _ := createSession(t, acct.LiveKey)

	t.Run("a session never started", func(t *testing.T) {
		res := call(t, "POST", "/v1/sessions/"+id+"/extend", acct.LiveKey, map[string]any{"minutes": 5})
		if res.Status != http.StatusBadRequest || !strings.Contains(string(res.Body), "never started") {
			t.Errorf("got %d %s, want 400 saying it never started", res.Status, res.Body)
		}
	})
	if res := call(t, "PUT", "/v1/sessions/"+id+"/start", acct.LiveKey, nil); res.Status != 200 {
		t.Fatalf("start: %d %s", res.Status, res.Body)
	}
	serve(t, id)
	expiration := func() time.Time {
		res := call(t, "GET", "/v1/sessions/"+id, acct.LiveKey, nil)
		e, err := time.Parse(time.RFC3339Nano, dig(res.JSON(t), "session", "expiration").(string))
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	before := expiration()

	for _, bad := range []any{map[string]any{"minutes": 0}, map[string]any{"minutes": 61}, map[string]any{"minutes": 1.5}, map[string]any{"minutes": "5"}} {
		if res := call(t, "POST", "/v1/sessions/"+id+"/extend", acct.LiveKey, bad); res.Status != http.StatusBadRequest {
			t.Errorf("extend %v: got %d, want 400", bad, res.Status)
		}
	}
	t.Run("ten more minutes", func(t *testing.T) {
		res := call(t, "POST", "/api/v1/sessions/"+id+"/extend", acct.LiveKey, map[string]any{"minutes": 10})
		if res.Status != 200 {
			t.Fatalf("extend: %d %s", res.Status, res.Body)
		}
		if got := res.JSON(t)["minutes_added"]; got != 10.0 {
			t.Errorf("minutes_added: got %v, want 10", got)
		}
		if got := expiration(); !got.Equal(before.Add(10 * time.Minute)) {
			t.Errorf("expiration: got %v, want %v", got, before.Add(10*time.Minute))
		}
	})
	t.Run("no body: five minutes", func(t *testing.T) {
		if res := call(t, "POST", "/v1/sessions/"+id+"/extend", acct.LiveKey, nil); res.Status != 200 || res.JSON(t)["minutes_added"] != 5.0 {
			t.Fatalf("extend: %d %s", res.Status, res.Body)
		}
		if got := expiration(); !got.Equal(before.Add(15 * time.Minute)) {
			t.Errorf("expiration: got %v, want %v", got, before.Add(15*time.Minute))
		}
	})
	t.Run("another account's session is not found", func(t *testing.T) {
		if res := call(t, "POST", "/v1/sessions/"+id+"/extend", other.LiveKey, nil); res.Status != http.StatusNotFound {
			t.Errorf("got %d, want 404", res.Status)
		}
	})
	t.Run("an ended session", func(t *testing.T) {
		call(t, "POST", "/v1/sessions/"+id+"/end", acct.LiveKey, nil)
		res := call(t, "POST", "/v1/sessions/"+id+"/extend", acct.LiveKey, nil)
		if res.Status != http.StatusBadRequest || !strings.Contains(string(res.Body), "Cannot extend an ended session") {
			t.Errorf("got %d %s, want 400", res.Status, res.Body)
		}
	})
	t.Run("the plan's longest session", func(t *testing.T) {
		free := newAccount(t, "free") // 5-minute sessions: a start already reserves all of it
		fid, _ := createSession(t, free.LiveKey)
		call(t, "PUT", "/v1/sessions/"+fid+"/start", free.LiveKey, nil)
		res := call(t, "POST", "/v1/sessions/"+fid+"/extend", free.LiveKey, map[string]any{"minutes": 1})
		if res.Status != http.StatusForbidden || !strings.Contains(string(res.Body), "Session length limit reached") {
			t.Errorf("got %d %s, want 403 Session length limit reached", res.Status, res.Body)
		}
	})
}
