package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"avatarsvc/scripts/stacktest"
	"avatarsvc/shared/httpapi"
)

var (
	fuzzOnce sync.Once
	fuzzAcct stacktest.Account
)

var pathParam = regexp.MustCompile(`\{[a-z_]+(\.\.\.)?\}`)

// FuzzRoutes sends every route arbitrary path parameters and bodies on the
// real stack: no input may produce a 500, and every answer must be one of
// the API's documented shapes. `make test` runs it for a bounded time
// (and as a normal test, its seeds).
func FuzzRoutes(f *testing.F) {
	skipShort(f)
	routes := httpapi.Routes(httpapi.Deps{})
	seeds := []string{
		``, `{}`, `null`, `[]`, `{"avatar":"https://x.example/a.png","room":{"platform":"livekit","url":"wss://x.example","token":"t"}}`,
		`{"metadata":{"a":{"b":{"c":1e400}}}}`, `{"name":"x","avatar_id":"catalog/nasa/eileen-collins"}`,
		`{"link_id":"lnk_x","aspect_ratio":"9:9"}`, `{"use_limit":1.5,"expires_at":"yesterday"}`,
		`{"voice_agent":{"provider":"X","agent_id":"","auth_method":"key"}}`, `{"avatar_id":12345678901234567890}`,
		`{"properties":` + strings.Repeat(`[`, 40) + strings.Repeat(`]`, 40) + `}`,
		`{"max_concurrent_sessions":0,"max_starts_per_visitor_per_minute":1e300,"max_session_minutes":-1.5,"allowed_origins":["ftp://x"]}`,
		`{"allowed_origins":[null,"HTTPS://A.example:443/"],"max_concurrent_sessions":null}`, `{"allowed_origins":"x"}`,
	}
	params := []string{"sess_01ABC", "avat_01ABC", "1", "0", "-1", "99999999999999999999", "lnk_x", strings.Repeat("Z", 3000),
		"%00", "..", "catalog/x/y", "\xff\xfe", " "}
	for i := range routes {
		for j, s := range seeds {
			f.Add(uint8(i), params[(i+j)%len(params)], []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, routeIndex uint8, param string, body []byte) {
		fuzzOnce.Do(func() { fuzzAcct = newAccount(t, "pro") })
		// A fresh rate-limit window each time, so the fuzzer explores the
		// handlers rather than the limiter.
		stack.Clock.Advance(time.Minute)
		rt := routes[int(routeIndex)%len(routes)]
		path := pathParam.ReplaceAllStringFunc(rt.Path, func(string) string { return url.PathEscape(param) })
		for _, prefix := range httpapi.Prefixes {
			req, err := http.NewRequestWithContext(context.Background(), rt.Method, stack.Server.URL+prefix+path, bytes.NewReader(body))
			if err != nil {
				return // not a request a client could send
			}
			req.Header.Set("Content-Type", "application/json")
			if rt.Name == "avatars-upload" {
				req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
			}
			req.Header.Set("x-api-key", fuzzAcct.LiveKey)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatalf("%s %s: %v", rt.Method, prefix+path, err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode >= 500 && res.StatusCode != http.StatusServiceUnavailable {
				t.Fatalf("%s %s with %q: %d %s", rt.Method, prefix+path, body, res.StatusCode, b)
			}
			if res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusNoContent {
				continue
			}
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatalf("%s %s: %d answer is not a JSON object: %s", rt.Method, prefix+path, res.StatusCode, b)
			}
			if res.StatusCode >= 400 && v["error"] == nil {
				t.Fatalf("%s %s: %d answer has no error: %s", rt.Method, prefix+path, res.StatusCode, b)
			}
		}
	})
}
