package httpapi_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"avatarsvc/shared/httpapi"
)

func TestAuthentication(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	ctx := context.Background()
	deactivated := newAccount(t, "pro")
	if err := stack.App.Accounts.DeactivateKey(ctx, deactivated.LiveKey); err != nil {
		t.Fatal(err)
	}
	deleted := newAccount(t, "pro")
	if res := call(t, "GET", "/v1/usage", deleted.LiveKey, nil); res.Status != http.StatusOK {
		t.Fatalf("key before delete: %d", res.Status)
	}
	if err := stack.App.Accounts.DeleteKey(ctx, deleted.LiveKey); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, key, want string
	}{
		{"missing", "", "API key required"},
		{"malformed", "hello", "Invalid API key"},
		{"unknown live key", "ak_live_" + strings.Repeat("a", 32), "Invalid API key"},
		{"live prefix on a test key", "ak_live_" + strings.TrimPrefix(acct.TestKey, "ak_test_"), "Invalid API key"},
		{"deactivated", deactivated.LiveKey, "API key has been deactivated"},
		{"deleted fails at once", deleted.LiveKey, "Invalid API key"},
	} {
		for _, path := range []string{"/v1/usage", "/api/v1/usage", "/v1/sessions/sess_x/end"} {
			t.Run(tc.name+" "+path, func(t *testing.T) {
				method := "GET"
				if strings.HasSuffix(path, "/end") {
					method = "POST"
				}
				res := call(t, method, path, tc.key, nil)
				assertStringError(t, res, http.StatusUnauthorized, false, tc.want)
				if res.Header.Get("RateLimit-Limit") == "" {
					t.Error("401 without RateLimit-Limit header")
				}
			})
		}
	}
	t.Run("live and test keys both work", func(t *testing.T) {
		for _, k := range []string{acct.LiveKey, acct.TestKey} {
			if res := call(t, "GET", "/v1/usage", k, nil); res.Status != http.StatusOK {
				t.Errorf("%s...: status %d", k[:8], res.Status)
			}
		}
	})
}

// TestTenantIsolation: another tenant's session answers exactly like a
// missing one, on every id-bearing route.
func TestTenantIsolation(t *testing.T) {
	skipShort(t)
	owner := newAccount(t, "pro")
	other := newAccount(t, "pro")
	id, _ := createSession(t, owner.LiveKey)
	missing := "sess_01HZZZZZZZZZZZZZZZZZZZZZZZ"
	for _, rt := range []struct{ method, path string }{
		{"GET", "/v1/sessions/%s"},
		{"PUT", "/v1/sessions/%s/start"},
		{"POST", "/api/v1/sessions/%s/start"},
		{"POST", "/v1/sessions/%s/end"},
		{"DELETE", "/v1/sessions/%s"},
	} {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			foreign := call(t, rt.method, strings.Replace(rt.path, "%s", id, 1), other.LiveKey, nil)
			absent := call(t, rt.method, strings.Replace(rt.path, "%s", missing, 1), other.LiveKey, nil)
			if foreign.Status != http.StatusNotFound || foreign.Status != absent.Status || string(foreign.Body) != string(absent.Body) {
				t.Errorf("foreign: %d %s; missing: %d %s", foreign.Status, foreign.Body, absent.Status, absent.Body)
			}
		})
	}
	if s, err := stack.App.Sessions.Get(context.Background(), owner.User.ID, id); err != nil || s.Status != "created" {
		t.Errorf("owner's session changed: %+v %v", s, err)
	}
	list := call(t, "GET", "/v1/sessions", other.LiveKey, nil).JSON(t)["sessions"].([]any)
	if len(list) != 0 {
		t.Errorf("other tenant lists %d sessions, want 0", len(list))
	}
}

// TestRateLimits checks each quota's boundary, the headers, the plain-text
// 429, separate live/test quotas and the window reset, on a settable clock.
func TestRateLimits(t *testing.T) {
	skipShort(t)
	for _, tc := range []struct {
		class, method, path string
		limit               int
	}{
		{"read", "GET", "/v1/sessions/sess_missing", 300},
		{"write", "POST", "/v1/sessions/sess_missing/end", 60},
		{"session start", "PUT", "/v1/sessions/sess_missing/start", 150},
	} {
		t.Run(tc.class, func(t *testing.T) {
			acct := newAccount(t, "pro")
			// Start at a window's beginning so the whole run stays in one window.
			stack.Clock.Set(stack.Clock.Now().Truncate(time.Minute).Add(time.Minute))
			for i := 1; i <= tc.limit; i++ {
				res := call(t, tc.method, tc.path, acct.LiveKey, nil)
				if res.Status != http.StatusNotFound {
					t.Fatalf("request %d: status %d: %s", i, res.Status, res.Body)
				}
				if got := res.Header.Get("RateLimit-Remaining"); got != strconv.Itoa(tc.limit-i) {
					t.Fatalf("request %d: RateLimit-Remaining %s, want %d", i, got, tc.limit-i)
				}
				if got := res.Header.Get("RateLimit-Limit"); got != strconv.Itoa(tc.limit) {
					t.Fatalf("RateLimit-Limit: got %s, want %d", got, tc.limit)
				}
			}
			res := call(t, tc.method, tc.path, acct.LiveKey, nil)
			if res.Status != http.StatusTooManyRequests || string(res.Body) != "Too many requests, please slow down." {
				t.Fatalf("request %d: got %d %q, want 429 with the plain-text message", tc.limit+1, res.Status, res.Body)
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Errorf("429 Content-Type: got %q, want text/plain", ct)
			}
			if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 1 || ra > 60 {
				t.Errorf("Retry-After: got %q, want 1..60 seconds", res.Header.Get("Retry-After"))
			}
			if res.Header.Get("RateLimit-Reset") == "" || res.Header.Get("RateLimit-Remaining") != "0" {
				t.Errorf("429 headers: got %v", res.Header)
			}
			if other := call(t, tc.method, tc.path, acct.TestKey, nil); other.Status != http.StatusNotFound {
				t.Errorf("test key after the live key's limit: got %d, want its own quota", other.Status)
			}
			if tc.class == "session start" {
				if w := call(t, "POST", "/v1/sessions/sess_missing/end", acct.LiveKey, nil); w.Status != http.StatusNotFound {
					t.Errorf("write after exhausting starts: got %d, want the write quota untouched", w.Status)
				}
			}
			stack.Clock.Advance(time.Minute)
			if res := call(t, tc.method, tc.path, acct.LiveKey, nil); res.Status != http.StatusNotFound {
				t.Errorf("next window: got %d, want the quota renewed", res.Status)
			}
		})
	}
}

