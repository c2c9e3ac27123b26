package httpapi_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// visitor is a client of the link page: its own source address on the
// loopback network (the API reads the connection's address, as API Gateway
// reports it) and the page's origin.
type visitor struct {
	client *http.Client
	origin string // "" sends no Origin header
}

// visitorFrom connects from ip (any 127.0.0.x works on Linux loopback).
func visitorFrom(ip string) visitor {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return visitor{client: &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}}
}

func (v visitor) from(origin string) visitor {
	v.origin = origin
	return v
}

// start calls Start Session via Link as this visitor.
func (v visitor) start(t testing.TB, linkID string) response {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"link_id": linkID})
	req, err := http.NewRequest("POST", stack.Server.URL+"/v1/links/start-session", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if v.origin != "" {
		req.Header.Set("Origin", v.origin)
	}
	res, err := v.client.Do(req)
	if err != nil {
		t.Fatalf("start via link: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := response{Status: res.StatusCode, Header: res.Header, Body: body}
	checkAgainstSpec(t, "POST", "/v1/links/start-session", out)
	return out
}

// linkFor makes an agent and a link to it with extra fields.
func linkFor(t testing.TB, key string, fields map[string]any) map[string]any {
	t.Helper()
	agent := createAgent(t, key, map[string]any{"name": "Greeter", "avatar_id": "catalog/nasa/eileen-collins"})
	body := map[string]any{"agent_id": agent["agent_id"]}
	for k, v := range fields {
		body[k] = v
	}
	return createLink(t, key, body)
}

// policyOf is a link's extension fields, as JSON, for comparisons.
func policyOf(t testing.TB, l map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"max_concurrent_sessions": l["max_concurrent_sessions"], "max_starts_per_visitor_per_minute": l["max_starts_per_visitor_per_minute"],
		"allowed_origins": l["allowed_origins"], "max_session_minutes": l["max_session_minutes"],
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func endSession(t testing.TB, key, id string) map[string]any {
	t.Helper()
	res := call(t, "POST", "/v1/sessions/"+id+"/end", key, nil)
	if res.Status != http.StatusOK {
		t.Fatalf("end %s: %d %s", id, res.Status, res.Body)
	}
	return res.JSON(t)
}

func assertRateLimited(t testing.TB, res response, limit string) {
	t.Helper()
	if res.Status != http.StatusTooManyRequests || string(res.Body) != "Too many requests, please slow down." {
		t.Errorf("got %d %q, want the plain-text 429", res.Status, res.Body)
	}
	if res.Header.Get("Retry-After") == "" || res.Header.Get("RateLimit-Limit") != limit {
		t.Errorf("429 headers: got Retry-After %q RateLimit-Limit %q, want a Retry-After and limit %s",
			res.Header.Get("Retry-After"), res.Header.Get("RateLimit-Limit"), limit)
	}
}

// TestLinkPolicyFields: the extensions' defaults, normalization, update
// null rules and refusals.
func TestLinkPolicyFields(t *testing.T) {
	skipShort(t)
	acct := newAccount(t, "pro")
	const defaults = `{"allowed_origins":null,"max_concurrent_sessions":null,"max_session_minutes":null,"max_starts_per_visitor_per_minute":3}`

	t.Run("defaults", func(t *testing.T) {
		if got := policyOf(t, linkFor(t, acct.LiveKey, nil)); got != defaults {
			t.Errorf("new link: got %s, want %s", got, defaults)
		}
	})
	l := linkFor(t, acct.LiveKey, map[string]any{
		"max_concurrent_sessions": 2, "max_starts_per_visitor_per_minute": 10, "max_session_minutes": 15,
		// Browsers send origins lowercased, without a default port or a slash.
		"allowed_origins": []string{"HTTPS://Shop.Example.com:443/", "https://shop.example.com", "http://127.0.0.1:8090", "http://[::1]:80"},
	})
	id := l["link_id"].(string)
	t.Run("created", func(t *testing.T) {
		want := `{"allowed_origins":["https://shop.example.com","http://127.0.0.1:8090","http://[::1]"],"max_concurrent_sessions":2,"max_session_minutes":15,"max_starts_per_visitor_per_minute":10}`
		if got := policyOf(t, l); got != want {
			t.Errorf("created: got %s, want %s", got, want)
		}
	})
	updates := []struct {
		name string
		body map[string]any
		want string
	}{
		{"absent fields stay", map[string]any{"name": "renamed"},
			`{"allowed_origins":["https://shop.example.com","http://127.0.0.1:8090","http://[::1]"],"max_concurrent_sessions":2,"max_session_minutes":15,"max_starts_per_visitor_per_minute":10}`},
		{"one field changes", map[string]any{"max_session_minutes": 20, "allowed_origins": []string{"https://a.example"}},
			`{"allowed_origins":["https://a.example"],"max_concurrent_sessions":2,"max_session_minutes":20,"max_starts_per_visitor_per_minute":10}`},
		{"null restores each default", map[string]any{"max_concurrent_sessions": nil, "max_starts_per_visitor_per_minute": nil, "allowed_origins": nil, "max_session_minutes": nil},
			defaults},
	}
	for _, tt := range updates {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, "PUT", "/v1/links/"+id, acct.LiveKey, tt.body)
			if res.Status != 200 {
				t.Fatalf("PUT %v: %d %s", tt.body, res.Status, res.Body)
			}
			if got := policyOf(t, res.JSON(t)["link"].(map[string]any)); got != tt.want {
				t.Errorf("PUT %v: got %s, want %s", tt.body, got, tt.want)
			}
			// The list shows what the update answered.
			for _, v := range call(t, "GET", "/v1/links", acct.LiveKey, nil).JSON(t)["links"].([]any) {
				if dig(v, "link_id") == id {
					if got := policyOf(t, v.(map[string]any)); got != tt.want {
						t.Errorf("listed: got %s, want %s", got, tt.want)
					}
				}
			}
		})
	}

	manyOrigins := make([]string, 21)
	for i := range manyOrigins {
		manyOrigins[i] = "https://site" + itoa(i) + ".example"
	}
	bad := []struct {
		name  string
		field string
		value any
		want  string
	}{
		{"concurrency 0", "max_concurrent_sessions", 0, "max_concurrent_sessions must be an integer from 1 to 1000, or null"},
		{"concurrency too high", "max_concurrent_sessions", 1001, "max_concurrent_sessions must be an integer from 1 to 1000, or null"},
		{"concurrency fraction", "max_concurrent_sessions", 1.5, "max_concurrent_sessions must be an integer from 1 to 1000, or null"},
		{"visitor starts 0", "max_starts_per_visitor_per_minute", 0, "max_starts_per_visitor_per_minute must be an integer from 1 to 150, or null"},
		{"visitor starts above the link's bucket", "max_starts_per_visitor_per_minute", 151, "max_starts_per_visitor_per_minute must be an integer from 1 to 150, or null"},
		{"minutes 0", "max_session_minutes", 0, "max_session_minutes must be an integer from 1 to 1440, or null"},
		{"minutes above a day", "max_session_minutes", 1441, "max_session_minutes must be an integer from 1 to 1440, or null"},
		{"no origins", "allowed_origins", []string{}, "allowed_origins must list 1 to 20 origins, or be null"},
		{"too many origins", "allowed_origins", manyOrigins, "allowed_origins must list 1 to 20 origins, or be null"},
		{"not an array", "allowed_origins", "https://a.example", "allowed_origins must be an array of origins, or null"},
		{"not strings", "allowed_origins", []any{1}, "allowed_origins must be an array of origins, or null"},
		{"another scheme", "allowed_origins", []string{"ftp://a.example"}, `allowed_origins: "ftp://a.example" is not an origin`},
		{"a path", "allowed_origins", []string{"https://a.example/page"}, `allowed_origins: "https://a.example/page" is not an origin`},
		{"a query", "allowed_origins", []string{"https://a.example?x=1"}, `allowed_origins: "https://a.example?x=1" is not an origin`},
		{"user info", "allowed_origins", []string{"https://me@a.example"}, `allowed_origins: "https://me@a.example" is not an origin`},
		{"no host", "allowed_origins", []string{"https://"}, `allowed_origins: "https://" is not an origin`},
		{"the null origin", "allowed_origins", []string{"null"}, `allowed_origins: "null" is not an origin`},
	}
	agent := createAgent(t, acct.LiveKey, map[string]any{"name": "Greeter", "avatar_id": "catalog/nasa/eileen-collins"})
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			assertStructuredError(t, call(t, "POST", "/v1/links", acct.LiveKey, map[string]any{"agent_id": agent["agent_id"], tt.field: tt.value}), 400, tt.want)
			assertStructuredError(t, call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{tt.field: tt.value}), 400, tt.want)
		})
	}
	t.Run("refused updates change nothing", func(t *testing.T) {
		got := call(t, "GET", "/v1/links", acct.LiveKey, nil).JSON(t)["links"].([]any)
		for _, v := range got {
			if dig(v, "link_id") == id && policyOf(t, v.(map[string]any)) != defaults {
				t.Errorf("after refusals: got %s, want %s", policyOf(t, v.(map[string]any)), defaults)
			}
		}
	})
}

