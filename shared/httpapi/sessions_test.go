package httpapi_test

import (
	"avatarsvc/gpu-fleet/testfiles"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/sessions"
)

func TestSessionLifecycle(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	key := acct.LiveKey

	t.Run("create returns created with a token shown once", func(t *testing.T) {
		res := call(t, "POST", "/v1/sessions", key, validSession())
		if res.Status != http.StatusCreated {
			t.Fatalf("status: got %d, want 201: %s", res.Status, res.Body)
		}
		m := res.JSON(t)
		if got := m["success"]; got != true {
			t.Errorf("success: got %v, want true", got)
		}
		id, _ := dig(m, "session", "session_id").(string)
		if !strings.HasPrefix(id, "sess_") {
			t.Errorf("session_id: got %q, want sess_ prefix", id)
		}
		if got := dig(m, "session", "status"); got != "created" {
			t.Errorf("status: got %v, want created", got)
		}
		if tok, _ := dig(m, "session", "session_token").(string); len(tok) < 40 {
			t.Errorf("session_token: got %q, want a long random token", tok)
		}
		if msg, _ := m["message"].(string); msg == "" {
			t.Error("message: got empty, want a confirmation")
		}
		got := call(t, "GET", "/v1/sessions/"+id, key, nil).JSON(t)
		s := dig(got, "session").(map[string]any)
		for _, hidden := range []string{"session_token", "room", "billing"} {
			if _, ok := s[hidden]; ok {
				t.Errorf("GET session shows %q; it must be omitted", hidden)
			}
		}
		if s["started_at"] != nil || s["ended_at"] != nil || s["expiration"] != nil {
			t.Errorf("created session: got started_at=%v ended_at=%v expiration=%v, want nulls", s["started_at"], s["ended_at"], s["expiration"])
		}
		if s["aspect_ratio"] != "4:3" || dig(s, "metadata", "customer") != "acme" || s["duration"] != float64(0) {
			t.Errorf("GET session fields: got %v", s)
		}
	})

	t.Run("created -> PUT start -> started with try_again and a job on the queue", func(t *testing.T) {
		id, token := createSession(t, key)
		res := call(t, "PUT", "/v1/sessions/"+id+"/start", key, nil)
		if res.Status != http.StatusOK {
			t.Fatalf("start: status %d: %s", res.Status, res.Body)
		}
		m := res.JSON(t)
		if m["ws_uri"] != domain.TryAgain || m["success"] != true {
			t.Errorf("start: got %v, want success and ws_uri try_again", m)
		}
		exp, err := time.Parse(time.RFC3339, m["expiration"].(string))
		if err != nil {
			t.Fatalf("expiration: %v", err)
		}
		if want := stack.Clock.Now().Add(180 * time.Minute); !exp.Equal(want.Truncate(time.Millisecond)) {
			t.Errorf("expiration: got %v, want %v (Pro: 180 minutes)", exp, want)
		}
		s := dig(call(t, "GET", "/v1/sessions/"+id, key, nil).JSON(t), "session")
		if dig(s, "status") != "started" || dig(s, "started_at") == nil {
			t.Errorf("after start: got %v", s)
		}
		job := receiveJob(t, id)
		// The job carries ids only; the renderer reads the room token and
		// avatar from the table when it claims the session.
		if job.Version != jobs.Version || job.UserID == "" || !job.Deadline.After(job.EnqueuedAt) {
			t.Errorf("job: got %+v", job)
		}
		stored, err := stack.App.Store.GetSession(context.Background(), job.UserID, id)
		if err != nil || stored.Room.Token != "join-token" || stored.AspectRatio != "4:3" || stored.TokenHash != domain.HashSecret(token) ||
			stored.Avatar.URL == "" || !stored.JobDeadline.Equal(job.Deadline) {
			t.Errorf("stored session: got %+v, %v (job %+v)", stored, err, job)
		}

		t.Run("repeat PUT start is idempotent", func(t *testing.T) {
			again := call(t, "PUT", "/v1/sessions/"+id+"/start", key, nil).JSON(t)
			if again["success"] != true || again["ws_uri"] != m["ws_uri"] || again["expiration"] != m["expiration"] {
				t.Errorf("repeat: got %v, want %v", again, m)
			}
		})
		t.Run("repeat POST start is an error", func(t *testing.T) {
			res := call(t, "POST", "/api/v1/sessions/"+id+"/start", key, nil)
			assertStringError(t, res, http.StatusBadRequest, true, "Session is already started")
		})
		t.Run("delete of a started session is rejected", func(t *testing.T) {
			res := call(t, "DELETE", "/v1/sessions/"+id, key, nil)
			assertStructuredError(t, res, http.StatusBadRequest, "Cannot delete a session that has been started")
		})

		serve(t, id)
		stack.Clock.Advance(61 * time.Second)
		t.Run("end sets ended_at and bills rounded-up minutes", func(t *testing.T) {
			res := call(t, "POST", "/v1/sessions/"+id+"/end", key, nil)
			if res.Status != http.StatusOK {
				t.Fatalf("end: status %d: %s", res.Status, res.Body)
			}
			s := dig(res.JSON(t), "session")
			if dig(s, "status") != "ended" || dig(s, "ended_at") == nil || dig(s, "started_at") == nil || dig(s, "duration") != float64(61) {
				t.Errorf("ended session: got %v", s)
			}
			bill := dig(s, "billing")
			want := map[string]any{"minutes_consumed": float64(2), "minutes_source": "plan_minutes", "billing_status": "no_charge", "minutes_billed": float64(0)}
			for k, v := range want {
				if got := dig(bill, k); got != v {
					t.Errorf("billing.%s: got %v, want %v", k, got, v)
				}
			}
		})
		t.Run("repeat end succeeds", func(t *testing.T) {
			res := call(t, "POST", "/v1/sessions/"+id+"/end", key, nil)
			if res.Status != http.StatusOK || res.JSON(t)["success"] != true {
				t.Errorf("repeat end: %d %s", res.Status, res.Body)
			}
		})
		t.Run("PUT start of an ended session is rejected", func(t *testing.T) {
			res := call(t, "PUT", "/v1/sessions/"+id+"/start", key, nil)
			assertStructuredError(t, res, http.StatusBadRequest, "Cannot start an ended session")
		})
		t.Run("POST start of an ended session is rejected", func(t *testing.T) {
			res := call(t, "POST", "/api/v1/sessions/"+id+"/start", key, nil)
			assertStringError(t, res, http.StatusBadRequest, true, "Cannot start an ended session")
		})
		t.Run("delete of an ended session is rejected", func(t *testing.T) {
			res := call(t, "DELETE", "/v1/sessions/"+id, key, nil)
			assertStructuredError(t, res, http.StatusBadRequest, "Cannot delete a session that has been started")
		})
	})

	t.Run("POST start (second form) starts a created session", func(t *testing.T) {
		id, _ := createSession(t, key)
		res := call(t, "POST", "/api/v1/sessions/"+id+"/start", key, nil)
		if m := res.JSON(t); res.Status != http.StatusOK || m["success"] != true || m["message"] == nil {
			t.Errorf("POST start: %d %s", res.Status, res.Body)
		}
		call(t, "POST", "/v1/sessions/"+id+"/end", key, nil)
	})

	t.Run("end of a never-started session is an error with a suggestion", func(t *testing.T) {
		id, _ := createSession(t, key)
		res := call(t, "POST", "/v1/sessions/"+id+"/end", key, nil)
		assertStructuredError(t, res, http.StatusBadRequest, "Cannot end a session that was never started")
		if s, _ := dig(res.JSON(t), "error", "suggestion").(string); !strings.Contains(s, "started") {
			t.Errorf("suggestion: got %q, want it to say only started sessions can be ended", s)
		}
	})

	t.Run("delete of a created session removes it", func(t *testing.T) {
		id, _ := createSession(t, key)
		res := call(t, "DELETE", "/v1/sessions/"+id, key, nil)
		if res.Status != http.StatusOK || res.JSON(t)["success"] != true {
			t.Fatalf("delete: %d %s", res.Status, res.Body)
		}
		assertStructuredError(t, call(t, "GET", "/v1/sessions/"+id, key, nil), http.StatusNotFound, "Session not found")
	})

	t.Run("automatic end after expiration bills up to the expiration", func(t *testing.T) {
		free := newAccount(t, "free")
		id, _ := createSession(t, free.LiveKey)
		call(t, "PUT", "/v1/sessions/"+id+"/start", free.LiveKey, nil)
		serve(t, id)
		stack.Clock.Advance(20 * time.Minute) // Free sessions expire after 5 minutes
		s, err := stack.App.Sessions.Finish(context.Background(), free.User.ID, id, domain.EventAutoEnd, "expired")
		if err != nil {
			t.Fatal(err)
		}
		if s.Status != domain.StatusEnded || s.Billing.MinutesConsumed != 5 {
			t.Errorf("auto end: got status %s billing %+v, want ended with 5 minutes", s.Status, s.Billing)
		}
	})

	t.Run("list filters by status and shows billing only on ended sessions", func(t *testing.T) {
		a := newAccount(t, "pro")
		created, _ := createSession(t, a.LiveKey)
		started, _ := createSession(t, a.LiveKey)
		ended, _ := createSession(t, a.LiveKey)
		call(t, "PUT", "/v1/sessions/"+started+"/start", a.LiveKey, nil)
		call(t, "PUT", "/v1/sessions/"+ended+"/start", a.LiveKey, nil)
		call(t, "POST", "/v1/sessions/"+ended+"/end", a.LiveKey, nil)
		for _, tc := range []struct {
			filter string
			want   []string
		}{
			{"", []string{ended, started, created}},
			{"?status=all", []string{ended, started, created}},
			{"?status=started", []string{started}},
			{"?status=ended", []string{ended}},
			{"?status=bogus", []string{ended, started, created}},
		} {
			t.Run(tc.filter, func(t *testing.T) {
				list := call(t, "GET", "/v1/sessions"+tc.filter, a.LiveKey, nil).JSON(t)["sessions"].([]any)
				var got []string
				for _, v := range list {
					s := v.(map[string]any)
					got = append(got, s["session_id"].(string))
					_, hasBilling := s["billing"]
					if hasBilling != (s["status"] == "ended") {
						t.Errorf("%s (%s): billing present=%v", s["session_id"], s["status"], hasBilling)
					}
					if _, ok := s["session_token"]; ok {
						t.Errorf("list shows session_token")
					}
				}
				if strings.Join(got, ",") != strings.Join(tc.want, ",") {
					t.Errorf("got %v, want %v", got, tc.want)
				}
			})
		}
	})
}