func TestRoutingAndShapes(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	t.Run("both address forms serve every route", func(t *testing.T) {
		for _, p := range []string{"/v1/sessions", "/api/v1/sessions", "/v1/usage", "/api/v1/usage"} {
			if res := call(t, "GET", p, acct.LiveKey, nil); res.Status != http.StatusOK {
				t.Errorf("GET %s: %d", p, res.Status)
			}
		}
	})
	t.Run("unknown path is a JSON 404", func(t *testing.T) {
		assertStructuredError(t, call(t, "GET", "/v1/nothing", acct.LiveKey, nil), http.StatusNotFound, "Not found")
	})
	t.Run("wrong method is a JSON 405", func(t *testing.T) {
		assertStructuredError(t, call(t, "PATCH", "/v1/sessions", acct.LiveKey, nil), http.StatusMethodNotAllowed, "Method not allowed")
	})
	t.Run("responses carry a request id", func(t *testing.T) {
		if res := call(t, "GET", "/v1/usage", acct.LiveKey, nil); !strings.HasPrefix(res.Header.Get("X-Request-Id"), "req_") {
			t.Errorf("X-Request-Id: got %q", res.Header.Get("X-Request-Id"))
		}
	})
	t.Run("POST start of a missing session uses the second form's shape", func(t *testing.T) {
		assertStringError(t, call(t, "POST", "/api/v1/sessions/sess_nope/start", acct.LiveKey, nil), http.StatusNotFound, true, "Session not found")
	})
	t.Run("end of a missing session suggests verifying the id", func(t *testing.T) {
		res := call(t, "POST", "/v1/sessions/sess_nope/end", acct.LiveKey, nil)
		assertStructuredError(t, res, http.StatusNotFound, "Session not found")
		if s, _ := dig(res.JSON(t), "error", "suggestion").(string); !strings.Contains(s, "Verify") {
			t.Errorf("suggestion: got %q", s)
		}
	})
}

// TestBothPrefixesAnswerAlike: every route answers the same status and
// error under /v1 and /api/v1, with the RateLimit headers, for a request
// without a key and for one about an id that does not exist.
func TestBothPrefixesAnswerAlike(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	stack.Clock.Advance(time.Minute)
	errorOf := func(res response) string {
		var m map[string]any
		if json.Unmarshal(res.Body, &m) != nil {
			return string(res.Body)
		}
		if s, ok := m["error"].(string); ok {
			return s
		}
		msg, _ := dig(m, "error", "message").(string)
		return msg
	}
	for _, rt := range httpapi.Routes(httpapi.Deps{}) {
		if rt.Method == "OPTIONS" {
			continue
		}
		path := pathParam.ReplaceAllString(rt.Path, "missing")
		for _, key := range []string{"", acct.LiveKey} {
			var got []response
			for _, p := range httpapi.Prefixes {
				res := call(t, rt.Method, p+path, key, "{}")
				if res.Header.Get("RateLimit-Limit") == "" {
					t.Errorf("%s %s: no RateLimit-Limit header", rt.Method, p+path)
				}
				got = append(got, res)
			}
			if got[0].Status != got[1].Status || errorOf(got[0]) != errorOf(got[1]) {
				t.Errorf("%s %s (key %v): /v1 answered %d %q, /api/v1 %d %q", rt.Method, path, key != "",
					got[0].Status, errorOf(got[0]), got[1].Status, errorOf(got[1]))
			}
			if key == "" && !rt.Public && (got[0].Status != 401 || errorOf(got[0]) != "API key required") {
				t.Errorf("%s %s without a key: got %d %q, want 401 API key required", rt.Method, path, got[0].Status, errorOf(got[0]))
			}
		}
	}
	for _, probe := range []struct{ method, path string }{{"GET", "/v1/nothing"}, {"PATCH", "/v1/agents"}} {
		if res := call(t, probe.method, probe.path, acct.LiveKey, nil); res.Header.Get("RateLimit-Limit") == "" {
			t.Errorf("%s %s (%d): no RateLimit-Limit header", probe.method, probe.path, res.Status)
		}
	}
}