// TestLinkStartsFromOneAddress is the case: a script at one address
// fires starts at a public link for a minute. Only a few start sessions
// (max_starts_per_visitor_per_minute, default 3); the owner can still start
// a session with their API key, another visitor can still use the link (the
// script did not use up the link's 150-a-minute bucket), and the sessions
// nobody joined bill nothing.
func TestLinkStartsFromOneAddress(t *testing.T) {
	skipShort(t)
	stack.Clock.Advance(time.Minute) // fresh rate-limit windows
	defer stack.Clock.Advance(time.Minute)
	acct := newAccount(t, "explorer") // 5 concurrent sessions
	id := linkFor(t, acct.LiveKey, nil)["link_id"].(string)

	// 150 starts: all that one address's session-start quota allows in a
	// minute, and as many as the link's own bucket.
	script := visitorFrom("127.0.0.1")
	results := make([]response, 150)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				results[i] = script.start(t, id)
			}
		}()
	}
	for i := range results {
		work <- i
	}
	close(work)
	wg.Wait()
	var started []string
	counts := map[int]int{}
	for _, res := range results {
		counts[res.Status]++
		switch res.Status {
		case http.StatusOK:
			started = append(started, res.JSON(t)["session_id"].(string))
		case http.StatusTooManyRequests:
			assertRateLimited(t, res, "3")
		}
	}
	t.Logf("statuses: %v", counts)
	if counts[200] != 3 || counts[429] != 147 {
		t.Errorf("statuses: got %v, want 3 started and 147 refused with 429", counts)
	}

	t.Run("the owner can still start a session with their API key", func(t *testing.T) {
		sid, _ := createSession(t, acct.LiveKey)
		if res := call(t, "PUT", "/v1/sessions/"+sid+"/start", acct.LiveKey, nil); res.Status != 200 {
			t.Errorf("owner's start: got %d %s, want 200", res.Status, res.Body)
		}
	})
	t.Run("another visitor can still start one", func(t *testing.T) {
		res := visitorFrom("127.0.0.2").start(t, id)
		if res.Status != 200 {
			t.Fatalf("another address: got %d %s, want 200", res.Status, res.Body)
		}
		started = append(started, res.JSON(t)["session_id"].(string))
	})
	t.Run("sessions nobody joined bill nothing", func(t *testing.T) {
		stack.Clock.Advance(2 * time.Minute)
		for _, sid := range started {
			s := endSession(t, acct.LiveKey, sid)["session"]
			if got := dig(s, "billing", "minutes_billed"); got != 0.0 {
				t.Errorf("session %s: minutes_billed got %v, want 0", sid, got)
			}
		}
	})
	t.Run("the script gets more in the next minute", func(t *testing.T) {
		if res := script.start(t, id); res.Status != 200 {
			t.Fatalf("next minute: got %d %s, want 200", res.Status, res.Body)
		}
	})
}

