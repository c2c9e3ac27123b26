package apiclient_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"avatarsvc/scripts/apiclient"
	"avatarsvc/scripts/localstack"
	"avatarsvc/scripts/stacktest"
)

// stack is one API over DynamoDB Local, SQS, S3 and livekit-server.
var stack *stacktest.Stack

func TestMain(m *testing.M) { stacktest.Main(m, stacktest.StartFor(&stack)) }

// TestClientIsWhatTheGeneratorMakes: the committed client is what the
// pinned oapi-codegen makes from today's openapi.yaml, so a change to the
// reference that a generator cannot take fails here.
func TestClientIsWhatTheGeneratorMakes(t *testing.T) {
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	gen := filepath.Join(root, ".local", "bin", "oapi-codegen")
	if _, err := os.Stat(gen); err != nil {
		if testing.Short() {
			t.Skipf("oapi-codegen is not installed (make setup installs it): %v", err)
		}
		t.Fatalf("oapi-codegen is not installed at %s (make setup installs it): %v", gen, err)
	}
	dir := filepath.Join(root, "scripts", "apiclient")
	cfg, err := os.ReadFile(filepath.Join(dir, "oapi-codegen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "client.gen.go")
	tmpCfg := filepath.Join(t.TempDir(), "oapi-codegen.yaml")
	if err := os.WriteFile(tmpCfg, bytes.Replace(cfg, []byte("output: client.gen.go"), []byte("output: "+out), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(gen, "-config", tmpCfg, filepath.Join(root, "shared", "httpapi", "openapi.yaml"))
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("oapi-codegen: %v\n%s", err, msg)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join(dir, "client.gen.go"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("scripts/apiclient/client.gen.go is not what oapi-codegen makes from openapi.yaml: run go generate ./scripts/apiclient")
	}
}

// TestGeneratedClientDrivesASession: create -> start -> get -> end with the
// generated client against the real local API.
func TestGeneratedClientDrivesASession(t *testing.T) {
	stacktest.SkipShort(t)
	ctx := context.Background()
	acct, err := stack.NewAccount(ctx, "pro")
	if err != nil {
		t.Fatal(err)
	}
	for _, prefix := range []string{"/v1", "/api/v1"} {
		t.Run(prefix, func(t *testing.T) {
			c, err := apiclient.NewClientWithResponses(stack.Server.URL+prefix, apiclient.WithRequestEditorFn(
				func(_ context.Context, r *http.Request) error { r.Header.Set("x-api-key", acct.LiveKey); return nil }))
			if err != nil {
				t.Fatal(err)
			}
			var body apiclient.SessionsCreateJSONRequestBody
			body.Avatar = "https://images.example.com/avatar.png"
			body.Room.Platform, body.Room.Url = "livekit", "wss://rooms.example.com"
			token := "join-token"
			body.Room.Token = &token
			created, err := c.SessionsCreateWithResponse(ctx, body)
			if err != nil || created.JSON201 == nil {
				t.Fatalf("create: %v: %d %s", err, created.StatusCode(), created.Body)
			}
			id := created.JSON201.Session.SessionId

			started, err := c.SessionsStartWithResponse(ctx, id, nil)
			if err != nil || started.JSON200 == nil {
				t.Fatalf("start: %v: %d %s", err, started.StatusCode(), started.Body)
			}
			if started.JSON200.WsUri != "try_again" || fmt.Sprint(started.JSON200.Stage) != "queued" {
				t.Errorf("start: got ws_uri %q stage %v, want try_again and queued", started.JSON200.WsUri, started.JSON200.Stage)
			}
			if err := stack.Serve(ctx, id); err != nil { // a renderer joins
				t.Fatal(err)
			}
			wait := 5
			again, err := c.SessionsStartWithResponse(ctx, id, &apiclient.SessionsStartParams{Wait: &wait})
			if err != nil || again.JSON200 == nil || !strings.HasPrefix(again.JSON200.WsUri, "ws://") {
				t.Fatalf("start again: got %v %s, want a ws_uri", err, again.Body)
			}

			got, err := c.SessionsGetWithResponse(ctx, id)
			if err != nil || got.JSON200 == nil || fmt.Sprint(got.JSON200.Session.Status) != "started" || got.JSON200.Session.StartedAt == nil {
				t.Fatalf("get: got %v %s, want a started session", err, got.Body)
			}

			ended, err := c.SessionsEndWithResponse(ctx, id)
			if err != nil || ended.JSON200 == nil {
				t.Fatalf("end: %v: %s", err, ended.Body)
			}
			s := ended.JSON200.Session
			if fmt.Sprint(s.Status) != "ended" || s.EndedAt == nil || s.Billing == nil {
				t.Errorf("end: got status %v ended_at %v billing %v, want ended with both", s.Status, s.EndedAt, s.Billing)
			}

			missing, err := c.SessionsGetWithResponse(ctx, "sess_doesnotexist")
			if err != nil || missing.StatusCode() != http.StatusNotFound || missing.JSONDefault == nil {
				t.Errorf("get of an unknown id: got %v %d %s, want 404 with the error body decoded", err, missing.StatusCode(), missing.Body)
			}
		})
	}
}
