package reaper_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"avatarsvc/scripts/stacktest"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/reaper"
	"avatarsvc/shared/sessions"
)

// slowSessions is the real session service whose ends each take 5 s (as in
// a sweep slowed by DynamoDB throttling): the test clock moves on 5 s per
// end, and meanwhile the live workers heartbeat, as they would.
type slowSessions struct {
	*sessions.Service
	clock     *stacktest.Clock
	heartbeat func()
}

func (s slowSessions) FinishIf(ctx context.Context, userID, id string, ev domain.Event, reason string, g domain.EndGuard) (domain.Session, error) {
	s.clock.Advance(5 * time.Second)
	s.heartbeat()
	return s.Service.FinishIf(ctx, userID, id, ev, reason, g)
}

// lastListed lists the running sessions with the named ones last, so the
// sweep reaches them after the slow ends (the index's order is arbitrary).
type lastListed struct {
	reaper.Store
	last []string
}

func (l lastListed) RunningSessions(ctx context.Context) ([]domain.Session, error) {
	list, err := l.Store.RunningSessions(ctx)
	slices.SortStableFunc(list, func(a, b domain.Session) int {
		return boolInt(slices.Contains(l.last, a.ID)) - boolInt(slices.Contains(l.last, b.ID))
	})
	return list, err
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSlowSweepLeavesHeartbeatingSessions: a sweep that spends 5 s on each
// of four lost sessions ends exactly those, and leaves running both a session
// whose worker heartbeats throughout and one whose lease had lapsed when the
// list was read but whose worker heartbeated before the sweep reached it.
func TestSlowSweepLeavesHeartbeatingSessions(t *testing.T) {
	stacktest.SkipShort(t)
	ctx := context.Background()
	stack, err := stacktest.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stack.Stop() })
	acct, err := stack.NewAccount(ctx, "pro")
	if err != nil {
		t.Fatal(err)
	}
	svc, st, clock := stack.App.Sessions, stack.App.Store, stack.Clock
	start := func() string {
		t.Helper()
		c, err := svc.Create(ctx, acct.User.ID, domain.ModeLive, sessions.CreateInput{
			Avatar: "https://images.example.com/a.png",
			Room:   &domain.Room{Platform: "livekit", URL: "wss://rooms.example.com", Token: "t"}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Start(ctx, acct.User.ID, c.Session.ID, domain.EventStart); err != nil {
			t.Fatal(err)
		}
		return c.Session.ID
	}
	claim := func(id, worker string, leaseUntil time.Time) {
		t.Helper()
		if _, err := st.ClaimSession(ctx, id, worker, clock.Now(), leaseUntil); err != nil {
			t.Fatal(err)
		}
	}

	var lost []string
	for range 4 {
		id := start()
		claim(id, "crashed-worker", clock.Now().Add(time.Second))
		lost = append(lost, id)
	}
	healthy, recovering := start(), start()
	claim(healthy, "live-worker", clock.Now().Add(15*time.Second))
	claim(recovering, "stalled-worker", clock.Now().Add(time.Second))
	clock.Advance(2 * time.Second) // every lease but the healthy one has lapsed

	heartbeat := func() {
		for id, worker := range map[string]string{healthy: "live-worker", recovering: "stalled-worker"} {
			if _, err := st.Heartbeat(ctx, id, worker, clock.Now().Add(15*time.Second)); err != nil {
				t.Errorf("heartbeat %s: %v", id, err)
			}
		}
	}
	r := reaper.New(lastListed{st, []string{healthy, recovering}},
		slowSessions{svc, clock, heartbeat}, reaper.DefaultPolicy, clock.Now, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	res, err := r.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Ended[domain.ReasonWorkerLost], len(lost); got != want {
		t.Errorf("ended as worker_lost: got %d, want %d (result %+v)", got, want, res)
	}
	for _, id := range lost {
		s, err := svc.Get(ctx, acct.User.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != domain.StatusEnded || s.EndReason != domain.ReasonWorkerLost {
			t.Errorf("lost session %s: got %s %q, want ended %q", id, s.Status, s.EndReason, domain.ReasonWorkerLost)
		}
	}
	wrongEnds := 0
	for _, id := range []string{healthy, recovering} {
		s, err := svc.Get(ctx, acct.User.ID, id)
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != domain.StatusStarted {
			wrongEnds++
			t.Errorf("heartbeating session %s: got %s %q, want still started", id, s.Status, s.EndReason)
		}
	}
	t.Logf("wrong ends in a sweep slowed to 5 s per end: %d (result %+v)", wrongEnds, res)
}
