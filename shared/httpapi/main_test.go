package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"avatarsvc/scripts/stacktest"
)

// stack is one API over real DynamoDB Local, SQS and S3 for the package.
var stack *stacktest.Stack

func TestMain(m *testing.M) { stacktest.Main(m, stacktest.StartFor(&stack)) }

// response is what a test looks at.
type response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body as an object.
func (r response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("body is not a JSON object: %v: %s", err, r.Body)
	}
	return m
}

func call(t testing.TB, method, path, key string, body any) response {
	t.Helper()
	stacktest.SkipShort(t)
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, stack.Server.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("x-api-key", key)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := response{Status: res.StatusCode, Header: res.Header, Body: b}
	checkAgainstSpec(t, method, path, out)
	return out
}

func newAccount(t testing.TB, plan string) stacktest.Account {
	t.Helper()
	stacktest.SkipShort(t)
	a, err := stack.NewAccount(context.Background(), plan)
	if err != nil {
		t.Fatalf("create account: %v", err)
	}
	return a
}

// dig walks a decoded JSON value by keys.
func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

// validSession is a Create Session body that passes validation.
func validSession() map[string]any {
	return map[string]any{
		"avatar":       "https://images.example.com/avatar.png",
		"aspect_ratio": "4:3",
		"room":         map[string]any{"platform": "livekit", "url": "wss://rooms.example.com", "token": "join-token"},
		"metadata":     map[string]any{"customer": "acme", "n": 1},
	}
}

func createSession(t testing.TB, key string) (id, token string) {
	t.Helper()
	res := call(t, "POST", "/v1/sessions", key, validSession())
	if res.Status != http.StatusCreated {
		t.Fatalf("create session: status %d: %s", res.Status, res.Body)
	}
	m := res.JSON(t)
	return dig(m, "session", "session_id").(string), dig(m, "session", "session_token").(string)
}

// serve makes a started session count as served by a renderer (see
// stacktest.Stack.Serve): only served sessions bill.
func serve(t testing.TB, id string) {
	t.Helper()
	if err := stack.Serve(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

// skipShort skips a test that needs the local stack under -short.
func skipShort(t testing.TB) { t.Helper(); stacktest.SkipShort(t) }