func TestCreateSessionValidation(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	face := testfiles.Read(t, testfiles.FacePNG)
	withAvatar := func(avatar any) map[string]any {
		b := validSession()
		b["avatar"] = avatar
		return b
	}
	t.Run("a PNG data URI is accepted and stored in the media bucket", func(t *testing.T) {
		res := call(t, "POST", "/v1/sessions", acct.LiveKey, withAvatar("data:image/png;base64,"+base64.StdEncoding.EncodeToString(face)))
		if res.Status != http.StatusCreated {
			t.Fatalf("status %d: %s", res.Status, res.Body)
		}
		id := dig(res.JSON(t), "session", "session_id").(string)
		s, err := stack.App.Sessions.Get(context.Background(), acct.User.ID, id)
		if err != nil || s.Avatar.Key == "" || s.Avatar.MediaType != "image/png" {
			t.Errorf("stored avatar: got %+v, %v", s.Avatar, err)
		}
	})
	for _, tc := range []struct {
		name   string
		body   any
		status int
		msg    string
	}{
		{"avatar not a URL or data URI", withAvatar("avatar.png"), 400, "Invalid avatar format"},
		{"http avatar", withAvatar("http://example.com/a.png"), 400, "Invalid avatar format"},
		{"data URI not base64", withAvatar("data:image/png,abc"), 400, "Invalid avatar format"},
		{"data URI bad base64", withAvatar("data:image/png;base64,!!!"), 400, "Invalid avatar format"},
		{"data URI not an image", withAvatar("data:image/png;base64," + base64.StdEncoding.EncodeToString([]byte("hello world, not a png"))), 400, "Invalid avatar format"},
		{"data URI type mismatch", withAvatar("data:image/jpeg;base64," + base64.StdEncoding.EncodeToString(face)), 400, "Invalid avatar format"},
		{"avatar missing", withAvatar(""), 400, "Invalid avatar format"},
		{"avatar id that does not exist", withAvatar("avat_01J0000000000000000000000"), 400, "Invalid avatar format"},
		{"catalog id that does not exist", withAvatar("catalog/nobody/here"), 400, "Invalid avatar format"},
		{"avatar wrong type", withAvatar(42), 400, "Field avatar must be a string"},
		{"bad aspect ratio", func() any { b := validSession(); b["aspect_ratio"] = "16:9"; return b }(), 400, `Invalid aspect_ratio "16:9"`},
		{"no room", func() any { b := validSession(); delete(b, "room"); return b }(), 400, "room is required"},
		{"bad platform", func() any {
			b := validSession()
			b["room"] = map[string]any{"platform": "zoom", "url": "wss://x.example", "token": "t"}
			return b
		}(), 400, `Invalid room platform "zoom"`},
		{"daily is not served by this deployment's renderers", func() any {
			b := validSession()
			b["room"] = map[string]any{"platform": "daily", "url": "https://example.daily.co/room"}
			return b
		}(), 400, `Room platform "daily" is not enabled on this deployment`},
		{"room url", func() any {
			b := validSession()
			b["room"] = map[string]any{"platform": "livekit", "url": "not a url", "token": "t"}
			return b
		}(), 400, "Invalid room url"},
		{"metadata not an object", func() any { b := validSession(); b["metadata"] = "x"; return b }(), 400, "Field metadata must be an object"},
		{"metadata too large", func() any {
			b := validSession()
			b["metadata"] = map[string]any{"x": strings.Repeat("a", 20000)}
			return b
		}(), 400, "metadata is too large"},
		{"metadata nested too deeply", func() any {
			b := validSession()
			var v any = 1
			for i := 0; i < 40; i++ {
				v = []any{v}
			}
			b["metadata"] = map[string]any{"deep": v}
			return b
		}(), 400, "JSON is nested too deeply"},
		{"metadata number out of range", func() any { b := validSession(); b["metadata"] = map[string]any{"n": 1e200}; return b }(), 400, "A number is out of the storable range"},
		{"not JSON", "{avatar:", 400, "Request body is not valid JSON"},
		{"empty body", "", 400, "Request body is required"},
		{"JSON array", "[1,2]", 400, "Request body must be a JSON object"},
		{"huge body", `{"avatar":"` + strings.Repeat("a", 7<<20) + `"}`, 400, "Request body is too large"},
		{"huge data URI", withAvatar("data:image/png;base64," + strings.Repeat("A", 5_600_000)), 400, "Invalid avatar format"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, "POST", "/v1/sessions", acct.LiveKey, tc.body)
			assertStructuredError(t, res, tc.status, tc.msg)
			if tc.msg == "Invalid avatar format" {
				s, _ := dig(res.JSON(t), "error", "suggestion").(string)
				if !strings.Contains(s, "https://") || !strings.Contains(s, "data:image/") {
					t.Errorf("suggestion: got %q, want both accepted forms named", s)
				}
			}
		})
	}
}

