package lambdafn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"avatarsvc/scripts/localstack"
	"avatarsvc/scripts/stacktest"
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/httpapi"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/lambdafn"
)

var stack *stacktest.Stack

func TestMain(m *testing.M) { stacktest.Main(m, stacktest.StartFor(&stack)) }

func repoRoot(t testing.TB) string {
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// replay sends events/<route>.json, placeholders filled, through the
// function's real Lambda entry point.
func replay(t *testing.T, route string, vars map[string]string) (int, map[string]any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "events", route+".json"))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range vars {
		raw = bytes.ReplaceAll(raw, []byte("{{"+k+"}}"), []byte(v))
	}
	var ev lambdafn.EventV2
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatalf("event %s: %v", route, err)
	}
	var opts []lambdafn.Option
	if route == "avatars-upload" { // as functions/avatars-upload links it
		opts = append(opts, lambdafn.WithModerator(func(ffmpeg string) avatars.Moderator { return avatarimage.Moderation{FFmpeg: ffmpeg} }))
	}
	h, err := lambdafn.Handler(context.Background(), route, func(k string) string { return stack.Env[k] }, opts...)
	if err != nil {
		t.Fatal(err)
	}
	res, err := h(context.Background(), ev)
	if err != nil {
		t.Fatalf("%s: %v", route, err)
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(res.Body), &body); err != nil {
		t.Fatalf("%s: body %q: %v", route, res.Body, err)
	}
	if res.Headers["Ratelimit-Limit"] == "" {
		t.Errorf("%s: no RateLimit-Limit header in %v", route, res.Headers)
	}
	return res.StatusCode, body
}

// TestEventsReplay drives every function through its sample event.
func TestEventsReplay(t *testing.T) {
	stacktest.SkipShort(t)
	acct, err := stack.NewAccount(context.Background(), "pro")
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"API_KEY": acct.LiveKey, "ROOM_TOKEN": "token"}
	newSession := func() string {
		status, body := replay(t, "sessions-create", vars)
		if status != 201 {
			t.Fatalf("sessions-create: %d %v", status, body)
		}
		return body["session"].(map[string]any)["session_id"].(string)
	}
	vars["SESSION_ID"] = newSession()
	for _, step := range []struct {
		route  string
		status int
	}{
		{"sessions-get", 200},
		{"sessions-list", 200},
		{"sessions-start", 200},
		{"sessions-start-once", 400}, // already started by the step before
		{"sessions-end", 200},
		{"usage-get", 200},
		{"sessions-delete", 400}, // ended sessions are kept
	} {
		t.Run(step.route, func(t *testing.T) {
			if status, body := replay(t, step.route, vars); status != step.status {
				t.Errorf("status: got %d, want %d (%v)", status, step.status, body)
			}
		})
	}
	t.Run("sessions-delete of a created session", func(t *testing.T) {
		v := map[string]string{"API_KEY": acct.LiveKey, "SESSION_ID": newSession()}
		if status, body := replay(t, "sessions-delete", v); status != 200 {
			t.Errorf("status: got %d, want 200 (%v)", status, body)
		}
	})
	t.Run("a function serves only its own route", func(t *testing.T) {
		raw, _ := os.ReadFile(filepath.Join(repoRoot(t), "events", "usage-get.json"))
		var ev lambdafn.EventV2
		_ = json.Unmarshal(bytes.ReplaceAll(raw, []byte("{{API_KEY}}"), []byte(acct.LiveKey)), &ev)
		h, err := lambdafn.Handler(context.Background(), "sessions-list", func(k string) string { return stack.Env[k] })
		if err != nil {
			t.Fatal(err)
		}
		if res, _ := h(context.Background(), ev); res.StatusCode != 404 {
			t.Errorf("usage event on the sessions-list function: got %d, want 404", res.StatusCode)
		}
	})
}