// TestLinkMaxConcurrentSessions: a link runs at most max_concurrent_sessions
// sessions at once, however many starts race; an end frees a place.
func TestLinkMaxConcurrentSessions(t *testing.T) {
	skipShort(t)
	stack.Clock.Advance(time.Minute)
	defer stack.Clock.Advance(time.Minute)
	acct := newAccount(t, "pro") // 20 concurrent: the link's limit is the lower one
	l := linkFor(t, acct.LiveKey, map[string]any{"max_concurrent_sessions": 1})
	id := l["link_id"].(string)
	one := visitorFrom("127.0.0.3")

	res := one.start(t, id)
	if res.Status != 200 {
		t.Fatalf("first start: %d %s", res.Status, res.Body)
	}
	first := res.JSON(t)["session_id"].(string)
	t.Run("full", func(t *testing.T) {
		assertStructuredError(t, visitorFrom("127.0.0.4").start(t, id), 403, "This link has reached its concurrent session limit")
	})
	t.Run("an end frees the place", func(t *testing.T) {
		endSession(t, acct.LiveKey, first)
		res := one.start(t, id)
		if res.Status != 200 {
			t.Fatalf("start after the end: got %d %s, want 200", res.Status, res.Body)
		}
		endSession(t, acct.LiveKey, res.JSON(t)["session_id"].(string))
	})
	t.Run("racing starts", func(t *testing.T) {
		call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{"max_concurrent_sessions": 2, "max_starts_per_visitor_per_minute": 150})
		statuses := make([]response, 20)
		var wg sync.WaitGroup
		for i := range statuses {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = one.start(t, id)
			}()
		}
		wg.Wait()
		counts := map[int]int{}
		for _, res := range statuses {
			counts[res.Status]++
			if res.Status == 403 {
				assertStructuredError(t, res, 403, "This link has reached its concurrent session limit")
			}
		}
		t.Logf("statuses: %v", counts)
		if counts[200] != 2 {
			t.Errorf("started: got %d, want 2 (statuses %v)", counts[200], counts)
		}
		if got := len(call(t, "GET", "/v1/sessions?status=started", acct.LiveKey, nil).JSON(t)["sessions"].([]any)); got != 2 {
			t.Errorf("running sessions: got %d, want 2", got)
		}
	})
	t.Run("null lifts the limit", func(t *testing.T) {
		call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{"max_concurrent_sessions": nil})
		if res := one.start(t, id); res.Status != 200 {
			t.Errorf("without a limit: got %d %s, want 200", res.Status, res.Body)
		}
	})
	t.Run("a link deleted while its session runs", func(t *testing.T) {
		l := linkFor(t, acct.LiveKey, map[string]any{"max_concurrent_sessions": 1})
		lid := l["link_id"].(string)
		res := one.start(t, lid)
		if res.Status != 200 {
			t.Fatalf("start: %d %s", res.Status, res.Body)
		}
		if res := call(t, "DELETE", "/v1/links/"+lid, acct.LiveKey, nil); res.Status != 200 {
			t.Fatalf("delete: %d %s", res.Status, res.Body)
		}
		// The end still frees the owner's slot, and the link stays gone.
		if got := dig(endSession(t, acct.LiveKey, res.JSON(t)["session_id"].(string)), "session", "status"); got != "ended" {
			t.Errorf("end: got status %v, want ended", got)
		}
		assertStructuredError(t, one.start(t, lid), 404, "Link not found")
		assertStructuredError(t, call(t, "PUT", "/v1/links/"+lid, acct.LiveKey, map[string]any{"name": "x"}), 404, "Link not found")
		for _, v := range call(t, "GET", "/v1/links", acct.LiveKey, nil).JSON(t)["links"].([]any) {
			if dig(v, "link_id") == lid {
				t.Errorf("the deleted link is listed: %v", v)
			}
		}
	})
}

