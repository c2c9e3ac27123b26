package rendersession_test

import (
	"strings"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/conversation"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/gpu-fleet/stttest"
)

// TestConversationInRealRoom: the avatar's own voice agent (provider
// local) in a real room. A person joins: the avatar greets first, in its
// voice, with its mouth moving and the greeting captioned. The person's
// microphone plays recorded human speech (LibriVox clips with reference
// transcripts): interim and final transcripts arrive as lk.transcription
// text streams on their track, the words match the reference within the
// recogniser's accuracy, and the avatar answers what it heard. When the
// person talks over the answer, the avatar stops (barge-in).
func TestConversationInRealRoom(t *testing.T) {
	clips, err := stttest.Clips()
	if err != nil {
		t.Fatal(err)
	}
	st := newStack(t)
	av := prepareAvatar(t, render.Square)
	viewer := joinViewer(t, st.lk, "room-talk", av)
	captions := viewer.ListenCaptions()
	const greeting = "Welcome! I am the test avatar."
	joined := time.Now()
	s := st.startTalking(t, "sess_talk", "room-talk", av, room.Config{}, &conversation.Config{
		Greeting: greeting, Transcribe: true, Brain: conversation.Local{},
	})

	// The greeting comes first, captioned as the avatar's own track, and
	// moves the mouth.
	waitFor(t, "the greeting's caption", func() bool { return len(captions.All()) > 0 })
	first := captions.All()[0]
	if first.Text != greeting || !first.Final || first.From != room.AgentIdentity {
		t.Fatalf("first caption: got %+v, want the greeting, final, from the avatar", first)
	}
	waitFor(t, "the greeting to play out", func() bool { return s.Buffer().Buffered() == 0 })
	time.Sleep(300 * time.Millisecond)
	if n := movingFrames(viewer, joined, time.Now()); n < 10 {
		t.Fatalf("frames with the mouth moving during the greeting: got %d, want >= 10", n)
	}

	// The person speaks two sentences, pausing between them.
	mic := viewer.PublishMic()
	mic.Play(roomtest.Silence(1500 * time.Millisecond)) // the recogniser learns the room's noise
	mic.Play(clips[0].PCM)
	mic.Play(roomtest.Silence(time.Second))
	waitFor(t, "an answer to the first sentence", func() bool { return hasAnswer(captions.All(), 1) })

	// Barge-in: the person starts the second sentence while the avatar is
	// still answering the first; the avatar stops.
	if left := s.Buffer().Buffered(); left < 16000 {
		t.Fatalf("the answer has %d samples left to play; the test needs it still talking", left)
	}
	interrupted := make(chan time.Time, 1)
	go func() {
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if s.Buffer().Buffered() == 0 {
				interrupted <- time.Now()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		close(interrupted)
	}()
	spoke := time.Now()
	mic.Play(clips[1].PCM)
	at, ok := <-interrupted
	if !ok {
		t.Fatal("the avatar kept talking over the person (no barge-in within 5 s)")
	}
	t.Logf("barge-in: the avatar stopped %v after the person started talking", at.Sub(spoke).Round(time.Millisecond))
	time.Sleep(200 * time.Millisecond)
	for _, f := range viewer.FramesBetween(at.Add(120*time.Millisecond), at.Add(400*time.Millisecond)) {
		if f.Mouth > restMax {
			t.Errorf("mouth %.1f after the barge-in, want at rest (<= %.0f)", f.Mouth, restMax)
			break
		}
	}
	mic.Play(roomtest.Silence(time.Second))
	waitFor(t, "an answer to the second sentence", func() bool { return hasAnswer(captions.All(), 2) })
	// The interrupted answer's caption was cut to what was spoken.
	cut := false
	for _, c := range captions.All() {
		cut = cut || (strings.HasPrefix(c.Text, "I heard") && strings.HasSuffix(c.Text, "…"))
	}
	if !cut {
		t.Error("no caption of the interrupted answer cut to what was spoken (ending in …)")
	}

	// Transcripts: interim and final segments on the person's track, with
	// the reference's words. Each caption is its own text stream, and a
	// receiver may finish reading them out of order: the final of the
	// second sentence can land after the answer to it.
	waitFor(t, "both sentences' final transcripts", func() bool {
		n := 0
		for _, c := range captions.All() {
			if c.TrackID == mic.SID && c.Final {
				n++
			}
		}
		return n >= 2
	})
	var finals []string
	interims := 0
	for _, c := range captions.All() {
		if c.From != room.AgentIdentity {
			t.Errorf("caption from %q, want every caption from the avatar's participant", c.From)
		}
		if c.TrackID != mic.SID {
			continue
		}
		if c.SegmentID == "" {
			t.Errorf("caption without lk.segment_id: %+v", c)
		}
		if c.Final {
			finals = append(finals, c.Text)
		} else {
			interims++
		}
	}
	if interims == 0 || len(finals) < 2 {
		t.Fatalf("user transcripts: got %d interim and %d final (%q), want interims and >= 2 finals", interims, len(finals), finals)
	}
	ref := clips[0].Reference + " " + clips[1].Reference
	wer := stttest.WER(ref, strings.Join(finals, " "))
	t.Logf("through the room (mic -> Opus -> decode -> STT): WER %.2f; heard %q", wer, finals)
	if wer > 0.5 {
		t.Errorf("word error rate through the room: got %.2f, want <= 0.5 (pocketsphinx reaches about 0.3 on these clips)", wer)
	}
}

// hasAnswer reports whether the avatar has answered n utterances.
func hasAnswer(cs []roomtest.Caption, n int) bool {
	got := 0
	for _, c := range cs {
		if strings.HasPrefix(c.Text, "I heard you say") && !strings.HasSuffix(c.Text, "…") {
			got++
		}
	}
	return got >= n
}

func movingFrames(v *roomtest.Viewer, from, to time.Time) int {
	n := 0
	for _, f := range v.FramesBetween(from, to) {
		if f.Mouth >= movingMin {
			n++
		}
	}
	return n
}