// TestEventsReplayLibrary drives the avatar, agent, link, room and webhook functions
// through their sample events, each answer feeding the next one's ids.
func TestEventsReplayLibrary(t *testing.T) {
	stacktest.SkipShort(t)
	acct, err := stack.NewAccount(context.Background(), "pro")
	if err != nil {
		t.Fatal(err)
	}
	// events/agents-create.json names an ElevenLabs agent: the operator
	// enables it for the account first (scripts/admin voice-agent-allow).
	if _, err := stack.App.Accounts.AllowVoiceAgent(context.Background(), acct.User.ID, "elevenlabs", "agent_123"); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"API_KEY": acct.LiveKey, "DELIVERY_ID": "whdl_none"}
	num := func(v any) string { return strconv.Itoa(int(v.(float64))) }
	steps := []struct {
		route  string
		status int
		keep   func(body map[string]any)
	}{
		{"avatars-upload", 201, func(b map[string]any) {
			vars["AVATAR_ID"], vars["AVATAR_NUMBER"] = b["avatar_id"].(string), num(b["id"])
		}},
		{"avatars-list", 200, nil},
		{"avatars-update", 200, nil},
		{"avatars-preview", 200, nil},
		{"agents-create", 201, func(b map[string]any) {
			a := b["agent"].(map[string]any)
			vars["AGENT_ID"], vars["AGENT_NUMBER"] = a["agent_id"].(string), num(a["id"])
		}},
		{"agents-list", 200, nil},
		{"agents-get", 200, nil},
		{"agents-update", 200, nil},
		{"agents-duplicate", 201, nil},
		{"links-create", 201, func(b map[string]any) { vars["LINK_ID"] = b["link"].(map[string]any)["link_id"].(string) }},
		{"links-list", 200, nil},
		{"links-update", 200, nil},
		{"links-start-session", 200, nil},
		{"rooms-initiate", 201, nil},
		{"livekit-webhook", 401, nil}, // the sample is not signed by this stack's LiveKit
		{"links-delete", 200, nil},
		// Lifecycle webhooks: events/webhooks-create.json registers an
		// http://127.0.0.1 endpoint, which the local stack allows.
		{"webhooks-create", 201, func(b map[string]any) {
			vars["WEBHOOK_ID"] = b["webhook"].(map[string]any)["webhook_id"].(string)
		}},
		{"webhooks-list", 200, nil},
		{"webhooks-get", 200, nil},
		{"webhooks-update", 200, nil},
		{"webhooks-deliveries", 200, nil},
		{"webhooks-retry", 404, nil}, // DELIVERY_ID names no delivery
		{"webhooks-delete", 200, nil},
		{"agents-delete", 200, nil},
		{"avatars-delete", 200, nil},
	}
	for _, step := range steps {
		t.Run(step.route, func(t *testing.T) {
			status, body := replay(t, step.route, vars)
			if status != step.status {
				t.Fatalf("status: got %d, want %d (%v)", status, step.status, body)
			}
			if step.keep != nil {
				step.keep(body)
			}
		})
	}
}

// TestTemplateMatchesRoutes checks template.yaml's functions and their HTTP
// API events against the route table, both ways, and that each function's
// directory exists.
func TestTemplateMatchesRoutes(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tmpl struct {
		Resources map[string]struct {
			Type       string `yaml:"Type"`
			Properties struct {
				Events map[string]struct {
					Type       string `yaml:"Type"`
					Properties struct {
						Method string `yaml:"Method"`
						Path   string `yaml:"Path"`
					} `yaml:"Properties"`
				} `yaml:"Events"`
			} `yaml:"Properties"`
		} `yaml:"Resources"`
	}
	if err := yaml.Unmarshal(raw, &tmpl); err != nil {
		t.Fatal(err)
	}
	var inTemplate, inRoutes []string
	for id, r := range tmpl.Resources {
		if r.Type != "AWS::Serverless::Function" {
			continue
		}
		for _, ev := range r.Properties.Events {
			if ev.Type == "HttpApi" {
				inTemplate = append(inTemplate, fmt.Sprintf("%s %s %s", id, ev.Properties.Method, ev.Properties.Path))
			}
		}
	}
	for _, rt := range httpapi.Routes(httpapi.Deps{}) {
		id := ""
		for _, part := range strings.Split(rt.Name, "-") {
			id += strings.ToUpper(part[:1]) + part[1:]
		}
		for _, p := range httpapi.Prefixes {
			// ServeMux's trailing {x...} is API Gateway's greedy {x+}.
			path := strings.ReplaceAll(rt.Path, "...}", "+}")
			inRoutes = append(inRoutes, fmt.Sprintf("%sFunction %s %s%s", id, rt.Method, p, path))
		}
		if _, err := os.Stat(filepath.Join(repoRoot(t), "functions", rt.Name, "main.go")); err != nil {
			t.Errorf("route %s has no functions/%s/main.go", rt.Name, rt.Name)
		}
	}
	sort.Strings(inTemplate)
	sort.Strings(inRoutes)
	if strings.Join(inTemplate, "\n") != strings.Join(inRoutes, "\n") {
		t.Errorf("template.yaml and routes.go differ:\ntemplate:\n%s\n\nroutes:\n%s", strings.Join(inTemplate, "\n"), strings.Join(inRoutes, "\n"))
	}
}

// TestJobSample checks events/session-start-job.json against the job
// contract: every field known, and everything a renderer needs present.
func TestJobSample(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repoRoot(t), "events", "session-start-job.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev struct {
		Records []struct {
			Body string `json:"body"`
		} `json:"Records"`
	}
	if err := json.Unmarshal(raw, &ev); err != nil || len(ev.Records) != 1 {
		t.Fatalf("sample SQS event: %v (%d records)", err, len(ev.Records))
	}
	dec := json.NewDecoder(strings.NewReader(ev.Records[0].Body))
	dec.DisallowUnknownFields()
	var j jobs.StartJob
	if err := dec.Decode(&j); err != nil {
		t.Fatalf("job body: %v", err)
	}
	if _, err := jobs.Parse(ev.Records[0].Body); err != nil {
		t.Errorf("sample job: %v", err)
	}
	// Ids only: a room token or avatar location in the message would leak
	// into SQS and the DLQ.
	for _, secret := range []string{"token", "room", "avatar"} {
		if strings.Contains(ev.Records[0].Body, `"`+secret) {
			t.Errorf("sample job carries %q: %s", secret, ev.Records[0].Body)
		}
	}
}
