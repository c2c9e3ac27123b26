package agentstream

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/playout"
)

// recorder is the room side of the RPCs: it records what the avatar sends.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

func (c *recorder) CallRPC(dest, method, payload string) error {
	c.mu.Lock()
	c.calls = append(c.calls, call{dest, method, payload})
	c.mu.Unlock()
	return nil
}

// finished returns the playback_finished payloads so far, waiting briefly
// for the sending goroutine.
func (c *recorder) finished(t *testing.T, want int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		c.mu.Lock()
		var out []map[string]any
		for _, cl := range c.calls {
			if cl.method == RPCPlaybackDone {
				var m map[string]any
				if err := json.Unmarshal([]byte(cl.payload), &m); err != nil {
					t.Fatalf("payload %q: %v", cl.payload, err)
				}
				if len(m) != 2 {
					t.Fatalf("payload %q: want exactly playback_position and interrupted", cl.payload)
				}
				out = append(out, m)
			}
		}
		c.mu.Unlock()
		if len(out) >= want || time.Now().After(deadline) {
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type fixture struct {
	buf *playout.Buffer
	rec *recorder
	r   *Receiver
}

func newFixture(t *testing.T) *fixture {
	buf := playout.New(0)
	rec := &recorder{}
	r := New(buf, rec, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(r.Close)
	return &fixture{buf, rec, r}
}

// tick plays one frame as the session does and delivers its events.
func (f *fixture) tick() playout.Frame {
	pcm := make([]int16, playout.FrameSamples)
	fr := f.buf.Next(pcm)
	for _, ev := range fr.Events {
		f.r.Emit(ev)
	}
	return fr
}

func pcm16(samples, channels int) []byte {
	b := make([]byte, 2*samples*channels)
	for i := 0; i < samples*channels; i++ {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(int16(1000)))
	}
	return b
}

var mono16k = map[string]string{"sample_rate": "16000", "num_channels": "1"}

// stream sends data as one segment in odd-sized chunks and closes it.
func (f *fixture) stream(t *testing.T, data []byte, attrs map[string]string) {
	t.Helper()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() { done <- f.r.HandleStream(pr, "agent", attrs) }()
	for len(data) > 0 {
		n := min(len(data), 777) // not a multiple of a sample
		pw.Write(data[:n])
		data = data[n:]
	}
	pw.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestSegmentFinishesAfterItsLastFrame(t *testing.T) {
	f := newFixture(t)
	f.stream(t, pcm16(3*playout.FrameSamples, 1), mono16k)
	f.tick()
	f.tick()
	if got := f.rec.finished(t, 0); len(got) != 0 {
		t.Fatalf("after 2 of 3 frames: got %v, want nothing yet", got)
	}
	f.tick()
	got := f.rec.finished(t, 1)
	if len(got) != 1 || got[0]["playback_position"] != 0.12 || got[0]["interrupted"] != false {
		t.Fatalf("after the last frame: got %v, want one {0.12, false}", got)
	}
	f.rec.mu.Lock()
	first := f.rec.calls[0]
	f.rec.mu.Unlock()
	if first.method != RPCPlaybackStart || first.dest != "agent" {
		t.Errorf("first call: got %+v, want playback_started to the sender", first)
	}
}

func TestStereo48kIsDownmixedAndResampled(t *testing.T) {
	f := newFixture(t)
	f.stream(t, pcm16(48000/10, 2), map[string]string{"sample_rate": "48000", "num_channels": "2"}) // 100 ms
	for i := 0; i < 5; i++ {
		f.tick()
	}
	got := f.rec.finished(t, 1)
	if len(got) != 1 {
		t.Fatalf("got %v, want one finished", got)
	}
	if pos := got[0]["playback_position"].(float64); pos < 0.099 || pos > 0.1 {
		t.Errorf("playback_position: got %v, want 0.1 (never more than received)", pos)
	}
}

func TestClearMidSegment(t *testing.T) {
	f := newFixture(t)
	pr, pw := io.Pipe()
	go f.r.HandleStream(pr, "agent", mono16k)
	pw.Write(pcm16(10*playout.FrameSamples, 1))
	waitBuffered(t, f.buf, 10*playout.FrameSamples)
	f.tick()
	f.r.Clear("agent")
	f.r.Clear("agent")                       // twice: idempotent
	pw.Write(pcm16(playout.FrameSamples, 1)) // bytes after the clear are ignored
	fr := f.tick()
	if fr.Speaking {
		t.Error("frame after clear: got speaking, want rest")
	}
	got := f.rec.finished(t, 1)
	if len(got) != 1 || got[0]["playback_position"] != 0.04 || got[0]["interrupted"] != true {
		t.Fatalf("after clear: got %v, want one {0.04, true}", got)
	}
	pw.Close()
	f.tick()
	if got := f.rec.finished(t, 2); len(got) != 1 {
		t.Errorf("after the stream closed: got %v, want still one finished", got)
	}
}

func TestClearBeforePlaybackAnswersAtOnce(t *testing.T) {
	f := newFixture(t)
	f.stream(t, pcm16(playout.FrameSamples, 1), mono16k)
	f.r.Clear("agent")
	got := f.rec.finished(t, 1)
	if len(got) != 1 || got[0]["playback_position"] != 0.0 || got[0]["interrupted"] != true {
		t.Fatalf("got %v, want one {0, true} without waiting for a frame", got)
	}
}

func TestBackToBackSegmentsFinishInOrder(t *testing.T) {
	f := newFixture(t)
	f.stream(t, pcm16(2*playout.FrameSamples, 1), mono16k)
	f.stream(t, pcm16(1*playout.FrameSamples, 1), mono16k)
	f.tick()
	if got := f.rec.finished(t, 0); len(got) != 0 {
		t.Fatalf("after frame 1: got %v, want none (none early)", got)
	}
	f.tick()
	if got := f.rec.finished(t, 1); len(got) != 1 || got[0]["playback_position"] != 0.08 {
		t.Fatalf("after frame 2: got %v, want the first segment's {0.08}", got)
	}
	f.tick()
	got := f.rec.finished(t, 2)
	if len(got) != 2 || got[1]["playback_position"] != 0.04 {
		t.Fatalf("after frame 3: got %v, want the second segment's {0.04} next", got)
	}
}

func TestNewerStreamSupersedesAStalledOne(t *testing.T) {
	f := newFixture(t)
	pr, pw := io.Pipe()
	go f.r.HandleStream(pr, "agent", mono16k)
	pw.Write(pcm16(playout.FrameSamples, 1))
	waitBuffered(t, f.buf, playout.FrameSamples)
	// The first stream stalls; a second one arrives.
	f.stream(t, pcm16(playout.FrameSamples, 1), mono16k)
	f.tick()
	f.tick()
	got := f.rec.finished(t, 2)
	if len(got) != 2 || got[0]["playback_position"] != 0.04 || got[1]["playback_position"] != 0.04 {
		t.Fatalf("got %v, want both segments finished in order", got)
	}
	pw.Close()
}

func TestEmptyStreamAndBadFormat(t *testing.T) {
	f := newFixture(t)
	f.stream(t, nil, mono16k)
	if got := f.rec.finished(t, 1); len(got) != 1 || got[0]["playback_position"] != 0.0 || got[0]["interrupted"] != false {
		t.Errorf("empty segment: got %v, want {0, false}", got)
	}
	for _, attrs := range []map[string]string{{"sample_rate": "x"}, {"sample_rate": "4000"}, {"sample_rate": "16000", "num_channels": "6"}} {
		if err := f.r.HandleStream(io.NopCloser(nil), "agent", attrs); err != ErrBadFormat {
			t.Errorf("attrs %v: got %v, want ErrBadFormat", attrs, err)
		}
	}
}

func waitBuffered(t *testing.T, b *playout.Buffer, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for b.Buffered() < n {
		if time.Now().After(deadline) {
			t.Fatalf("buffered: got %d, want %d", b.Buffered(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestClearWhileANewerStreamWaits(t *testing.T) {
	f := newFixture(t)
	first, w1 := io.Pipe()
	go f.r.HandleStream(first, "agent", mono16k)
	w1.Write(pcm16(playout.FrameSamples, 1))
	waitBuffered(t, f.buf, playout.FrameSamples)
	second, w2 := io.Pipe()
	go f.r.HandleStream(second, "agent", mono16k) // waits for the first to close
	go w2.Write(pcm16(playout.FrameSamples, 1))
	time.Sleep(50 * time.Millisecond)
	f.r.Clear("agent")
	got := f.rec.finished(t, 2)
	if len(got) != 2 || got[0]["interrupted"] != true || got[1]["interrupted"] != true {
		t.Fatalf("got %v, want both segments finished interrupted at once", got)
	}
	w1.Close()
	w2.Close()
	if f.tick().Speaking {
		t.Error("frame after clear: got speaking, want rest")
	}
}
