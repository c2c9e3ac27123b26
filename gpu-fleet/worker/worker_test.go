package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/store"
)

// Unit tests of the worker's own rules with fakes of its four
// dependencies; worker_integration_test.go runs it against the real local
// stack and livekit-server.

type fakeQueue struct {
	mu       sync.Mutex
	pending  []jobs.Message
	deleted  []string
	released []string
}

func (q *fakeQueue) Receive(ctx context.Context, n int) ([]jobs.Message, error) {
	q.mu.Lock()
	if len(q.pending) > 0 {
		k := min(n, len(q.pending))
		out := q.pending[:k]
		q.pending = q.pending[k:]
		q.mu.Unlock()
		return out, nil
	}
	q.mu.Unlock()
	select { // long poll: nothing more is coming
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(20 * time.Millisecond):
		return nil, nil
	}
}

func (q *fakeQueue) Delete(_ context.Context, h string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.deleted = append(q.deleted, h)
	return nil
}

func (q *fakeQueue) Release(_ context.Context, h string, _ time.Duration) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.released = append(q.released, h)
	return nil
}

func (q *fakeQueue) counts() (deleted, released int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.deleted), len(q.released)
}

// fakeClaims is a one-table model of the store's conditions.
type fakeClaims struct {
	mu       sync.Mutex
	sessions map[string]*domain.Session
	reports  int
	// failHeartbeats makes heartbeats fail transiently (DynamoDB outage).
	failHeartbeats bool
}

func (c *fakeClaims) ReportQuality(_ context.Context, id, worker string, q domain.Quality) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[id]
	if s.WorkerID != worker || s.Quality != nil {
		return store.ErrSessionChanged
	}
	s.Quality = &q
	return nil
}

func (c *fakeClaims) quality(id string) *domain.Quality {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[id].Quality
}

func (c *fakeClaims) ClaimSession(_ context.Context, id, worker string, now, lease time.Time) (domain.Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, ok := c.sessions[id]
	if !ok || s.Status != domain.StatusStarted || !s.JobDeadline.After(now) || (s.WorkerID != "" && !s.LeaseUntil.Before(now)) {
		return domain.Session{}, store.ErrNotClaimable
	}
	s.WorkerID, s.LeaseUntil = worker, lease
	return *s, nil
}

func (c *fakeClaims) ReportServing(_ context.Context, id, worker, uri string, at time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.sessions[id]
	if s.Status != domain.StatusStarted || s.WorkerID != worker {
		return store.ErrSessionChanged
	}
	s.WSURI, s.ServedAt = uri, at
	c.reports++
	return nil
}

func (c *fakeClaims) Heartbeat(_ context.Context, id, worker string, lease time.Time) (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failHeartbeats {
		return time.Time{}, errors.New("throttled")
	}
	s := c.sessions[id]
	if s.Status != domain.StatusStarted || s.WorkerID != worker {
		return time.Time{}, store.ErrSessionChanged
	}
	s.LeaseUntil = lease
	return s.Expiration, nil
}

// extendByAPI moves a session's stored expiration, as POST .../extend does.
func (c *fakeClaims) extendByAPI(id string, to time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sessions[id].Expiration = to
}

func (c *fakeClaims) endByAPI(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sessions[id].Status = domain.StatusEnded
}

type fakeEnder struct {
	mu      sync.Mutex
	reasons map[string]string
}

func (e *fakeEnder) FinishIf(_ context.Context, _, id string, _ domain.Event, reason string, _ domain.EndGuard) (domain.Session, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.reasons[id]; ok {
		return domain.Session{}, fmt.Errorf("%s finished twice", id)
	}
	e.reasons[id] = reason
	return domain.Session{ID: id, Status: domain.StatusEnded, EndReason: reason}, nil
}

func (e *fakeEnder) reason(id string) (string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r, ok := e.reasons[id]
	return r, ok
}

type fakeStream struct {
	stopOnce sync.Once
	done     chan struct{}
	reason   string
	extended chan time.Time
}

func (s *fakeStream) Extend(t time.Time) {
	select {
	case s.extended <- t:
	default:
	}
}

func (s *fakeStream) Done() <-chan struct{} { return s.done }
func (s *fakeStream) Stop()                 { s.end(domain.ReasonWorkerDrained) }
func (s *fakeStream) EndReason() string     { return s.reason }
func (s *fakeStream) Quality(time.Time) domain.Quality {
	return domain.Quality{Frames: 250, FirstFrameMS: 300}
}
func (s *fakeStream) end(reason string) {
	s.stopOnce.Do(func() { s.reason = reason; close(s.done) })
}

type fakeLauncher struct {
	mu       sync.Mutex
	streams  map[string]*fakeStream
	launches int
	fail     map[string]error
}

