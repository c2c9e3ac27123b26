package rendersession_test

import (
	"errors"
	"runtime"
	"testing"
	"time"

	lksdk "github.com/livekit/server-sdk-go/v2"

	"avatarsvc/gpu-fleet/agentstream"
	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/shared/livekit"
)

// heapBound is how much the process's heap may grow while a participant
// floods the avatar with a stream it refuses: the refused stream must not
// be buffered at all, so the growth is only the flood's own traffic
// (about 1 MiB queued by the sender, the SCTP windows) and noise.
const heapBound = 64 << 20

// heapPeak samples the live heap (HeapInuse right after a forced GC, so
// garbage does not count) every 250 ms until stop is closed, and returns
// its baseline and its peak.
func heapPeak(stop <-chan struct{}) (baseline, peak <-chan uint64) {
	b, p := make(chan uint64, 1), make(chan uint64, 1)
	live := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	first := live()
	b <- first
	go func() {
		top := first
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				p <- max(top, live())
				return
			case <-t.C:
				top = max(top, live())
			}
		}
	}()
	return b, p
}

// awaitDelivered returns once everything from has sent the avatar reached
// it, and how long that took: livekit-server queues what the avatar cannot
// take yet, so a flood keeps arriving after it was sent. An RPC to the
// avatar queues behind it on the same channel; the SDK gives up on one
// whose ack takes over 7 s, so it asks again until one is answered (with
// the avatar's refusal, or its success for the followed agent).
func awaitDelivered(t *testing.T, from *lksdk.Room) time.Duration {
	t.Helper()
	began := time.Now()
	for time.Since(began) < 2*time.Minute {
		_, err := from.LocalParticipant.PerformRpc(lksdk.PerformRpcParams{
			DestinationIdentity: room.AgentIdentity, Method: agentstream.RPCClearBuffer,
		})
		var rerr *lksdk.RpcError
		if err == nil || errors.As(err, &rerr) && rerr.Code == lksdk.RpcApplicationError {
			return time.Since(began)
		}
	}
	t.Fatal("the flood was not delivered to the avatar within 2 minutes")
	return 0
}