// TestConcurrentStarts: 50 parallel starts on a concurrency-5 account give
// exactly 5 started, and ending them returns the counter to 0.
func TestConcurrentStarts(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "explorer")
	ctx := context.Background()
	ids := make([]string, 50)
	for i := range ids {
		c, err := stack.App.Sessions.Create(ctx, acct.User.ID, domain.ModeLive, sessionsInput())
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = c.Session.ID
	}
	statuses := make([]response, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = call(t, "PUT", "/v1/sessions/"+id+"/start", acct.LiveKey, nil)
		}()
	}
	wg.Wait()
	var started []string
	for i, res := range statuses {
		switch res.Status {
		case http.StatusOK:
			started = append(started, ids[i])
		case http.StatusForbidden:
			if msg := dig(res.JSON(t), "error", "message"); msg != "Concurrent session limit reached" {
				t.Errorf("rejected start: got %v, want the concurrency message", msg)
			}
		default:
			t.Errorf("start %d: unexpected status %d: %s", i, res.Status, res.Body)
		}
	}
	if len(started) != 5 {
		t.Fatalf("started: got %d, want exactly 5", len(started))
	}
	if u := user(t, acct.User.ID); u.ActiveSessions != 5 {
		t.Errorf("active_sessions counter: got %d, want 5", u.ActiveSessions)
	}
	usage := call(t, "GET", "/v1/usage", acct.LiveKey, nil).JSON(t)
	if got := dig(usage, "usage", "concurrency", "available"); got != float64(0) {
		t.Errorf("usage concurrency.available: got %v, want 0", got)
	}
	for _, id := range started {
		if res := call(t, "POST", "/v1/sessions/"+id+"/end", acct.LiveKey, nil); res.Status != http.StatusOK {
			t.Errorf("end %s: %d %s", id, res.Status, res.Body)
		}
	}
	if u := user(t, acct.User.ID); u.ActiveSessions != 0 {
		t.Errorf("active_sessions after ending: got %d, want 0", u.ActiveSessions)
	}
}

