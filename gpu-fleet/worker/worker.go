// Package worker is the renderer fleet's worker: one long-running process
// per GPU host that takes session-start jobs from SQS and runs many avatar
// sessions at once, in the manner of livekit/egress:
//
//   - admit a job only while a slot is free (Config.Slots);
//   - claim the session in DynamoDB with one conditional write (still
//     started, not held by a live worker, job not past its deadline), and
//     only then delete the message: duplicates, stale and ended jobs are
//     deleted without joining anything;
//   - launch the renderer (avatar fetch and face check, room join), report
//     the session's ws_uri, then heartbeat its lease; a failed heartbeat
//     means the session was ended elsewhere (the API's End), and the
//     renderer leaves the room at once;
//   - end sessions the room ends (everyone left, expired, room closed,
//     renderer failure) through the one end path, sessions.Service.Finish;
//   - on SIGTERM stop polling at once, let running sessions finish until the
//     drain deadline, then end them as worker_drained, and complete the
//     autoscaling lifecycle hook.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/sessions"
	"avatarsvc/shared/store"
	"avatarsvc/shared/webhooks"
)

// Queue is the session-start queue (*jobs.Consumer).
type Queue interface {
	Receive(ctx context.Context, n int) ([]jobs.Message, error)
	Delete(ctx context.Context, receiptHandle string) error
	Release(ctx context.Context, receiptHandle string, delay time.Duration) error
}

// Claims is the sessions table as a worker writes it (*store.Store).
type Claims interface {
	ClaimSession(ctx context.Context, id, workerID string, now, leaseUntil time.Time) (domain.Session, error)
	ReportServing(ctx context.Context, id, workerID, wsURI string, at time.Time) error
	// Heartbeat renews the lease and returns the session's expiration as
	// stored (later than claimed when the caller extended it).
	Heartbeat(ctx context.Context, id, workerID string, leaseUntil time.Time) (time.Time, error)
	ReportQuality(ctx context.Context, id, workerID string, q domain.Quality) error
}

// Ender is the one end path for sessions (*sessions.Service). A worker ends
// only sessions it still holds (the guard), so a worker that lost its lease
// never ends the session another worker took over.
type Ender interface {
	FinishIf(ctx context.Context, userID, id string, ev domain.Event, reason string, guard domain.EndGuard) (domain.Session, error)
}

// Launcher starts the renderer for a claimed session: it loads the avatar,
// joins the room and starts publishing. A failure should carry the end
// reason to record (see EndReasonError).
type Launcher interface {
	Launch(ctx context.Context, sess domain.Session) (Stream, error)
}

// Stream is one running renderer.
type Stream interface {
	// Done is closed once the stream has stopped and released everything.
	Done() <-chan struct{}
	// Stop asks it to leave the room; it does not wait.
	Stop()
	// EndReason says, once Done, why it ended (a domain.Reason* value).
	EndReason() string
	// Quality is what it measured, once Done; claimedAt is when the
	// worker claimed the session.
	Quality(claimedAt time.Time) domain.Quality
	// Extend moves its expiration later (the caller extended the session).
	Extend(expires time.Time)
}

// EventPublisher queues lifecycle webhook events (*webhooks.Publisher).
type EventPublisher interface {
	Publish(ctx context.Context, userID string, ev webhooks.Event) error
}

// LifecycleHook completes the autoscaling termination hook once the worker
// is empty (*ASGHook); nil outside an autoscaling group.
type LifecycleHook interface {
	Complete(ctx context.Context) error
}

// EndReasonError is a launch failure with the end reason it records.
type EndReasonError struct {
	Reason string
	Err    error
}

func (e *EndReasonError) Error() string { return e.Reason + ": " + e.Err.Error() }
func (e *EndReasonError) Unwrap() error { return e.Err }

