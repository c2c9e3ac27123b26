package worker_test

// End-to-end tests of the worker against the real local stack: DynamoDB
// Local, the SQS server, S3 (gofakes3) and the API (stacktest), a real
// livekit-server, real renderer workers (in-process, or the built
// renderer-worker binary where a signal must hit a real process), and a
// real LiveKit participant that decodes the avatar's VP8. Lease, heartbeat
// and reaper intervals are shortened by configuration, never slept through
// at production length.

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/gpu-fleet/testfiles"
	"avatarsvc/gpu-fleet/worker"
	"avatarsvc/scripts/localstack"
	"avatarsvc/scripts/stacktest"
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/livekit"
	"avatarsvc/shared/reaper"
)

const (
	liveness = 30 * time.Second // how long a test waits for what must happen; never a speed claim
	// Mouth-region difference from the still image (mean |dY|): speech
	// opens the mouth well past movingMin (see rendersession's room test).
	movingMin = roomtest.MouthMoving
	// heartbeatEvery and leaseTTL are the workers' settings here.
	heartbeatEvery = 500 * time.Millisecond
	leaseTTL       = 2 * time.Second
	reaperEvery    = 500 * time.Millisecond
)

var (
	stack     *stacktest.Stack
	lk        *localstack.LiveKit
	workerBin string
	avatarSrv *avatarServers
)

func TestMain(m *testing.M) { stacktest.Main(m, startAll) }

// startAll brings up what the package's tests share: avatar servers, the
// API stack, one livekit-server, the renderer-worker binary and a reaper.
func startAll(ctx context.Context) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	tmp, err := os.MkdirTemp("", "worker-it-")
	if err != nil {
		return nil, err
	}
	stops = append(stops, func() { os.RemoveAll(tmp) })
	// The avatar servers' CA must be trusted before anything loads the
	// system roots (once per process).
	if avatarSrv, err = startAvatarServers(tmp); err != nil {
		return nil, fmt.Errorf("avatar servers: %w", err)
	}
	stops = append(stops, avatarSrv.close)
	os.Setenv("SSL_CERT_FILE", avatarSrv.caFile)

	if stack, err = stacktest.StartRealTime(ctx); err != nil {
		return nil, fmt.Errorf("local stack: %w", err)
	}
	stops = append(stops, func() { stack.Stop() })
	if lk, err = localstack.StartLiveKit(ctx, localstack.Options{LogDir: tmp}); err != nil {
		return nil, fmt.Errorf("livekit-server: %w", err)
	}
	stops = append(stops, func() { lk.Stop() })
	workerBin = filepath.Join(tmp, "renderer-worker")
	root, _ := localstack.RepoRoot()
	build := exec.Command("go", "build", "-o", workerBin, "./gpu-fleet/cmd/renderer-worker")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("build renderer-worker: %w", err)
	}
	// The reaper runs beside the workers, as in production (every minute
	// there; every half second here).
	reapCtx, stopReaper := context.WithCancel(context.Background())
	stops = append(stops, stopReaper)
	go reaper.New(stack.App.Store, stack.App.Sessions, reaper.DefaultPolicy, time.Now, quietLog()).Loop(reapCtx, reaperEvery)
	return stop, nil
}

func quietLog() *slog.Logger {
	if os.Getenv("WORKER_TEST_LOG") != "" {
		return slog.New(slog.NewJSONHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewJSONHandler(io.Discard, nil))
}

// workerEnv is the environment of a test worker: the stack's, plus short
// intervals and the loopback opt-ins local development needs.
func workerEnv(extra map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range stack.Env {
		env[k] = v
	}
	for k, v := range map[string]string{
		"WS_LISTEN": "127.0.0.1:0", "LEASE_TTL": leaseTTL.String(), "HEARTBEAT_EVERY": heartbeatEvery.String(),
		"QUEUE_WAIT": "1s", "ROOM_ALLOW_PREFIXES": "127.0.0.1/32", "AVATAR_ALLOW_PREFIXES": "127.0.0.2/32",
		"ROOM_GRACE_PERIOD": "1s", "WORKER_SLOTS": "4", "DRAIN_TIMEOUT": "1m",
	} {
		env[k] = v
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startWorker runs an in-process worker until the test ends; stop drains it
// (as SIGTERM does) and waits.
func startWorker(t *testing.T, extra map[string]string) (p *worker.Process, stop func()) {
	t.Helper()
	env := workerEnv(extra)
	s, err := worker.SettingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	p, err = worker.Start(context.Background(), s, quietLog(), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("worker run: %v", err)
		}
	}
	t.Cleanup(stop)
	return p, stop
}

// startWorkerProcess runs the built renderer-worker binary.
func startWorkerProcess(t *testing.T, extra map[string]string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(workerBin)
	for k, v := range workerEnv(extra) {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("renderer-worker log:\n%s", logs.String())
		}
	})
	return cmd
}