func (l *fakeLauncher) Launch(_ context.Context, sess domain.Session) (Stream, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.launches++
	if err := l.fail[sess.ID]; err != nil {
		return nil, err
	}
	s := &fakeStream{done: make(chan struct{}), extended: make(chan time.Time, 100)}
	l.streams[sess.ID] = s
	return s, nil
}

func (l *fakeLauncher) stream(id string) *fakeStream {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.streams[id]
}

type harness struct {
	q      *fakeQueue
	c      *fakeClaims
	e      *fakeEnder
	l      *fakeLauncher
	w      *Worker
	cancel context.CancelFunc
	done   chan error
}

func newHarness(t *testing.T, cfg Config, ids ...string) *harness {
	t.Helper()
	now := time.Now()
	h := &harness{
		q: &fakeQueue{}, c: &fakeClaims{sessions: map[string]*domain.Session{}},
		e: &fakeEnder{reasons: map[string]string{}}, l: &fakeLauncher{streams: map[string]*fakeStream{}, fail: map[string]error{}},
	}
	for _, id := range ids {
		h.c.sessions[id] = &domain.Session{ID: id, UserID: "user_1", Status: domain.StatusStarted, JobDeadline: now.Add(time.Minute)}
	}
	cfg.ID = "w1"
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 100 * time.Millisecond // sessions a test leaves running end as drained
	}
	cfg.AdvertiseURL = "ws://127.0.0.1:8765"
	cfg.MetricsEvery = -1
	cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	h.w = New(cfg, h.q, h.c, h.e, h.l)
	return h
}

func (h *harness) enqueue(t *testing.T, receipt, body string) {
	h.q.mu.Lock()
	defer h.q.mu.Unlock()
	h.q.pending = append(h.q.pending, jobs.Message{Body: body, ReceiptHandle: receipt, ReceiveCount: 1})
}

func jobBody(id string, deadline time.Time) string {
	b, _ := json.Marshal(jobs.NewStartJob(id, "user_1", deadline, time.Now()))
	return string(b)
}

func (h *harness) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 1)
	go func() { h.done <- h.w.Run(ctx) }()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAdmission(t *testing.T) {
	future := time.Now().Add(time.Minute)
	tests := []struct {
		name         string
		bodies       []string
		wantLaunches int
		wantDeleted  int
		wantReleased int
	}{
		{"one job", []string{jobBody("sess_a", future)}, 1, 1, 0},
		{"the same job three times", []string{jobBody("sess_a", future), jobBody("sess_a", future), jobBody("sess_a", future)}, 1, 3, 0},
		{"stale job", []string{jobBody("sess_a", time.Now().Add(-time.Second))}, 0, 1, 0},
		{"unknown or ended session", []string{jobBody("sess_gone", future)}, 0, 1, 0},
		{"unparseable message goes back for the DLQ", []string{"{not json", `{"version":1,"session_id":"sess_a"}`}, 0, 0, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, Config{Slots: 4}, "sess_a")
			for i, b := range tt.bodies {
				h.enqueue(t, fmt.Sprint("r", i), b)
			}
			h.start()
			eventually(t, "every message handled", func() bool {
				d, r := h.q.counts()
				return d+r == len(tt.bodies)
			})
			h.cancel()
			<-h.done
			d, r := h.q.counts()
			if h.l.launches != tt.wantLaunches || d != tt.wantDeleted || r != tt.wantReleased {
				t.Errorf("launches, deleted, released: got %d %d %d, want %d %d %d", h.l.launches, d, r, tt.wantLaunches, tt.wantDeleted, tt.wantReleased)
			}
		})
	}
}

func TestSlotsBoundAdmission(t *testing.T) {
	h := newHarness(t, Config{Slots: 2}, "sess_a", "sess_b", "sess_c")
	future := time.Now().Add(time.Minute)
	for _, id := range []string{"sess_a", "sess_b", "sess_c"} {
		h.enqueue(t, id, jobBody(id, future))
	}
	h.start()
	eventually(t, "two sessions running", func() bool { return h.w.Running() == 2 })
	time.Sleep(50 * time.Millisecond)
	if got := h.w.Running(); got != 2 {
		t.Fatalf("running with 2 slots: got %d, want 2", got)
	}
	if got := h.w.FreeSlots(); got != 0 {
		t.Errorf("free slots: got %d, want 0", got)
	}
	h.l.stream("sess_a").end(domain.ReasonParticipantsLeft)
	eventually(t, "the third session admitted once a slot frees", func() bool { return h.l.stream("sess_c") != nil })
	if r, _ := h.e.reason("sess_a"); r != domain.ReasonParticipantsLeft {
		t.Errorf("sess_a end reason: got %q, want %q", r, domain.ReasonParticipantsLeft)
	}
	if q := h.c.quality("sess_a"); q == nil || q.Frames != 250 {
		t.Errorf("sess_a quality: got %+v, want the stream's figures written", q)
	}
	h.cancel()
	h.l.stream("sess_b").end(domain.ReasonParticipantsLeft)
	h.l.stream("sess_c").end(domain.ReasonParticipantsLeft)
	<-h.done
}