// Config tunes a worker. Zero durations take the defaults.
type Config struct {
	// ID names this worker in the sessions it claims; unique per process.
	ID string
	// Slots is how many sessions run at once.
	Slots int
	// AdvertiseURL is the base clients reach the ws_uri listener at:
	// ws://127.0.0.1:8765 locally, wss://<host> behind TLS in production.
	AdvertiseURL string
	// LeaseTTL: a claim lapses this long after the last heartbeat (15 s).
	LeaseTTL time.Duration
	// HeartbeatEvery: how often each session's lease is renewed (1 s). A
	// session ended through the API is noticed at the next heartbeat, so
	// this bounds how long a renderer can outlive its End call.
	HeartbeatEvery time.Duration
	// DrainTimeout: how long running sessions may go on after SIGTERM (15 min).
	DrainTimeout time.Duration
	// LaunchTimeout bounds avatar fetch plus room join (30 s).
	LaunchTimeout time.Duration
	// PollBackoff: the pause after a failed receive (1 s).
	PollBackoff time.Duration
	// MetricsEvery: how often free slots are published (10 s; <0: never).
	MetricsEvery time.Duration
	Metrics      *Metrics
	// Events publishes session.started once ws_uri is reported
	// (*webhooks.Publisher); nil: none.
	Events    EventPublisher
	Lifecycle LifecycleHook
	Now       func() time.Time
	Log       *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Slots <= 0 {
		c.Slots = 1
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.LeaseTTL, 15*time.Second)
	def(&c.HeartbeatEvery, time.Second)
	def(&c.DrainTimeout, 15*time.Minute)
	def(&c.LaunchTimeout, 30*time.Second)
	def(&c.PollBackoff, time.Second)
	def(&c.MetricsEvery, 10*time.Second)
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	return c
}

// Worker runs sessions from the queue.
type Worker struct {
	cfg      Config
	queue    Queue
	claims   Claims
	ender    Ender
	launcher Launcher
	log      *slog.Logger

	slots     chan struct{} // one token per session admitted or running
	wg        sync.WaitGroup
	drainStop chan struct{} // closed when the drain deadline passes

	mu      sync.Mutex
	running map[string]bool
}

// New returns a Worker.
func New(cfg Config, q Queue, c Claims, e Ender, l Launcher) *Worker {
	cfg = cfg.withDefaults()
	return &Worker{
		cfg: cfg, queue: q, claims: c, ender: e, launcher: l,
		log:       cfg.Log.With("worker_id", cfg.ID),
		slots:     make(chan struct{}, cfg.Slots),
		drainStop: make(chan struct{}),
		running:   map[string]bool{},
	}
}

// Running returns how many sessions the worker holds now.
func (w *Worker) Running() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.running)
}

// FreeSlots returns how many more sessions it would admit now.
func (w *Worker) FreeSlots() int { return w.cfg.Slots - w.Running() }

// Run polls until ctx is done (SIGTERM), then drains: running sessions go
// on until they end or DrainTimeout passes, when they are ended as
// worker_drained. It returns once the worker is empty and the lifecycle
// hook, if any, is completed.
func (w *Worker) Run(ctx context.Context) error {
	w.log.Info("worker started", "slots", w.cfg.Slots, "advertise_url", w.cfg.AdvertiseURL)
	metricsDone := make(chan struct{})
	metricsCtx, stopMetrics := context.WithCancel(context.Background())
	go func() { defer close(metricsDone); w.publishMetrics(metricsCtx) }()

	for ctx.Err() == nil {
		// One slot, one job per poll: a worker never holds jobs it cannot
		// start yet, so a burst spreads over the fleet instead of queueing
		// behind one host, and a long poll returns as soon as one job is there.
		select {
		case w.slots <- struct{}{}:
		case <-ctx.Done():
			continue
		}
		msgs, err := w.receive(ctx, 1)
		if err != nil {
			<-w.slots
			if ctx.Err() != nil {
				break
			}
			w.log.Error("receive jobs", "err", err)
			sleep(ctx, w.cfg.PollBackoff)
			continue
		}
		admitted := false
		for _, m := range msgs {
			if !admitted && w.admit(ctx, m) {
				admitted = true
				continue
			}
			if admitted { // not asked for; hand it back
				w.release(context.WithoutCancel(ctx), m, 0)
			}
		}
		if !admitted {
			<-w.slots
		}
	}
	w.drain()
	stopMetrics()
	<-metricsDone
	if w.cfg.Lifecycle != nil {
		hookCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.cfg.Lifecycle.Complete(hookCtx); err != nil {
			return fmt.Errorf("complete lifecycle hook: %w", err)
		}
		w.log.Info("lifecycle hook completed")
	}
	return nil
}