// TestOnlyTheFollowedAgentDrivesTheAvatar: in a real room whose avatar
// follows "voice-agent" (its token's lk.publish_on_behalf, as the README's
// recipe mints it), a link visitor (before and after LiveKit announced it
// to the room) and another agent stream speech to the avatar as fast as
// the room carries it, without a trailer, and call lk.clear_buffer; the
// followed agent streams an unsupported sample rate.
// The avatar says nothing of it, its heap stays within heapBound, nothing
// the agent says is cleared, and the followed agent still drives it.
func TestOnlyTheFollowedAgentDrivesTheAvatar(t *testing.T) {
	st := newStack(t)
	av := prepareAvatar(t, render.Square)
	const roomName, followed = "room-guard", "voice-agent"
	viewer := joinViewer(t, st.lk, roomName, av)
	avatarToken, err := livekit.AgentToken(st.lk.APIKey, st.lk.APISecret, roomName, room.AgentIdentity,
		map[string]string{room.PublishOnBehalfAttribute: followed}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s := st.start(t, "sess_guard", roomName, av, room.Config{Token: avatarToken})
	waitFor(t, "the avatar's video", func() bool { n, _, _ := viewer.Counts(); return n > 5 })
	agent := joinAgentAs(t, st, roomName, followed)
	speech := speechPCM(t)

	// A link visitor's token, minted the way the service mints them.
	visitorToken, err := livekit.New(st.lk.URL, st.lk.APIKey, st.lk.APISecret).Token(roomName, "visitor", "Visitor", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	visitor, err := lksdk.ConnectToRoomWithToken(st.lk.URL, visitorToken, lksdk.NewRoomCallback(), lksdk.WithAutoSubscribe(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(visitor.Disconnect)
	other := joinAgentAs(t, st, roomName, "other-agent")

	// The floods carry real speech: a stream that got through would move
	// the mouth.
	loud := audio.EncodePCM16(speech)
	mono16k := map[string]string{"sample_rate": "16000", "num_channels": "1"}
	for _, tc := range []struct {
		name     string
		from     *lksdk.Room
		attrs    map[string]string
		maxBytes int64
		maxTime  time.Duration
		known    bool // wait until LiveKit announced the sender
	}{
		// 500 MiB, or as much as 25 s carry (then livekit-server takes a
		// while more to deliver what it queued).
		{"a link visitor streams speech without a trailer", visitor, mono16k, 500 << 20, 25 * time.Second, false},
		{"the link visitor, once announced, streams speech", visitor, mono16k, 20 << 20, 3 * time.Second, true},
		{"another agent streams speech", other.room, mono16k, 20 << 20, 3 * time.Second, true},
		// More than heapBound: a refused stream left to the SDK would
		// exceed it.
		{"the followed agent streams an unsupported rate", agent.room, map[string]string{"sample_rate": "4000", "num_channels": "1"}, 100 << 20, 10 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.known {
				// LiveKit announces participants that publish nothing in
				// batches; the viewer hears of them when the avatar does.
				who := tc.from.LocalParticipant.Identity()
				waitFor(t, who+" announced", func() bool { return viewer.Room.GetParticipantByIdentity(who) != nil })
			}
			spoken := s.Stats().SpeakingFrames
			stop := make(chan struct{})
			baseline, peak := heapPeak(stop)
			began := time.Now()
			sent := roomtest.StreamWithoutTrailer(t, tc.from, room.AgentIdentity, agentstream.Topic, tc.attrs, loud, tc.maxBytes, tc.maxTime)
			took := time.Since(began)
			drained := awaitDelivered(t, tc.from)
			if got := s.Buffer().Buffered(); got != 0 {
				t.Errorf("audio queued for playout: got %d samples, want none", got)
			}
			close(stop)
			base, top := <-baseline, <-peak
			t.Logf("sent %d MiB in %v (%.1f MiB/s), all delivered %v later; live heap %d MiB before, peak %d MiB (+%d MiB)",
				sent>>20, took.Round(time.Millisecond), float64(sent)/(1<<20)/took.Seconds(), drained.Round(time.Millisecond),
				base>>20, top>>20, (int64(top)-int64(base))>>20)
			if growth := int64(top) - int64(base); growth > heapBound {
				t.Errorf("heap growth while flooded: got %d MiB, want <= %d MiB", growth>>20, heapBound>>20)
			}
			if got := s.Stats().SpeakingFrames; got != spoken {
				t.Errorf("frames speaking during the flood: got %d, want 0", got-spoken)
			}
			for _, f := range viewer.FramesBetween(began, time.Now()) {
				if f.Mouth > restMax {
					t.Errorf("mouth during the flood: %.1f, want at rest (<= %.0f)", f.Mouth, restMax)
					break
				}
			}
		})
	}

	t.Run("clear_buffer from others clears nothing; the followed agent drives the avatar", func(t *testing.T) {
		before := len(agent.finishedEvents())
		began := time.Now()
		agent.speak(speech[:3*16000])
		waitFor(t, "playback started", func() bool {
			agent.mu.Lock()
			defer agent.mu.Unlock()
			return len(agent.started) > 0
		})
		for _, from := range []*lksdk.Room{visitor, other.room} {
			if _, err := from.LocalParticipant.PerformRpc(lksdk.PerformRpcParams{
				DestinationIdentity: room.AgentIdentity, Method: agentstream.RPCClearBuffer,
			}); err == nil {
				t.Errorf("lk.clear_buffer from %s: got success, want refused", from.LocalParticipant.Identity())
			}
		}
		waitFor(t, "playback_finished", func() bool { return len(agent.finishedEvents()) > before })
		if ev := agent.finishedEvents()[before]; ev.Interrupted || ev.Position < 3-0.06 {
			t.Errorf("the agent's segment: got %+v, want all 3 s played, not interrupted", ev)
		}
		moving := 0
		for _, f := range viewer.FramesBetween(began, time.Now()) {
			if f.Mouth > movingMin {
				moving++
			}
		}
		if moving < 10 {
			t.Errorf("frames with the mouth moving while the followed agent spoke: got %d, want >= 10", moving)
		}
	})
}