func TestEndedThroughAPIStopsRendererWithoutFinishing(t *testing.T) {
	h := newHarness(t, Config{Slots: 1, HeartbeatEvery: 10 * time.Millisecond, LeaseTTL: time.Second}, "sess_a")
	h.enqueue(t, "r", jobBody("sess_a", time.Now().Add(time.Minute)))
	h.start()
	eventually(t, "reported", func() bool { h.c.mu.Lock(); defer h.c.mu.Unlock(); return h.c.reports == 1 })
	h.c.endByAPI("sess_a")
	eventually(t, "renderer stopped", func() bool {
		select {
		case <-h.l.stream("sess_a").Done():
			return true
		default:
			return false
		}
	})
	eventually(t, "slot freed", func() bool { return h.w.FreeSlots() == 1 })
	if r, ok := h.e.reason("sess_a"); ok {
		t.Errorf("the worker finished a session the API ended (reason %q): it would double-end", r)
	}
	eventually(t, "quality written on the ended session", func() bool { return h.c.quality("sess_a") != nil })
	h.cancel()
	<-h.done
}

// TestExtensionReachesTheRenderer: a later expiration written by POST
// .../extend reaches the running renderer through the next heartbeat.
func TestExtensionReachesTheRenderer(t *testing.T) {
	h := newHarness(t, Config{Slots: 1, HeartbeatEvery: 10 * time.Millisecond, LeaseTTL: time.Second}, "sess_a")
	claimed := time.Now().Add(5 * time.Minute).Truncate(time.Second)
	h.c.sessions["sess_a"].Expiration = claimed
	h.enqueue(t, "r", jobBody("sess_a", time.Now().Add(time.Minute)))
	h.start()
	eventually(t, "reported", func() bool { h.c.mu.Lock(); defer h.c.mu.Unlock(); return h.c.reports == 1 })
	st := h.l.stream("sess_a")
	select {
	case got := <-st.extended:
		t.Fatalf("extended to %v before any extension", got)
	case <-time.After(50 * time.Millisecond):
	}
	later := claimed.Add(10 * time.Minute)
	h.c.extendByAPI("sess_a", later)
	select {
	case got := <-st.extended:
		if !got.Equal(later) {
			t.Errorf("extended to %v, want %v", got, later)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the renderer was not told of the extension")
	}
	h.cancel()
	<-h.done
}

func TestLaunchFailureEndsWithItsReason(t *testing.T) {
	h := newHarness(t, Config{Slots: 1}, "sess_a", "sess_b")
	h.l.fail["sess_a"] = &EndReasonError{Reason: "avatar_rejected: no face found", Err: errors.New("no face")}
	h.l.fail["sess_b"] = errors.New("encoder exploded")
	h.enqueue(t, "ra", jobBody("sess_a", time.Now().Add(time.Minute)))
	h.enqueue(t, "rb", jobBody("sess_b", time.Now().Add(time.Minute)))
	h.start()
	eventually(t, "both ended", func() bool {
		_, a := h.e.reason("sess_a")
		_, b := h.e.reason("sess_b")
		return a && b
	})
	for id, want := range map[string]string{"sess_a": "avatar_rejected: no face found", "sess_b": domain.ReasonRendererFailed} {
		if got, _ := h.e.reason(id); got != want {
			t.Errorf("%s: got %q, want %q", id, got, want)
		}
	}
	if h.c.reports != 0 {
		t.Errorf("ws_uri reported for sessions that never ran: %d", h.c.reports)
	}
	h.cancel()
	<-h.done
}

func TestLeaseThatCannotBeRenewedStops(t *testing.T) {
	h := newHarness(t, Config{Slots: 1, HeartbeatEvery: 10 * time.Millisecond, LeaseTTL: 100 * time.Millisecond}, "sess_a")
	h.enqueue(t, "r", jobBody("sess_a", time.Now().Add(time.Minute)))
	h.start()
	eventually(t, "reported", func() bool { h.c.mu.Lock(); defer h.c.mu.Unlock(); return h.c.reports == 1 })
	h.c.mu.Lock()
	h.c.failHeartbeats = true
	h.c.mu.Unlock()
	eventually(t, "ended", func() bool { _, ok := h.e.reason("sess_a"); return ok })
	if got, _ := h.e.reason("sess_a"); got != domain.ReasonRendererFailed {
		t.Errorf("got %q, want %q", got, domain.ReasonRendererFailed)
	}
	h.cancel()
	<-h.done
}

type fakeHook struct{ calls int }

func (f *fakeHook) Complete(context.Context) error { f.calls++; return nil }

func TestDrain(t *testing.T) {
	t.Run("sessions that end in time keep their own reason", func(t *testing.T) {
		hook := &fakeHook{}
		h := newHarness(t, Config{Slots: 2, DrainTimeout: 5 * time.Second, Lifecycle: hook}, "sess_a")
		h.enqueue(t, "r", jobBody("sess_a", time.Now().Add(time.Minute)))
		h.start()
		eventually(t, "running", func() bool { return h.w.Running() == 1 })
		h.cancel()
		time.Sleep(30 * time.Millisecond)
		h.enqueue(t, "late", jobBody("sess_late", time.Now().Add(time.Minute)))
		h.l.stream("sess_a").end(domain.ReasonParticipantsLeft)
		if err := <-h.done; err != nil {
			t.Fatal(err)
		}
		if got, _ := h.e.reason("sess_a"); got != domain.ReasonParticipantsLeft {
			t.Errorf("got %q, want %q", got, domain.ReasonParticipantsLeft)
		}
		if d, _ := h.q.counts(); d != 1 || h.l.launches != 1 {
			t.Errorf("after SIGTERM: deleted %d, launched %d; want no new job taken", d, h.l.launches)
		}
		if hook.calls != 1 {
			t.Errorf("lifecycle hook completions: got %d, want 1", hook.calls)
		}
	})
	t.Run("sessions past the deadline end as worker_drained", func(t *testing.T) {
		hook := &fakeHook{}
		h := newHarness(t, Config{Slots: 2, DrainTimeout: 50 * time.Millisecond, Lifecycle: hook}, "sess_a", "sess_b")
		h.enqueue(t, "ra", jobBody("sess_a", time.Now().Add(time.Minute)))
		h.enqueue(t, "rb", jobBody("sess_b", time.Now().Add(time.Minute)))
		h.start()
		eventually(t, "running", func() bool { return h.w.Running() == 2 })
		h.cancel()
		if err := <-h.done; err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"sess_a", "sess_b"} {
			if got, _ := h.e.reason(id); got != domain.ReasonWorkerDrained {
				t.Errorf("%s: got %q, want %q", id, got, domain.ReasonWorkerDrained)
			}
		}
		if hook.calls != 1 || h.w.Running() != 0 {
			t.Errorf("hook calls %d, running %d; want 1 and 0", hook.calls, h.w.Running())
		}
	})
}