// receive long-polls for up to n jobs. SIGTERM (ctx) stops the wait at
// once, but not the request: SQS may already have handed messages to a poll
// that is cancelled, and they would stay invisible for the visibility
// timeout. So the poll finishes in the background (at most QUEUE_WAIT) and
// whatever it got is made visible again for other workers.
func (w *Worker) receive(ctx context.Context, n int) ([]jobs.Message, error) {
	type result struct {
		msgs []jobs.Message
		err  error
	}
	got := make(chan result, 1)
	go func() {
		msgs, err := w.queue.Receive(context.WithoutCancel(ctx), n)
		got <- result{msgs, err}
	}()
	select {
	case r := <-got:
		return r.msgs, r.err
	case <-ctx.Done():
	}
	w.wg.Add(1) // the drain waits for the hand-back
	go func() {
		defer w.wg.Done()
		r := <-got
		for _, m := range r.msgs {
			w.release(context.Background(), m, 0)
		}
		if len(r.msgs) > 0 {
			w.log.Info("handed back jobs received during shutdown", "jobs", len(r.msgs))
		}
	}()
	return nil, ctx.Err()
}

// admit handles one message with a reserved slot; it reports whether the
// slot is now taken by a session.
func (w *Worker) admit(ctx context.Context, m jobs.Message) bool {
	bg := context.WithoutCancel(ctx)
	job, err := jobs.Parse(m.Body)
	if err != nil {
		// Not ours to fix: make it visible again now so the queue's redrive
		// policy moves it to the DLQ after maxReceiveCount receipts.
		w.log.Error("unparseable job, leaving it for the DLQ", "err", err, "receive_count", m.ReceiveCount)
		w.release(bg, m, 0)
		return false
	}
	log := w.log.With("session_id", job.SessionID)
	if ctx.Err() != nil {
		// SIGTERM arrived with the batch: hand the job to another worker.
		w.release(bg, m, 0)
		return false
	}
	now := w.cfg.Now()
	if now.After(job.Deadline) {
		log.Info("stale job dropped", "deadline", job.Deadline)
		w.delete(bg, m, log)
		return false
	}
	w.mu.Lock()
	dup := w.running[job.SessionID]
	w.mu.Unlock()
	if dup {
		log.Info("duplicate job for a session this worker runs")
		w.delete(bg, m, log)
		return false
	}
	claimedAt := time.Now()
	sess, err := w.claims.ClaimSession(bg, job.SessionID, w.cfg.ID, now, now.Add(w.cfg.LeaseTTL))
	if errors.Is(err, store.ErrNotClaimable) {
		log.Info("job not claimable (ended, stale, or another worker's), deleted")
		w.delete(bg, m, log)
		return false
	}
	if err != nil {
		log.Error("claim session", "err", err)
		w.release(bg, m, w.cfg.PollBackoff)
		return false
	}
	w.delete(bg, m, log)
	w.mu.Lock()
	w.running[sess.ID] = true
	w.mu.Unlock()
	w.wg.Add(1)
	go w.serve(sess, claimedAt)
	return true
}

func (w *Worker) delete(ctx context.Context, m jobs.Message, log *slog.Logger) {
	// A failed delete only means the message comes back later, and its
	// claim then fails: harmless.
	if err := w.queue.Delete(ctx, m.ReceiptHandle); err != nil {
		log.Warn("delete job message", "err", err)
	}
}

func (w *Worker) release(ctx context.Context, m jobs.Message, delay time.Duration) {
	if err := w.queue.Release(ctx, m.ReceiptHandle, delay); err != nil {
		w.log.Warn("release job message", "err", err)
	}
}

