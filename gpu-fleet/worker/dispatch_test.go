package worker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/gpu-fleet/testfiles"
	"avatarsvc/scripts/localstack"
	"avatarsvc/scripts/stacktest"
	"avatarsvc/shared/domain"
)

// agentResult is one line scripts/agent/dispatched-agent.mjs appends per job.
type agentResult struct {
	Room        string
	Metadata    domain.AgentJob
	Sent        float64
	Position    float64
	Interrupted bool
	StartedMs   int64
	FinishedMs  int64
	Error       string
}

// startAgentWorker runs scripts/agent/dispatched-agent.mjs, a LiveKit
// Agents worker on the real Node framework registered under agentName with
// the stack's livekit-server, until the test ends. It returns the file the
// worker appends its job results to.
func startAgentWorker(t *testing.T, agentName string) (results string) {
	t.Helper()
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	results = filepath.Join(t.TempDir(), "results.jsonl")
	cmd := exec.Command("node", filepath.Join("agent", "dispatched-agent.mjs"), "dev", "--log-level", "info")
	cmd.Dir = filepath.Join(root, "scripts")
	cmd.Env = append(os.Environ(),
		"LIVEKIT_URL="+stack.LiveKit.URL, "LIVEKIT_API_KEY="+stack.LiveKit.APIKey, "LIVEKIT_API_SECRET="+stack.LiveKit.APISecret,
		"AGENT_NAME="+agentName, "AGENT_WAV="+testfiles.Path(testfiles.Speech16k), "AGENT_RESULTS="+results)
	// The framework's job processes can outlive a SIGTERM to the worker:
	// the whole process group is killed at the end.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var mu sync.Mutex
	cmd.Stderr = &lockedWriter{w: &logs, mu: &mu}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	registered := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			mu.Lock()
			logs.Write(sc.Bytes())
			logs.WriteByte('\n')
			mu.Unlock()
			if bytes.Contains(sc.Bytes(), []byte("registered worker")) {
				once.Do(func() { close(registered) })
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
		if t.Failed() {
			mu.Lock()
			t.Logf("agent worker output:\n%s", logs.String())
			mu.Unlock()
		}
	})
	select {
	case <-registered:
	case <-time.After(liveness):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the Node agent worker did not register with livekit-server within %v:\n%s", liveness, logs.String())
	}
	return results
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// awaitAgentResult waits for the agent worker's report on roomName.
func awaitAgentResult(t *testing.T, results, roomName, sessionID, key string) agentResult {
	t.Helper()
	// The service dispatches again every 10 s while no agent has joined.
	deadline := time.Now().Add(2 * liveness)
	for time.Now().Before(deadline) {
		raw, _ := os.ReadFile(results)
		for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
			var r agentResult
			if json.Unmarshal([]byte(line), &r) == nil && r.Room == roomName {
				return r
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	dispatches, err := stack.App.Rooms.Dispatches(context.Background(), roomName)
	t.Fatalf("no report from the dispatched agent on room %s within %v; session %v; dispatches %+v (%v)",
		roomName, 2*liveness, (session{id: sessionID, key: key}).get(t), dispatches, err)
	return agentResult{}
}

// checkAgentDrove checks one dispatched job: it was told our avatar's
// identity and its session, its 2 s of speech played out in full, and the
// subscriber saw the mouth move meanwhile.
func checkAgentDrove(t *testing.T, r agentResult, sessionID string, v *roomtest.Viewer, since time.Time) {
	t.Helper()
	t.Logf("dispatched agent: %+v", r)
	if r.Error != "" {
		t.Fatalf("the dispatched agent failed: %s", r.Error)
	}
	if r.Metadata.AvatarIdentity != "avatar-renderer" || r.Metadata.SessionID != sessionID {
		t.Errorf("job metadata: got %+v, want avatar_identity avatar-renderer and session %s", r.Metadata, sessionID)
	}
	if r.Interrupted || r.Position < r.Sent-0.06 || r.Position > r.Sent+0.001 {
		t.Errorf("playback: got position %.3f interrupted %v, want %.1f s within 60 ms, not interrupted", r.Position, r.Interrupted, r.Sent)
	}
	moving := 0
	for _, f := range v.FramesBetween(since, time.Now()) {
		if f.Mouth >= movingMin {
			moving++
		}
	}
	if moving < 10 {
		t.Errorf("frames with the mouth moving while the dispatched agent spoke: got %d, want >= 10", moving)
	}
}

// TestDispatchedAgentDrivesTheAvatar: an agent whose voice agent is a
// LiveKit agent (provider "livekit") converses through a real dispatched
// @livekit/agents worker, in a link's room and in an initiated room: the
// service dispatches it with the avatar's identity in the job metadata, it
// streams speech to our renderer by the in-room avatar protocol, and the
// visitor sees the mouth move.
func TestDispatchedAgentDrivesTheAvatar(t *testing.T) {
	stacktest.SkipShort(t)
	startWorker(t, nil)
	const agentName = "test-concierge"
	results := startAgentWorker(t, agentName)
	acct, err := stack.NewAccount(context.Background(), "pro")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stack.App.Accounts.AllowVoiceAgent(context.Background(), acct.User.ID, "livekit", agentName); err != nil {
		t.Fatal(err)
	}
	code, m := api(t, "POST", "/v1/agents", acct.LiveKey, map[string]any{
		"name": "Concierge", "avatar_id": "catalog/nasa/eileen-collins", "custom_greeting": "Welcome!",
		"voice_agent": map[string]any{"provider": "livekit", "agent_id": agentName, "auth_method": "none"},
	})
	if code != http.StatusCreated {
		t.Fatalf("create agent: %d %v", code, m)
	}
	agentID := m["agent"].(map[string]any)["agent_id"].(string)

	t.Run("link session", func(t *testing.T) {
		code, m := api(t, "POST", "/v1/links", acct.LiveKey, map[string]any{"agent_id": agentID})
		if code != http.StatusCreated {
			t.Fatalf("create link: %d %v", code, m)
		}
		url := m["link"].(map[string]any)["url"].(string)
		_, linkID, _ := strings.Cut(url, "#")
		began := time.Now()
		code, started := api(t, "POST", "/v1/links/start-session", "", map[string]any{"link_id": linkID, "aspect_ratio": "1:1"})
		if code != http.StatusOK {
			t.Fatalf("start via link: %d %v", code, started)
		}
		sessionID := started["session_id"].(string)
		v := roomtest.JoinViewer(t, started["rtc_url"].(string), started["participant_token"].(string), preparedFace(t))
		defer v.Room.Disconnect()
		r := awaitAgentResult(t, results, "avatar-link-"+sessionID, sessionID, acct.LiveKey)
		if r.Metadata.CustomGreeting != "Welcome!" || r.Metadata.AgentID != agentID {
			t.Errorf("job metadata: got %+v, want the agent's id and greeting", r.Metadata)
		}
		checkAgentDrove(t, r, sessionID, v, began)
	})

	t.Run("initiated room", func(t *testing.T) {
		code, m := api(t, "POST", "/v1/rooms/initiate", acct.LiveKey, map[string]any{"agent_id": agentID})
		if code != http.StatusCreated {
			t.Fatalf("initiate: %d %v", code, m)
		}
		sessionID := m["session_id"].(string)
		rm := m["room"].(map[string]any)
		// The client joining starts the session (webhook) and brings the
		// agent in.
		began := time.Now()
		v := roomtest.JoinViewer(t, rm["url"].(string), rm["token"].(string), preparedFace(t))
		r := awaitAgentResult(t, results, rm["name"].(string), sessionID, acct.LiveKey)
		checkAgentDrove(t, r, sessionID, v, began)
		v.Room.Disconnect()
		s := session{id: sessionID, key: acct.LiveKey}
		if got := s.awaitEnded(t); got["end_reason"] != domain.ReasonParticipantsLeft {
			t.Errorf("after the client left: got end_reason %v, want %s", got["end_reason"], domain.ReasonParticipantsLeft)
		}
	})
}