// TestLinkAllowedOrigins: a link with allowed_origins starts only from those
// pages, and says so to others (whose page can read the refusal).
func TestLinkAllowedOrigins(t *testing.T) {
	skipShort(t)
	stack.Clock.Advance(time.Minute)
	defer stack.Clock.Advance(time.Minute)
	acct := newAccount(t, "pro")
	l := linkFor(t, acct.LiveKey, map[string]any{"allowed_origins": []string{"https://shop.example.com", "http://127.0.0.1:8090"},
		"max_starts_per_visitor_per_minute": 150})
	id := l["link_id"].(string)
	page := visitorFrom("127.0.0.5")

	tests := []struct {
		name, origin string
		ok           bool
	}{
		{"an allowed page", "https://shop.example.com", true},
		{"the link page, listed", "http://127.0.0.1:8090", true},
		{"the same origin as browsers may write it", "HTTPS://SHOP.example.com:443", true},
		{"another site", "https://evil.example.com", false},
		{"another port", "https://shop.example.com:8443", false},
		{"another scheme", "http://shop.example.com", false},
		{"a subdomain", "https://www.shop.example.com", false},
		{"a sandboxed page", "null", false},
		{"no Origin (not a browser page)", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := page.from(tt.origin).start(t, id)
			if tt.ok {
				if res.Status != 200 {
					t.Errorf("got %d %s, want 200", res.Status, res.Body)
				}
				return
			}
			assertStructuredError(t, res, 403, "This link cannot be started from this page")
			if got := res.Header.Get("Access-Control-Allow-Origin"); got != "*" {
				t.Errorf("Access-Control-Allow-Origin: got %q, want * (the page must read the refusal)", got)
			}
		})
	}
	t.Run("refusals do not count against the visitor", func(t *testing.T) {
		call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{"max_starts_per_visitor_per_minute": 1})
		stack.Clock.Advance(time.Minute)
		for range 5 {
			assertStructuredError(t, page.from("https://evil.example.com").start(t, id), 403, "This link cannot be started from this page")
		}
		if res := page.from("https://shop.example.com").start(t, id); res.Status != 200 {
			t.Errorf("after refusals: got %d %s, want 200", res.Status, res.Body)
		}
		assertRateLimited(t, page.from("https://shop.example.com").start(t, id), "1")
	})
	t.Run("the preflight allows any page", func(t *testing.T) {
		req, _ := http.NewRequest("OPTIONS", stack.Server.URL+"/v1/links/start-session", nil)
		req.Header.Set("Origin", "https://evil.example.com")
		req.Header.Set("Access-Control-Request-Method", "POST")
		res, err := page.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 204 || res.Header.Get("Access-Control-Allow-Origin") != "*" {
			t.Errorf("preflight: got %d with Allow-Origin %q, want 204 and *", res.StatusCode, res.Header.Get("Access-Control-Allow-Origin"))
		}
	})
	t.Run("null allows any page again", func(t *testing.T) {
		call(t, "PUT", "/v1/links/"+id, acct.LiveKey, map[string]any{"allowed_origins": nil, "max_starts_per_visitor_per_minute": nil})
		stack.Clock.Advance(time.Minute)
		if res := page.start(t, id); res.Status != 200 {
			t.Errorf("no Origin, no list: got %d %s, want 200", res.Status, res.Body)
		}
	})
}