// serve runs one claimed session to its end. The lease is heartbeated from
// the claim on, launch included (avatar fetch, provider dial and room join
// may take up to LaunchTimeout, twice the lease): neither the reaper nor a
// redelivered job can take the session away while it is being launched.
func (w *Worker) serve(sess domain.Session, claimedAt time.Time) {
	defer func() {
		w.mu.Lock()
		delete(w.running, sess.ID)
		w.mu.Unlock()
		<-w.slots
		w.wg.Done()
	}()
	log := w.log.With("session_id", sess.ID)
	leaseCtx, stopLease := context.WithCancelCause(context.Background())
	defer stopLease(nil)
	leaseLost := make(chan error, 1)
	var live atomic.Value // the Stream, once launched
	extend := func(expires time.Time) {
		if st, ok := live.Load().(Stream); ok {
			st.Extend(expires)
		}
	}
	go func() {
		err := w.keepLease(leaseCtx, sess, extend, log)
		leaseLost <- err
		if err != nil {
			stopLease(err) // a launch still under way gives up at once
		}
	}()
	launchCtx, cancel := context.WithTimeout(leaseCtx, w.cfg.LaunchTimeout)
	stream, err := w.launcher.Launch(launchCtx, sess)
	cancel()
	if err != nil {
		if lost := context.Cause(leaseCtx); lost != nil {
			w.leaseLost(sess, lost, log)
			return
		}
		reason := domain.ReasonRendererFailed
		var re *EndReasonError
		if errors.As(err, &re) {
			reason = re.Reason
		}
		log.Warn("launch failed", "end_reason", reason, "err", err)
		w.finish(sess, reason, log)
		return
	}
	live.Store(stream)
	wsURI := w.cfg.AdvertiseURL + "/ws/" + sess.ID
	if err := w.report(sess, wsURI); err != nil {
		stream.Stop()
		<-stream.Done()
		if errors.Is(err, store.ErrSessionChanged) {
			log.Info("session ended before the renderer reported; left the room")
			return
		}
		log.Error("report ws_uri", "err", err)
		w.finish(sess, domain.ReasonRendererFailed, log)
		return
	}
	log.Info("serving", "ws_uri", wsURI)
	if w.cfg.Events != nil {
		// After the report committed; the publisher logs its own failure.
		_ = w.cfg.Events.Publish(context.Background(), sess.UserID, webhooks.SessionStarted(sess, wsURI, w.cfg.Now()))
	}
	reason := w.supervise(sess, stream, leaseLost, log)
	w.reportQuality(sess, stream.Quality(claimedAt), log)
	if reason != "" {
		w.finish(sess, reason, log)
	}
}

// reportQuality writes what the stream measured on the session (before
// the end, so an ended session shows it) and as EMF metrics.
func (w *Worker) reportQuality(sess domain.Session, q domain.Quality, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := w.claims.ReportQuality(ctx, sess.ID, w.cfg.ID, q); err != nil && !errors.Is(err, store.ErrSessionChanged) {
		log.Warn("report quality", "err", err)
	}
	if w.cfg.Metrics != nil {
		if err := w.cfg.Metrics.PublishQuality(time.Now(), q); err != nil {
			log.Warn("quality metrics", "err", err)
		}
	}
	log.Info("session quality", "quality", q)
}

// errLeaseTaken: the session is no longer this worker's (ended by the API
// or the reaper); errLeaseLapsing: heartbeats kept failing until the lease
// was about to lapse.
var (
	errLeaseTaken   = errors.New("session ended or taken elsewhere")
	errLeaseLapsing = errors.New("lease could not be renewed")
)

