package conversation

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/remoteagent"
	"avatarsvc/gpu-fleet/room"
)

// recorder is the playout buffer and the room, as the loop sees them.
type recorder struct {
	mu       sync.Mutex
	calls    []string
	pushed   int
	captions []room.Caption
	sent     int
}

func (r *recorder) log(s string) { r.mu.Lock(); r.calls = append(r.calls, s); r.mu.Unlock() }
func (r *recorder) Push(pcm []int16, _ time.Time) (uint64, error) {
	r.mu.Lock()
	r.pushed += len(pcm)
	r.mu.Unlock()
	r.log("push")
	return 1, nil
}
func (r *recorder) End() (uint64, bool) { r.log("end"); return 1, true }
func (r *recorder) Interrupt() int      { r.log("interrupt"); return 0 }
func (r *recorder) Buffered() int       { return 0 }
func (r *recorder) Caption(c room.Caption) {
	r.mu.Lock()
	r.captions = append(r.captions, c)
	r.mu.Unlock()
}
func (r *recorder) AudioTrackSID() string { return "TR_avatar" }

func (r *recorder) snapshot() ([]string, []room.Caption, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.calls), slices.Clone(r.captions), r.pushed
}

// fakeRemote replays a remote agent's events and counts the audio sent up.
type fakeRemote struct {
	events chan remoteagent.Event
	rec    *recorder
	closed chan struct{}
}

func (f *fakeRemote) SendUserAudio(pcm []int16) error {
	f.rec.mu.Lock()
	f.rec.sent += len(pcm)
	f.rec.mu.Unlock()
	return nil
}
func (f *fakeRemote) Events() <-chan remoteagent.Event { return f.events }
func (f *fakeRemote) Close() error                     { close(f.closed); return nil }

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestRemoteAgent: the elevenlabs provider's events drive the avatar: its
// audio is spoken as one utterance that ends when the audio pauses, an
// interruption stops it, transcripts become captions on the right tracks,
// and the person's audio goes up.
func TestRemoteAgent(t *testing.T) {
	rec := &recorder{}
	remote := &fakeRemote{events: make(chan remoteagent.Event, 16), rec: rec, closed: make(chan struct{})}
	c, err := Start(Config{Transcribe: true, Remote: remote, Speaker: rec, Captions: rec})
	if err != nil {
		t.Fatal(err)
	}
	c.UserJoined("guest")
	c.UserAudio("guest", "TR_mic", make([]int16, 320))
	waitUntil(t, "the person's audio to go up", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return rec.sent == 320 })

	remote.events <- remoteagent.Event{Kind: remoteagent.AgentResponse, Text: "Hi there"}
	remote.events <- remoteagent.Event{Kind: remoteagent.AgentAudio, PCM: make([]int16, 1600)}
	remote.events <- remoteagent.Event{Kind: remoteagent.AgentAudio, PCM: make([]int16, 1600)}
	waitUntil(t, "the utterance to end", func() bool { calls, _, _ := rec.snapshot(); return slices.Contains(calls, "end") })
	remote.events <- remoteagent.Event{Kind: remoteagent.Interruption, EventID: 3}
	remote.events <- remoteagent.Event{Kind: remoteagent.TentativeUserTranscript, Text: "how are"}
	remote.events <- remoteagent.Event{Kind: remoteagent.UserTranscript, Text: "how are you"}
	waitUntil(t, "the captions", func() bool { _, cs, _ := rec.snapshot(); return len(cs) == 3 })

	calls, caps, pushed := rec.snapshot()
	if want := []string{"push", "push", "end", "interrupt"}; !slices.Equal(calls, want) {
		t.Errorf("playout calls: got %v, want %v", calls, want)
	}
	if pushed != 3200 {
		t.Errorf("samples pushed: got %d, want 3200", pushed)
	}
	want := []room.Caption{
		{TrackSID: "TR_avatar", SegmentID: "avatar-1", Text: "Hi there", Final: true},
		{TrackSID: "TR_mic", SegmentID: "TR_mic-remote-0", Text: "how are", Final: false},
		{TrackSID: "TR_mic", SegmentID: "TR_mic-remote-0", Text: "how are you", Final: true},
	}
	if !slices.Equal(caps, want) {
		t.Errorf("captions:\ngot  %+v\nwant %+v", caps, want)
	}
	c.Close()
	select {
	case <-remote.closed:
	default:
		t.Error("Close did not close the remote agent")
	}
}

func TestLocalReply(t *testing.T) {
	tests := []struct{ heard, want string }{
		{"hello there", "I heard you say: hello there."},
		{"  ", ""},
	}
	for _, tt := range tests {
		t.Run(tt.heard, func(t *testing.T) {
			got, err := Local{}.Reply(context.Background(), tt.heard)
			if err != nil || got != tt.want {
				t.Fatalf("Reply(%q): got %q, %v; want %q", tt.heard, got, err, tt.want)
			}
		})
	}
}

// TestRedispatch: a LiveKit agent that has not joined a while after the
// person did is dispatched again, a bounded number of times; one that
// joined is left alone.
func TestRedispatch(t *testing.T) {
	for _, tt := range []struct {
		name       string
		agentJoins bool
		wantCalls  int32
	}{
		{"agent never came", false, maxRedispatch},
		{"agent came", true, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := &recorder{}
			var calls atomic.Int32
			c, err := Start(Config{Speaker: rec, Captions: rec, AgentGrace: 50 * time.Millisecond,
				Redispatch: func(context.Context) error { calls.Add(1); return nil }})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.HearsAudio() {
				t.Error("HearsAudio: got true, want false (the customer's agent listens)")
			}
			if tt.agentJoins {
				c.AgentJoined("agent-AJ_1")
			}
			c.UserJoined("guest")
			time.Sleep(400 * time.Millisecond) // eight times the grace: a call too many would show
			if got := calls.Load(); got != tt.wantCalls {
				t.Fatalf("Redispatch calls: got %d, want %d", got, tt.wantCalls)
			}
		})
	}
}