func sessionsInput() sessions.CreateInput {
	return sessions.CreateInput{Avatar: "https://images.example.com/a.png", AspectRatio: "1:1",
		Room: &domain.Room{Platform: "livekit", URL: "wss://rooms.example.com", Token: "t"}}
}

func user(t testing.TB, id string) domain.User {
	t.Helper()
	u, err := stack.App.Store.GetUser(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// receiveJob reads the session-start queue until the job for id arrives.
func receiveJob(t testing.TB, id string) jobs.StartJob {
	t.Helper()
	ctx := context.Background()
	client := sqs.NewFromConfig(localstack.AWSConfig(ctx, stack.Env["AWS_ENDPOINT_URL_SQS"]))
	url := stack.Env["SESSION_QUEUE_URL"]
	for attempt := 0; attempt < 50; attempt++ {
		out, err := client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatalf("receive: %v", err)
		}
		for _, m := range out.Messages {
			var j jobs.StartJob
			if err := json.Unmarshal([]byte(aws.ToString(m.Body)), &j); err != nil {
				t.Fatalf("job body: %v", err)
			}
			client.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
			if j.SessionID == id {
				return j
			}
		}
	}
	t.Fatalf("no job for %s on the queue", id)
	return jobs.StartJob{}
}

func assertStructuredError(t testing.TB, res response, status int, message string) {
	t.Helper()
	if res.Status != status {
		t.Errorf("status: got %d, want %d (body %s)", res.Status, status, res.Body)
	}
	m := res.JSON(t)
	if m["success"] != false {
		t.Errorf("success: got %v, want false", m["success"])
	}
	if got := dig(m, "error", "message"); got != message {
		t.Errorf("error.message: got %v, want %q", got, message)
	}
}

func assertStringError(t testing.TB, res response, status int, withSuccess bool, message string) {
	t.Helper()
	if res.Status != status {
		t.Errorf("status: got %d, want %d (body %s)", res.Status, status, res.Body)
	}
	m := res.JSON(t)
	if got := m["error"]; got != message {
		t.Errorf("error: got %v, want %q", got, message)
	}
	if _, has := m["success"]; has != withSuccess || (withSuccess && m["success"] != false) {
		t.Errorf("success field: got %v (present %v), want present=%v and false", m["success"], has, withSuccess)
	}
}