// keepLease heartbeats the session's lease every HeartbeatEvery until ctx
// ends (nil) or the lease is lost (errLeaseTaken, errLeaseLapsing).
func (w *Worker) keepLease(ctx context.Context, sess domain.Session, extend func(time.Time), log *slog.Logger) error {
	tick := time.NewTicker(w.cfg.HeartbeatEvery)
	defer tick.Stop()
	lastRenewed := w.cfg.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		now := w.cfg.Now()
		hbCtx, cancel := context.WithTimeout(ctx, w.cfg.HeartbeatEvery)
		expires, err := w.claims.Heartbeat(hbCtx, sess.ID, w.cfg.ID, now.Add(w.cfg.LeaseTTL))
		cancel()
		switch {
		case err == nil:
			lastRenewed = now
			if !sess.Expiration.IsZero() && expires.After(sess.Expiration) {
				// Told every time (a launch may still be under way at the
				// first); the stream ignores what it already has.
				extend(expires)
			}
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, store.ErrSessionChanged):
			return errLeaseTaken
		case now.Sub(lastRenewed) > w.cfg.LeaseTTL-2*w.cfg.HeartbeatEvery:
			log.Error("lease could not be renewed; stopping", "err", err)
			return errLeaseLapsing
		default:
			log.Warn("heartbeat failed, retrying", "err", err)
		}
	}
}

// leaseLost handles a lease lost during launch: a session taken elsewhere is
// left alone, one whose lease is lapsing is ended as the renderer's failure.
func (w *Worker) leaseLost(sess domain.Session, lost error, log *slog.Logger) {
	if errors.Is(lost, errLeaseTaken) {
		log.Info("session ended elsewhere during launch; launch abandoned")
		return
	}
	w.finish(sess, domain.ReasonRendererFailed, log)
}

// report writes ws_uri, retrying transient failures for a while: the
// session cannot bill, nor can the caller use it, until this succeeds.
func (w *Worker) report(sess domain.Session, wsURI string) error {
	deadline := time.Now().Add(w.cfg.LeaseTTL / 2)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := w.claims.ReportServing(ctx, sess.ID, w.cfg.ID, wsURI, w.cfg.Now())
		cancel()
		if err == nil || errors.Is(err, store.ErrSessionChanged) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// supervise runs the stream until it ends, the drain deadline passes or the
// lease is lost (keepLease). It returns the end reason to record, or "" when
// the session was ended elsewhere (by the API or the reaper) and only the
// renderer had to stop.
func (w *Worker) supervise(sess domain.Session, stream Stream, leaseLost <-chan error, log *slog.Logger) string {
	stop := func() {
		stream.Stop()
		<-stream.Done()
	}
	select {
	case <-stream.Done():
		return stream.EndReason()
	case <-w.drainStop:
		stop()
		return domain.ReasonWorkerDrained
	case err := <-leaseLost:
		stop()
		if errors.Is(err, errLeaseTaken) {
			log.Info("session ended elsewhere; renderer left the room")
			return ""
		}
		// The lease is about to lapse: stop rather than run unbilled.
		return domain.ReasonRendererFailed
	}
}

// finish ends the session through the one end path. If it fails, the lease
// lapses and the reaper ends it.
func (w *Worker) finish(sess domain.Session, reason string, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ended, err := w.ender.FinishIf(ctx, sess.UserID, sess.ID, domain.EventAutoEnd, reason, domain.EndGuard{WorkerID: w.cfg.ID})
	if errors.Is(err, sessions.ErrNoLongerDue) {
		log.Info("session taken over by another worker; left to it", "end_reason", reason)
		return
	}
	if err != nil {
		log.Error("end session", "end_reason", reason, "err", err)
		return
	}
	minutes := 0
	if ended.Billing != nil {
		minutes = ended.Billing.MinutesConsumed
	}
	log.Info("session ended", "end_reason", ended.EndReason, "minutes", minutes)
}

// drain waits for running sessions up to DrainTimeout, then stops them.
func (w *Worker) drain() {
	n := w.Running()
	w.log.Info("draining: no new jobs", "running", n, "drain_timeout", w.cfg.DrainTimeout)
	empty := make(chan struct{})
	go func() { w.wg.Wait(); close(empty) }()
	t := time.NewTimer(w.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-empty:
	case <-t.C:
		w.log.Info("drain deadline passed, ending remaining sessions", "running", w.Running())
		close(w.drainStop)
		<-empty
	}
	w.log.Info("worker empty")
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
