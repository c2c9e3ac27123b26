package rendersession_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	lksdk "github.com/livekit/server-sdk-go/v2"

	"avatarsvc/gpu-fleet/agentstream"
	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/shared/livekit"
)

// playbackEvent is one lk.playback_finished the avatar sent the agent.
type playbackEvent struct {
	At          time.Time
	Position    float64 `json:"playback_position"`
	Interrupted bool    `json:"interrupted"`
}

// goAgent is a participant speaking LiveKit Agents' avatar protocol with the
// Go SDK: byte streams of PCM16 to the avatar, lk.clear_buffer, and the
// playback RPCs back. (The real @livekit/agents framework drives the same
// protocol in scripts/ tests.)
type goAgent struct {
	room     *lksdk.Room
	mu       sync.Mutex
	finished []playbackEvent
	started  []time.Time
}

func joinAgent(t *testing.T, st *stack, roomName string) *goAgent {
	t.Helper()
	return joinAgentAs(t, st, roomName, "voice-agent")
}

// joinAgentAs joins a voice agent (participant kind agent, as LiveKit's
// dispatch makes one) called identity.
func joinAgentAs(t *testing.T, st *stack, roomName, identity string) *goAgent {
	t.Helper()
	token, err := livekit.AgentToken(st.lk.APIKey, st.lk.APISecret, roomName, identity, nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	a := &goAgent{room: lksdk.NewRoom(lksdk.NewRoomCallback())}
	a.room.RegisterRpcMethod(agentstream.RPCPlaybackDone, func(d lksdk.RpcInvocationData) (string, error) {
		var ev playbackEvent
		if err := json.Unmarshal([]byte(d.Payload), &ev); err != nil {
			t.Errorf("playback_finished payload %q: %v", d.Payload, err)
		}
		ev.At = time.Now()
		a.mu.Lock()
		a.finished = append(a.finished, ev)
		a.mu.Unlock()
		return "", nil
	})
	a.room.RegisterRpcMethod(agentstream.RPCPlaybackStart, func(lksdk.RpcInvocationData) (string, error) {
		a.mu.Lock()
		a.started = append(a.started, time.Now())
		a.mu.Unlock()
		return "", nil
	})
	if err := a.room.JoinWithToken(st.lk.URL, token, lksdk.WithAutoSubscribe(false)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.room.Disconnect)
	return a
}

// speak sends pcm (16 kHz mono) as one segment in 250 ms writes, as fast
// as the SDK takes them (TTS runs ahead of real time). The Go SDK's stream
// writer takes about 200 ms per Write, so 20 ms writes would underrun. Its
// Write only queues, and Close sends the trailer at once and drops what is
// still queued (server-sdk-go v2.13.3), so speak waits for the last write.
func (a *goAgent) speak(pcm []int16) {
	w := a.room.LocalParticipant.StreamBytes(lksdk.StreamBytesOptions{
		Topic: agentstream.Topic, DestinationIdentities: []string{room.AgentIdentity},
		Attributes: map[string]string{"sample_rate": "16000", "num_channels": "1"},
	})
	written := make(chan struct{}, 1)
	if len(pcm) == 0 {
		written <- struct{}{}
	}
	for len(pcm) > 0 {
		n := min(len(pcm), 4000) // 250 ms per write; the SDK splits it into data packets
		b := audio.EncodePCM16(pcm[:n])
		pcm = pcm[n:]
		var onDone *func()
		if len(pcm) == 0 {
			done := func() { written <- struct{}{} }
			onDone = &done
		}
		w.Write(b, onDone)
	}
	<-written // writes complete in order
	w.Close()
}

func (a *goAgent) clear(t *testing.T) {
	t.Helper()
	if _, err := a.room.LocalParticipant.PerformRpc(lksdk.PerformRpcParams{
		DestinationIdentity: room.AgentIdentity, Method: agentstream.RPCClearBuffer, Payload: "",
	}); err != nil {
		t.Fatalf("lk.clear_buffer: %v", err)
	}
}

func (a *goAgent) finishedEvents() []playbackEvent {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]playbackEvent(nil), a.finished...)
}

// TestAgentDrivesTheAvatarInTheRoom: a voice agent in the room speaks
// through byte streams; the avatar's mouth moves for a subscriber, each
// segment's playback_finished reports what played, and a clear mid-segment
// answers interrupted with the mouth at rest.
func TestAgentDrivesTheAvatarInTheRoom(t *testing.T) {
	st := newStack(t)
	av := prepareAvatar(t, render.Square)
	viewer := joinViewer(t, st.lk, "room-agent", av)
	st.start(t, "sess_agent", "room-agent", av, room.Config{})
	waitFor(t, "the avatar's video", func() bool { n, _, _ := viewer.Counts(); return n > 5 })
	agent := joinAgent(t, st, "room-agent")
	speech := speechPCM(t)

	// Two back-to-back segments: one finished event each, in order.
	first, second := speech[:2*16000], speech[2*16000:3*16000]
	sent := time.Now()
	agent.speak(first)
	agent.speak(second)
	waitFor(t, "two playback_finished", func() bool { return len(agent.finishedEvents()) >= 2 })
	got := agent.finishedEvents()
	for i, want := range []float64{2.0, 1.0} {
		if ev := got[i]; ev.Interrupted || ev.Position < want-0.06 || ev.Position > want {
			t.Errorf("segment %d: got %+v, want %.1f s (within 60 ms, never more than sent), not interrupted", i+1, ev, want)
		}
	}
	// Not early: the first cannot finish before its 2 s could have played.
	if early := got[0].At.Sub(sent); early < 1900*time.Millisecond {
		t.Errorf("first playback_finished %v after sending: earlier than its 2 s of audio", early)
	}
	moving := 0
	for _, f := range viewer.FramesBetween(sent, got[1].At) {
		if f.Mouth > movingMin {
			moving++
		}
	}
	if moving < 10 {
		t.Errorf("frames with the mouth moving while the agent spoke: got %d, want >= 10", moving)
	}

	// A clear mid-segment: interrupted, quickly, and the mouth rests.
	agent.speak(speech[3*16000 : 6*16000])
	waitFor(t, "playback started", func() bool {
		agent.mu.Lock()
		defer agent.mu.Unlock()
		return len(agent.started) >= 3
	})
	time.Sleep(500 * time.Millisecond)
	cleared := time.Now()
	agent.clear(t)
	waitFor(t, "the interrupted playback_finished", func() bool { return len(agent.finishedEvents()) >= 3 })
	ev := agent.finishedEvents()[2]
	if !ev.Interrupted || ev.Position <= 0 || ev.Position >= 3 {
		t.Errorf("after clear: got %+v, want interrupted with 0 < position < 3 s", ev)
	}
	t.Logf("clear -> playback_finished(interrupted): %v", ev.At.Sub(cleared))
	if d := ev.At.Sub(cleared); d > 200*time.Millisecond {
		t.Errorf("clear to interrupted playback_finished: %v, want within 200 ms", d)
	}
	time.Sleep(300 * time.Millisecond)
	for _, f := range viewer.FramesBetween(time.Now().Add(-200*time.Millisecond), time.Now()) {
		if f.Mouth > restMax {
			t.Errorf("mouth after the clear: %.1f, want at rest (<= %.0f)", f.Mouth, restMax)
			break
		}
	}
}
