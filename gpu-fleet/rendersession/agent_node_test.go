package rendersession_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/testfiles"
	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/livekit"
)

// runNodeAgent runs scripts/agent/avatar-agent.mjs, a voice agent's audio
// path built with the real @livekit/agents framework, in roomName.
func runNodeAgent(t *testing.T, st *stack, roomName, identity, mode string, out any) {
	t.Helper()
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	token, err := livekit.AgentToken(st.lk.APIKey, st.lk.APISecret, roomName, identity, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("agent", "avatar-agent.mjs"),
		st.lk.URL, token, room.AgentIdentity, testfiles.Path(testfiles.Speech16k), mode)
	cmd.Dir = filepath.Join(root, "scripts")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("avatar-agent %s: %v\nstderr: %s", mode, err, stderr.String())
	}
	// rtc-node logs to stdout too: the result is the last line.
	lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
	if err := json.Unmarshal(lines[len(lines)-1], out); err != nil {
		t.Fatalf("avatar-agent %s output %q: %v (stderr %s)", mode, stdout.String(), err, stderr.String())
	}
}

// TestNodeAgentDrivesTheAvatar: the real LiveKit Agents framework
// (voice.DataStreamAudioOutput) drives our avatar in a local room: the
// mouth moves for a subscriber, back-to-back segments give one finished
// event each, in order, none early, with playback_position within 60 ms of
// what was sent; a clearBuffer mid-segment gives interrupted quickly, with
// the mouth at rest.
func TestNodeAgentDrivesTheAvatar(t *testing.T) {
	st := newStack(t)
	av := prepareAvatar(t, render.Square)
	viewer := joinViewer(t, st.lk, "room-node-agent", av)
	st.start(t, "sess_node_agent", "room-node-agent", av, room.Config{})
	waitFor(t, "the avatar's video", func() bool { n, _, _ := viewer.Counts(); return n > 5 })

	var seg struct {
		Sent     []float64
		SentMs   int64
		Finished []struct {
			Position    float64
			Interrupted bool
			AtMs        int64
		}
		Started []int64
	}
	began := time.Now()
	runNodeAgent(t, st, "room-node-agent", "node-agent", "segments", &seg)
	t.Logf("segments: %+v", seg)
	if len(seg.Finished) != 2 {
		t.Fatalf("playbackFinished events: got %d, want 2 (one per segment)", len(seg.Finished))
	}
	for i, f := range seg.Finished {
		want := seg.Sent[i]
		if f.Interrupted || f.Position < want-0.06 || f.Position > want+0.001 {
			t.Errorf("segment %d: got position %.3f interrupted %v, want %.1f s within 60 ms, not interrupted", i+1, f.Position, f.Interrupted, want)
		}
	}
	if seg.Finished[1].AtMs-seg.Finished[0].AtMs < 900 {
		t.Errorf("second segment finished %d ms after the first: earlier than its 1 s of audio", seg.Finished[1].AtMs-seg.Finished[0].AtMs)
	}
	if len(seg.Started) == 0 || seg.Finished[0].AtMs-seg.Started[0] < 1900 {
		t.Errorf("first segment finished %d ms after playback started: earlier than its 2 s of audio", seg.Finished[0].AtMs-seg.Started[0])
	}
	moving := 0
	for _, f := range viewer.FramesBetween(began, time.Now()) {
		if f.Mouth > movingMin {
			moving++
		}
	}
	if moving < 10 {
		t.Errorf("frames with the mouth moving while the agent spoke: got %d, want >= 10", moving)
	}

	var intr struct {
		Position     float64
		Interrupted  bool
		AfterClearMs int64
	}
	runNodeAgent(t, st, "room-node-agent", "node-agent-2", "interrupt", &intr)
	t.Logf("interrupt: %+v", intr)
	if !intr.Interrupted || intr.Position <= 0 || intr.Position >= 3 {
		t.Errorf("after clearBuffer: got %+v, want interrupted with 0 < position < 3 s", intr)
	}
	if intr.AfterClearMs > 200 {
		t.Errorf("clearBuffer to interrupted: %d ms, want within 200 ms", intr.AfterClearMs)
	}
	time.Sleep(300 * time.Millisecond)
	rest := viewer.FramesBetween(time.Now().Add(-200*time.Millisecond), time.Now())
	for _, f := range rest {
		if f.Mouth > restMax {
			t.Errorf("mouth after the clear: %.1f, want at rest (<= %.0f)", f.Mouth, restMax)
			break
		}
	}
}