// fakeAutoscaling records the one Auto Scaling call.
type fakeAutoscaling struct {
	in *autoscaling.CompleteLifecycleActionInput
}

func (f *fakeAutoscaling) CompleteLifecycleAction(_ context.Context, in *autoscaling.CompleteLifecycleActionInput, _ ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	f.in = in
	return &autoscaling.CompleteLifecycleActionOutput{}, nil
}

func TestASGHookCompletesWithContinue(t *testing.T) {
	f := &fakeAutoscaling{}
	hook := &ASGHook{Client: f, GroupName: "renderers", HookName: "drain", InstanceID: "i-0abc"}
	if err := hook.Complete(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := []string{aws.ToString(f.in.AutoScalingGroupName), aws.ToString(f.in.LifecycleHookName), aws.ToString(f.in.InstanceId), aws.ToString(f.in.LifecycleActionResult)}
	want := []string{"renderers", "drain", "i-0abc", "CONTINUE"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestMetricsLineIsEMF(t *testing.T) {
	var buf syncBuffer
	m := NewMetrics(&buf, "avatarsvc/renderer", "renderers")
	if err := m.Publish(time.UnixMilli(1700000000000), 12, 9); err != nil {
		t.Fatal(err)
	}
	var line map[string]any
	if err := json.Unmarshal(buf.Bytes(), &line); err != nil {
		t.Fatalf("not one JSON line: %v: %s", err, buf.Bytes())
	}
	for k, want := range map[string]any{"FreeSlots": 9.0, "RunningSessions": 3.0, "SlotUtilization": 25.0, "AutoScalingGroupName": "renderers"} {
		if line[k] != want {
			t.Errorf("%s: got %v, want %v", k, line[k], want)
		}
	}
	aws, _ := line["_aws"].(map[string]any)
	if aws == nil || aws["Timestamp"] != 1700000000000.0 {
		t.Errorf("_aws: got %v", line["_aws"])
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b
}