// TestLinkMaxSessionMinutes: max_session_minutes shortens a link session's
// expiration below the plan's, and never lengthens it.
func TestLinkMaxSessionMinutes(t *testing.T) {
	skipShort(t)
	stack.Clock.Advance(time.Minute)
	defer stack.Clock.Advance(time.Minute)
	tests := []struct {
		name  string
		plan  string
		limit any
		want  time.Duration
	}{
		{"below the plan's", "pro", 2, 2 * time.Minute},
		{"the plan's when unset", "pro", nil, 180 * time.Minute},
		{"the plan's when lower", "explorer", 120, 30 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			acct := newAccount(t, tt.plan)
			l := linkFor(t, acct.LiveKey, map[string]any{"max_session_minutes": tt.limit})
			res := visitorFrom("127.0.0.6").start(t, l["link_id"].(string))
			if res.Status != 200 {
				t.Fatalf("start: %d %s", res.Status, res.Body)
			}
			s := call(t, "GET", "/v1/sessions/"+res.JSON(t)["session_id"].(string), acct.LiveKey, nil).JSON(t)["session"]
			started, err1 := time.Parse(time.RFC3339, dig(s, "started_at").(string))
			exp, err2 := time.Parse(time.RFC3339, dig(s, "expiration").(string))
			if err1 != nil || err2 != nil {
				t.Fatalf("session times: %v %v (%v)", err1, err2, s)
			}
			if got := exp.Sub(started).Round(time.Second); got != tt.want {
				t.Errorf("expiration: got %v after the start, want %v", got, tt.want)
			}
		})
	}
}
