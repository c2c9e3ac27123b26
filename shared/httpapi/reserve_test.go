package httpapi_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestParallelStartsCannotSpendMinutesTwice starts 20 sessions at once on
// an account with 10 purchased minutes and no included ones left: the
// started sessions' reservations (expiration - started_at) add up to at most
// 10 minutes, the others are refused with the spec's 'No minutes remaining',
// and after all of them run past their expiration the account has consumed
// at most 10 minutes, none of them twice.
func TestParallelStartsCannotSpendMinutesTwice(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	acct := newAccount(t, "pro") // 20 concurrent sessions, 180-minute sessions
	u, err := stack.App.Store.GetUser(ctx, acct.User.ID)
	if err != nil {
		t.Fatal(err)
	}
	setIncludedUsed(t, acct.User.ID, u.CurrentPeriod(stack.Clock.Now()).Key(), 3000)
	if _, err := stack.App.Accounts.AddMinutes(ctx, acct.User.ID, 10); err != nil {
		t.Fatal(err)
	}
	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i], _ = createSession(t, acct.LiveKey)
	}
	results := make([]response, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = call(t, "PUT", "/v1/sessions/"+id+"/start", acct.LiveKey, nil)
		}()
	}
	wg.Wait()

	reserved := 0
	var started []string
	for i, res := range results {
		switch res.Status {
		case http.StatusOK:
			started = append(started, ids[i])
			s := dig(call(t, "GET", "/v1/sessions/"+ids[i], acct.LiveKey, nil).JSON(t), "session").(map[string]any)
			from, _ := time.Parse(time.RFC3339, s["started_at"].(string))
			until, _ := time.Parse(time.RFC3339, s["expiration"].(string))
			reserved += int(until.Sub(from).Round(time.Minute) / time.Minute)
			serve(t, ids[i])
		default:
			if msg := dig(res.JSON(t), "error", "message"); msg != "No minutes remaining" {
				t.Errorf("refused start %d: got %d %s, want 'No minutes remaining'", i, res.Status, res.Body)
			}
		}
	}
	if len(started) == 0 || reserved > 10 {
		t.Errorf("started %d sessions reserving %d minutes; want at least 1, at most 10 minutes", len(started), reserved)
	}
	if got := user(t, acct.User.ID).ReservedMinutes; got != reserved {
		t.Errorf("account's reserved minutes: got %d, want %d", got, reserved)
	}

	stack.Clock.Advance(30 * time.Minute) // every session ran past its expiration
	consumed := 0
	for _, id := range started {
		res := call(t, "POST", "/v1/sessions/"+id+"/end", acct.LiveKey, nil)
		if res.Status != http.StatusOK {
			t.Fatalf("end %s: %d %s", id, res.Status, res.Body)
		}
		consumed += int(dig(res.JSON(t), "session", "billing", "minutes_consumed").(float64))
	}
	after := user(t, acct.User.ID)
	t.Logf("20 parallel starts on 10 minutes: %d started, %d minutes reserved, %d consumed", len(started), reserved, consumed)
	if consumed > 10 || after.PurchasedRemaining != 10-consumed || after.ReservedMinutes != 0 || after.ActiveSessions != 0 {
		t.Errorf("consumed %d; account: purchased left %d, reserved %d, active %d; want <= 10 consumed, %d left, 0, 0",
			consumed, after.PurchasedRemaining, after.ReservedMinutes, after.ActiveSessions, 10-consumed)
	}
	if after.IncludedUsed != 3000 {
		t.Errorf("included used: got %d, want 3000 (no overrun)", after.IncludedUsed)
	}

	// With the minutes back, a start reserves them again.
	id, _ := createSession(t, acct.LiveKey)
	if res := call(t, "PUT", "/v1/sessions/"+id+"/start", acct.LiveKey, nil); (consumed < 10) != (res.Status == http.StatusOK) {
		t.Errorf("start with %d minutes left: got %d %s", 10-consumed, res.Status, res.Body)
	}
}

// TestEndedSessionKeepsNoRoomToken: the room's join token, a credential for
// the caller's room, is kept while the session may still join and removed
// by the end.
func TestEndedSessionKeepsNoRoomToken(t *testing.T) {
	skipShort(t)
	ctx := context.Background()
	acct := newAccount(t, "pro")
	id, _ := createSession(t, acct.LiveKey)
	if res := call(t, "PUT", "/v1/sessions/"+id+"/start", acct.LiveKey, nil); res.Status != http.StatusOK {
		t.Fatalf("start: %d %s", res.Status, res.Body)
	}
	serve(t, id)
	running, err := stack.App.Store.GetSession(ctx, acct.User.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	if running.Room.Token == "" {
		t.Fatal("a running session has no room token to join with")
	}
	if res := call(t, "POST", "/v1/sessions/"+id+"/end", acct.LiveKey, nil); res.Status != http.StatusOK {
		t.Fatalf("end: %d %s", res.Status, res.Body)
	}
	ended, err := stack.App.Store.GetSession(ctx, acct.User.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	if ended.Room.Token != "" || ended.Room.URL == "" {
		t.Errorf("ended session's room: got token %q url %q, want no token and the url kept", ended.Room.Token, ended.Room.URL)
	}
}