// api calls the stack's HTTP API with key and decodes the JSON answer.
func api(t *testing.T, method, path, key string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, stack.Server.URL+path, r)
	req.Header.Set("x-api-key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	raw, _ := io.ReadAll(res.Body)
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, raw)
	}
	return res.StatusCode, m
}

func faceDataURI(t *testing.T) string {
	return "data:image/png;base64," + base64.StdEncoding.EncodeToString(testfiles.Read(t, testfiles.FacePNG))
}

// session is one created session as a test drives it.
type session struct {
	id, token, room, key, user string
}

// newSession creates a session whose room is roomName on the local
// livekit-server; the renderer's join token is for room.AgentIdentity.
func newSession(t *testing.T, acct stacktest.Account, avatarValue, roomName string) session {
	t.Helper()
	tok, err := livekit.JoinToken(lk.APIKey, lk.APISecret, roomName, room.AgentIdentity, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	code, m := api(t, "POST", "/v1/sessions", acct.LiveKey, map[string]any{
		"avatar": avatarValue, "aspect_ratio": "1:1",
		"room": map[string]any{"platform": "livekit", "url": lk.URL, "token": tok},
	})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	s := m["session"].(map[string]any)
	return session{id: s["session_id"].(string), token: s["session_token"].(string), room: roomName, key: acct.LiveKey, user: acct.User.ID}
}

func (s session) start(t *testing.T) string {
	t.Helper()
	code, m := api(t, "PUT", "/v1/sessions/"+s.id+"/start", s.key, nil)
	if code != http.StatusOK {
		t.Fatalf("start: %d %v", code, m)
	}
	return m["ws_uri"].(string)
}

// awaitWSURI repeats PUT start, as clients are told to, until the
// renderer reported a real ws_uri (every 100 ms: the start quota is 150 a
// minute).
func (s session) awaitWSURI(t *testing.T) string {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for {
		if uri := s.start(t); uri != domain.TryAgain {
			return uri
		}
		if time.Now().After(deadline) {
			t.Fatalf("ws_uri still try_again after %v", liveness)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s session) get(t *testing.T) map[string]any {
	t.Helper()
	code, m := api(t, "GET", "/v1/sessions/"+s.id, s.key, nil)
	if code != http.StatusOK {
		t.Fatalf("get: %d %v", code, m)
	}
	return m["session"].(map[string]any)
}

// awaitEnded waits until the session is ended and returns it.
func (s session) awaitEnded(t *testing.T) map[string]any {
	t.Helper()
	deadline := time.Now().Add(liveness)
	for {
		if got := s.get(t); got["status"] == "ended" {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("session %s not ended after %v: %v", s.id, liveness, s.get(t))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func minutesConsumed(t *testing.T, ended map[string]any) int {
	t.Helper()
	b, ok := ended["billing"].(map[string]any)
	if !ok {
		t.Fatalf("ended session without billing: %v", ended)
	}
	return int(b["minutes_consumed"].(float64))
}

// account reads the account's counters (consistent read).
func account(t *testing.T, userID string) domain.User {
	t.Helper()
	u, err := stack.App.Store.GetUser(context.Background(), userID)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func viewerToken(t *testing.T, roomName, identity string) string {
	t.Helper()
	tok, err := livekit.JoinToken(lk.APIKey, lk.APISecret, roomName, identity, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func preparedFace(t *testing.T) *avatarimage.Prepared { return roomtest.Face(t, render.Square) }

func speech(t *testing.T) []int16 { return roomtest.Speech(t) }

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	roomtest.WaitFor(t, what, cond)
}

func avatarPresent(v *roomtest.Viewer) bool {
	return v.Room.GetParticipantByIdentity(room.AgentIdentity) != nil
}

// TestSessionEndToEnd: create -> PUT start -> real ws_uri -> agent.speak a
// WAV -> a LiveKit subscriber decodes VP8 and sees the mouth move -> API
// End -> the renderer leaves the room within 2 s; billed once; the
// account's concurrency counter is back to 0.
func TestSessionEndToEnd(t *testing.T) {
	stacktest.SkipShort(t)
	startWorker(t, nil)
	acct, err := stack.NewAccount(context.Background(), "pro")
	if err != nil {
		t.Fatal(err)
	}
	s := newSession(t, acct, faceDataURI(t), "e2e")
	v := roomtest.JoinViewer(t, lk.URL, viewerToken(t, s.room, "viewer"), preparedFace(t))
	defer v.Room.Disconnect()

	began := time.Now()
	wsURI := s.awaitWSURI(t)
	served := time.Now()
	t.Logf("PUT start -> real ws_uri: %v", time.Since(began))
	if !strings.HasPrefix(wsURI, "ws://127.0.0.1:") || !strings.HasSuffix(wsURI, "/ws/"+s.id) {
		t.Fatalf("ws_uri: got %q, want ws://127.0.0.1:<port>/ws/%s", wsURI, s.id)
	}
	if again := s.start(t); again != wsURI {
		t.Errorf("repeat PUT start: got %q, want %q", again, wsURI)
	}
	waitFor(t, "the first decoded frame", func() bool { return !v.FirstFrameAt().IsZero() })
	t.Logf("PUT start -> first decoded frame: %v", v.FirstFrameAt().Sub(began))

	ws := roomtest.DialWS(t, wsURI, s.id, s.token)
	pcm := speech(t)[:16000*3]
	for i := 0; i < len(pcm); i += 1600 {
		ws.SendPCM(pcm[i:min(i+1600, len(pcm))])
	}
	ws.Send(map[string]any{"type": "agent.speak_end"})
	started := ws.Await("agent.speak_started")
	finished := ws.Await("agent.speak_ended")
	moving := 0
	for _, f := range v.FramesBetween(started.At, finished.At) {
		if f.Mouth >= movingMin {
			moving++
		}
	}
	if moving < 10 {
		t.Fatalf("frames with the mouth open while speaking: got %d, want >= 10", moving)
	}

	code, m := api(t, "POST", "/v1/sessions/"+s.id+"/end", s.key, nil)
	if code != http.StatusOK {
		t.Fatalf("end: %d %v", code, m)
	}
	ended := time.Now()
	waitFor(t, "the renderer to leave the room", func() bool { return !avatarPresent(v) })
	left := time.Since(ended)
	t.Logf("End -> renderer left the room: %v", left)
	if left > 2*time.Second {
		t.Errorf("renderer left the room %v after End, want within 2 s", left)
	}
	time.Sleep(2 * heartbeatEvery) // room for a wrong second end to happen
	got := s.get(t)
	if got["end_reason"] != domain.ReasonEndedByCaller || minutesConsumed(t, got) != 1 {
		t.Errorf("ended session: got %v, want ended_by_caller with 1 minute", got)
	}
	if u := account(t, acct.User.ID); u.ActiveSessions != 0 || u.IncludedUsed != 1 {
		t.Errorf("account: active %d, included used %d; want 0 and 1 (billed once)", u.ActiveSessions, u.IncludedUsed)
	}

	t.Run("quality figures", func(t *testing.T) {
		var q map[string]any
		waitFor(t, "the quality block", func() bool { q, _ = s.get(t)["quality"].(map[string]any); return q != nil })
		t.Logf("quality: %v", q)
		num := func(k string) float64 { f, _ := q[k].(float64); return f }
		// The renderer published from before ws_uri was reported until it
		// left: about 25 frames a second of that.
		secs := ended.Add(left).Sub(served).Seconds()
		if f := num("frames"); f < 20*secs || f > 25*secs+50 {
			t.Errorf("frames: got %v, want about 25 x %.1f s", f, secs)
		}
		for _, c := range []struct {
			key      string
			min, max float64
		}{
			{"first_frame_ms", 1, 30000},
			// 3 s of speech went in at once: a chunk's latency includes
			// the time it waited behind the speech ahead of it.
			{"latency_p50_ms", 1, 3500},
			{"latency_p99_ms", num("latency_p50_ms"), 3500},
			{"late_frames", 0, num("frames")},
			{"underruns", 0, num("frames")},
			{"max_av_skew_ms", 0, 40},
			{"bitrate_kbps", 50, 5000},
			{"subscribers", 1, 1}, // the viewer
		} {
			if v := num(c.key); v < c.min || v > c.max {
				t.Errorf("%s: got %v, want %v..%v", c.key, v, c.min, c.max)
			}
		}
	})
}

// TestDuplicateJobs: the same job delivered 3 times to 2 workers gives one
// room join and one ws_uri, and no error.
func TestDuplicateJobs(t *testing.T) {
	stacktest.SkipShort(t)
	w1, _ := startWorker(t, nil)
	w2, _ := startWorker(t, nil)
	acct, _ := stack.NewAccount(context.Background(), "pro")
	s := newSession(t, acct, faceDataURI(t), "dup")
	v := roomtest.JoinViewer(t, lk.URL, viewerToken(t, s.room, "viewer"), preparedFace(t))
	defer v.Room.Disconnect()
	s.start(t)
	stored, err := stack.App.Store.GetSession(context.Background(), s.user, s.id)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := stack.App.Queue.Enqueue(context.Background(), jobs.NewStartJob(s.id, s.user, stored.JobDeadline, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	wsURI := s.awaitWSURI(t)
	time.Sleep(3 * time.Second) // both workers poll the copies meanwhile
	if n := w1.Worker.Running() + w2.Worker.Running(); n != 1 {
		t.Errorf("sessions running across the two workers: got %d, want 1", n)
	}
	if again := s.start(t); again != wsURI {
		t.Errorf("ws_uri changed: %q then %q", wsURI, again)
	}
	if got := s.get(t); got["status"] != "started" {
		t.Errorf("session after duplicates: %v", got)
	}
	api(t, "POST", "/v1/sessions/"+s.id+"/end", s.key, nil)
}

// TestWorkerKilled: a worker SIGKILLed mid-session is ended and billed by
// the reaper within the lease plus one reaper period.
func TestWorkerKilled(t *testing.T) {
	stacktest.SkipShort(t)
	cmd := startWorkerProcess(t, nil)
	acct, _ := stack.NewAccount(context.Background(), "pro")
	s := newSession(t, acct, faceDataURI(t), "killed")
	v := roomtest.JoinViewer(t, lk.URL, viewerToken(t, s.room, "viewer"), preparedFace(t))
	defer v.Room.Disconnect()
	s.awaitWSURI(t)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	ended := s.awaitEnded(t)
	t.Logf("SIGKILL -> ended by the reaper: %v (lease %v + reaper period %v)", time.Since(killed), leaseTTL, reaperEvery)
	if ended["end_reason"] != domain.ReasonWorkerLost || minutesConsumed(t, ended) != 1 {
		t.Errorf("got %v, want worker_lost billed 1 minute", ended)
	}
	if u := account(t, acct.User.ID); u.ActiveSessions != 0 || u.IncludedUsed != 1 {
		t.Errorf("account: active %d, included used %d; want 0 and 1", u.ActiveSessions, u.IncludedUsed)
	}
}

// TestRoomEnds: the viewer leaving ends the session as participants_left;
// reaching the expiration ends it as expired. Each is billed once.
func TestRoomEnds(t *testing.T) {
	stacktest.SkipShort(t)
	t.Run("viewer leaves", func(t *testing.T) {
		startWorker(t, nil)
		acct, _ := stack.NewAccount(context.Background(), "pro")
		s := newSession(t, acct, faceDataURI(t), "leave")
		v := roomtest.JoinViewer(t, lk.URL, viewerToken(t, s.room, "viewer"), preparedFace(t))
		s.awaitWSURI(t)
		waitFor(t, "a decoded frame", func() bool { return !v.FirstFrameAt().IsZero() })
		v.Room.Disconnect()
		ended := s.awaitEnded(t)
		if ended["end_reason"] != domain.ReasonParticipantsLeft || minutesConsumed(t, ended) != 1 {
			t.Errorf("got %v, want participants_left billed 1 minute", ended)
		}
		if u := account(t, acct.User.ID); u.ActiveSessions != 0 || u.IncludedUsed != 1 {
			t.Errorf("account: active %d, included used %d; want 0 and 1", u.ActiveSessions, u.IncludedUsed)
		}
	})
	t.Run("expiration reached", func(t *testing.T) {
		acct, _ := stack.NewAccount(context.Background(), "pro")
		s := newSession(t, acct, faceDataURI(t), "expire")
		v := roomtest.JoinViewer(t, lk.URL, viewerToken(t, s.room, "viewer"), preparedFace(t))
		defer v.Room.Disconnect()
		s.start(t) // no worker yet: the job waits in the queue
		expiresAt := time.Now().Add(4 * time.Second)
		setSessionTime(t, s.id, "expiration", expiresAt)
		startWorker(t, nil)
		s.awaitWSURI(t)
		ended := s.awaitEnded(t)
		if ended["end_reason"] != domain.ReasonExpired || minutesConsumed(t, ended) != 1 {
			t.Errorf("got %v, want expired billed 1 minute", ended)
		}
		waitFor(t, "the renderer to leave", func() bool { return !avatarPresent(v) })
	})
}

// setSessionTime overwrites one timestamp attribute of a session item: a
// test's way to a short expiration or a passed deadline.
func setSessionTime(t *testing.T, id, attr string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	ddb := dynamodb.NewFromConfig(localstack.AWSConfig(ctx, stack.Env["AWS_ENDPOINT_URL_DYNAMODB"]))
	_, err := ddb.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(stack.Env["SESSIONS_TABLE"]),
		Key:                       map[string]ddbtypes.AttributeValue{"session_id": &ddbtypes.AttributeValueMemberS{Value: id}},
		UpdateExpression:          aws.String("SET #a = :v"),
		ExpressionAttributeNames:  map[string]string{"#a": attr},
		ExpressionAttributeValues: map[string]ddbtypes.AttributeValue{":v": &ddbtypes.AttributeValueMemberS{Value: at.UTC().Format("2006-01-02T15:04:05.000000Z")}},
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAvatarURLs: avatar URLs at forbidden addresses, a redirect to
// loopback, a 60 MB body and a faceless image: nothing is fetched from the
// forbidden addresses, the session ends with a clear reason, nothing is
// billed.
func TestAvatarURLs(t *testing.T) {
	stacktest.SkipShort(t)
	startWorker(t, nil)
	acct, _ := stack.NewAccount(context.Background(), "pro")
	tests := []struct {
		name, url, wantReason string
	}{
		{"loopback", avatarSrv.forbiddenURL + "/face.png", "avatar_unavailable"},
		{"cloud metadata", "https://169.254.169.254/latest/meta-data/", "avatar_unavailable"},
		{"private network", "https://10.0.0.1/face.png", "avatar_unavailable"},
		{"redirect to loopback", avatarSrv.allowedURL + "/redirect", "avatar_unavailable"},
		{"60 MB body", avatarSrv.allowedURL + "/huge", "avatar_rejected: image too large"},
		{"faceless image", avatarSrv.allowedURL + "/noface.jpg", "avatar_rejected: no face found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSession(t, acct, tt.url, "avatar-"+strings.ReplaceAll(tt.name, " ", "-"))
			s.start(t)
			ended := s.awaitEnded(t)
			reason, _ := ended["end_reason"].(string)
			if !strings.HasPrefix(reason, tt.wantReason) {
				t.Errorf("end_reason: got %q, want it to start with %q", reason, tt.wantReason)
			}
			b := ended["billing"].(map[string]any)
			if b["minutes_consumed"] != 0.0 || b["billing_status"] != domain.StatusNoCharge {
				t.Errorf("billing: got %v, want 0 minutes, no_charge", b)
			}
		})
	}
	if n := avatarSrv.forbiddenHits.Load(); n != 0 {
		t.Errorf("requests that reached the loopback server: got %d, want 0", n)
	}
	if u := account(t, acct.User.ID); u.ActiveSessions != 0 || u.IncludedUsed != 0 {
		t.Errorf("account: active %d, included used %d; want 0 and 0", u.ActiveSessions, u.IncludedUsed)
	}
	t.Run("a good https avatar serves", func(t *testing.T) {
		s := newSession(t, acct, avatarSrv.allowedURL+"/face.png", "avatar-good")
		v := roomtest.JoinViewer(t, lk.URL, viewerToken(t, s.room, "viewer"), preparedFace(t))
		defer v.Room.Disconnect()
		s.awaitWSURI(t)
		waitFor(t, "a decoded frame", func() bool { return !v.FirstFrameAt().IsZero() })
		api(t, "POST", "/v1/sessions/"+s.id+"/end", s.key, nil)
	})
}

// TestRoomURLNotAllowed: a room URL that resolves to an address outside the
// workers' room policy (here 127.0.0.2; only the local livekit-server's
// 127.0.0.1 is opted in) is never dialled: the session ends
// room_unreachable, billed nothing.
func TestRoomURLNotAllowed(t *testing.T) {
	stacktest.SkipShort(t)
	startWorker(t, nil)
	acct, _ := stack.NewAccount(context.Background(), "pro")
	tok, err := livekit.JoinToken(lk.APIKey, lk.APISecret, "elsewhere", room.AgentIdentity, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	code, m := api(t, "POST", "/v1/sessions", acct.LiveKey, map[string]any{
		"avatar": faceDataURI(t), "room": map[string]any{"platform": "livekit", "url": strings.Replace(lk.URL, "127.0.0.1", "127.0.0.2", 1), "token": tok},
	})
	if code != http.StatusCreated {
		t.Fatalf("create: %d %v", code, m)
	}
	s := session{id: m["session"].(map[string]any)["session_id"].(string), key: acct.LiveKey, user: acct.User.ID}
	s.start(t)
	ended := s.awaitEnded(t)
	if reason, _ := ended["end_reason"].(string); !strings.HasPrefix(reason, domain.ReasonRoomUnreachable+": room host 127.0.0.2 not allowed") {
		t.Errorf("end_reason: got %q, want room_unreachable: room host 127.0.0.2 not allowed", reason)
	}
	if minutesConsumed(t, ended) != 0 {
		t.Errorf("billing: got %v, want 0 minutes", ended["billing"])
	}
}

// TestDrainOnSIGTERM: SIGTERM with a session running: no new jobs taken,
// the session ends worker_drained at the drain deadline, billed once.
func TestDrainOnSIGTERM(t *testing.T) {
	stacktest.SkipShort(t)
	cmd := startWorkerProcess(t, map[string]string{"DRAIN_TIMEOUT": "3s"})
	acct, _ := stack.NewAccount(context.Background(), "pro")
	s := newSession(t, acct, faceDataURI(t), "drain")
	v := roomtest.JoinViewer(t, lk.URL, viewerToken(t, s.room, "viewer"), preparedFace(t))
	defer v.Room.Disconnect()
	s.awaitWSURI(t)
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	late := newSession(t, acct, faceDataURI(t), "drain-late")
	late.start(t)

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("worker exit: %v, want a clean exit after draining", err)
		}
	case <-time.After(liveness):
		t.Fatal("worker did not exit after draining")
	}
	ended := s.get(t)
	if ended["status"] != "ended" || ended["end_reason"] != domain.ReasonWorkerDrained || minutesConsumed(t, ended) != 1 {
		t.Errorf("drained session: got %v, want ended worker_drained billed 1 minute", ended)
	}
	if got := late.get(t); got["status"] != "started" || late.start(t) != domain.TryAgain {
		t.Errorf("session started during the drain: got %v, want it unclaimed (try_again)", got)
	}
	if u := account(t, acct.User.ID); u.IncludedUsed != 1 {
		t.Errorf("included used: got %d, want 1 (billed once)", u.IncludedUsed)
	}
	api(t, "POST", "/v1/sessions/"+late.id+"/end", late.key, nil)
}

// TestUnclaimedJob: a job no worker claims before its deadline is ended
// no_capacity, nothing billed.
func TestUnclaimedJob(t *testing.T) {
	stacktest.SkipShort(t)
	acct, _ := stack.NewAccount(context.Background(), "pro")
	s := newSession(t, acct, faceDataURI(t), "unclaimed")
	s.start(t)
	setSessionTime(t, s.id, "job_deadline", time.Now().Add(-time.Second))
	ended := s.awaitEnded(t) // the reaper's next sweep
	if ended["end_reason"] != domain.ReasonNoCapacity || minutesConsumed(t, ended) != 0 {
		t.Errorf("got %v, want no_capacity with 0 minutes", ended)
	}
	if u := account(t, acct.User.ID); u.ActiveSessions != 0 || u.IncludedUsed != 0 {
		t.Errorf("account: active %d, included used %d; want 0 and 0", u.ActiveSessions, u.IncludedUsed)
	}
}

// avatarServers are TLS servers for avatar URLs: one on 127.0.0.2 (which
// the workers' AVATAR_ALLOW_PREFIXES lets them reach) and one on 127.0.0.1
// that must never be reached.
type avatarServers struct {
	allowed, forbidden       *httptest.Server
	allowedURL, forbiddenURL string
	forbiddenHits            atomic.Int64
	caFile                   string
}

func startAvatarServers(dir string) (*avatarServers, error) {
	cert, caPEM, err := selfSigned()
	if err != nil {
		return nil, err
	}
	a := &avatarServers{caFile: filepath.Join(dir, "ca.pem")}
	if err := os.WriteFile(a.caFile, caPEM, 0o600); err != nil {
		return nil, err
	}
	face, err := os.ReadFile(testfiles.Path(testfiles.FacePNG))
	if err != nil {
		return nil, err
	}
	noface, err := os.ReadFile(testfiles.Path(testfiles.NoFaceJPEG))
	if err != nil {
		return nil, err
	}
	start := func(addr string, h http.Handler) (*httptest.Server, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, err
		}
		s := httptest.NewUnstartedServer(h)
		s.Listener.Close()
		s.Listener = ln
		s.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
		s.StartTLS()
		return s, nil
	}
	a.forbidden, err = start("127.0.0.1:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.forbiddenHits.Add(1)
		w.Write(face)
	}))
	if err != nil {
		return nil, err
	}
	a.forbiddenURL = a.forbidden.URL
	mux := http.NewServeMux()
	mux.HandleFunc("/face.png", func(w http.ResponseWriter, r *http.Request) { w.Write(face) })
	mux.HandleFunc("/noface.jpg", func(w http.ResponseWriter, r *http.Request) { w.Write(noface) })
	mux.HandleFunc("/slow-face.png", func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(slowAvatar) // a launch that takes several leases
		w.Write(face)
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, a.forbiddenURL+"/face.png", http.StatusFound)
	})
	mux.HandleFunc("/huge", func(w http.ResponseWriter, r *http.Request) {
		chunk := make([]byte, 1<<20)
		for range 60 { // over the 50 MiB cap (video avatars)
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	if a.allowed, err = start("127.0.0.2:0", mux); err != nil {
		return nil, err
	}
	a.allowedURL = a.allowed.URL
	return a, nil
}

func (a *avatarServers) close() {
	a.allowed.Close()
	a.forbidden.Close()
}

// selfSigned makes a certificate for 127.0.0.1 and 127.0.0.2 and returns
// it with its PEM, which the test process then trusts.
func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "avatar test server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("127.0.0.2")},
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
