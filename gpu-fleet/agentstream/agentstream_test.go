package agentstream

import (
	"encoding/binary"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
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

// noRead fails the test if the stream is read at all.
type noRead struct{ t *testing.T }

func (n noRead) Read([]byte) (int, error) {
	n.t.Error("stream read, want it refused before any data is read")
	return 0, io.EOF
}

func TestFormatIsCheckedBeforeAnythingIsRead(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name  string
		attrs map[string]string
		want  error
	}{
		{"rate not a number", map[string]string{"sample_rate": "x"}, ErrBadFormat},
		{"rate missing", map[string]string{"num_channels": "1"}, ErrBadFormat},
		{"rate below the set", map[string]string{"sample_rate": "4000"}, ErrBadFormat},
		{"rate inside the range but not in the set", map[string]string{"sample_rate": "44000"}, ErrBadFormat},
		{"rate above the set", map[string]string{"sample_rate": "96000"}, ErrBadFormat},
		{"six channels", map[string]string{"sample_rate": "16000", "num_channels": "6"}, ErrBadFormat},
		{"no channels", map[string]string{"sample_rate": "16000", "num_channels": "0"}, ErrBadFormat},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := f.r.HandleStream(noRead{t}, "agent", tc.attrs); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	for _, rate := range SampleRates {
		if _, err := ParseFormat(map[string]string{"sample_rate": strconv.Itoa(rate), "num_channels": "2"}); err != nil {
			t.Errorf("rate %d: got %v, want accepted", rate, err)
		}
	}
}

// endless is a stream that never ends; it counts what was read.
type endless struct{ n int }

func (e *endless) Read(p []byte) (int, error) {
	clear(p)
	e.n += len(p)
	return len(p), nil
}

func TestStreamPastMaxStreamBytesIsCut(t *testing.T) {
	f := newFixture(t)
	s := &endless{}
	if err := f.r.HandleStream(s, "agent", mono16k); err != ErrTooLong {
		t.Fatalf("got %v, want ErrTooLong", err)
	}
	if s.n > MaxStreamBytes+64<<10 {
		t.Errorf("bytes read: got %d, want about MaxStreamBytes (%d)", s.n, MaxStreamBytes)
	}
	// The segment ended where it got to: it finishes once played.
	for f.buf.Buffered() > 0 {
		f.tick()
	}
	f.tick()
	if got := f.rec.finished(t, 1); len(got) != 1 || got[0]["interrupted"] != false {
		t.Errorf("finished: got %v, want one, not interrupted", got)
	}
}

// openStream starts a segment on a pipe; the receiver may cancel it by
// closing the pipe, as it cancels the room's streams.
func openStream(t *testing.T, f *fixture) (w *io.PipeWriter, done chan error) {
	return openStreamAs(t, f, mono16k)
}

func openStreamAs(t *testing.T, f *fixture, attrs map[string]string) (w *io.PipeWriter, done chan error) {
	pr, pw := io.Pipe()
	done = make(chan error, 1)
	go func() { done <- f.r.HandleStream(pr, "agent", attrs) }()
	t.Cleanup(func() { pw.Close() })
	return pw, done
}

func TestOpenStreamsAreCappedAndClearCancelsThem(t *testing.T) {
	f := newFixture(t)
	var writers []*io.PipeWriter
	var dones []chan error
	for i := 0; i < MaxOpenStreams; i++ {
		w, done := openStream(t, f)
		writers, dones = append(writers, w), append(dones, done)
	}
	waitOpen(t, f.r, MaxOpenStreams)
	if err := f.r.HandleStream(noRead{t}, "agent", mono16k); err != ErrTooManyStreams {
		t.Fatalf("stream %d: got %v, want ErrTooManyStreams", MaxOpenStreams+1, err)
	}
	// A clear cancels every open stream: the transport may stop buffering
	// them, and each handler returns.
	f.r.Clear("agent")
	for i, w := range writers {
		select {
		case <-dones[i]:
		case <-time.After(2 * time.Second):
			t.Errorf("stream %d: handler still running after clear", i+1)
		}
		// Nobody reads a pipe once its handler returned: a write returns
		// only if the stream was cancelled (closed).
		wrote := make(chan error, 1)
		go func() { _, err := w.Write([]byte{0, 0}); wrote <- err }()
		select {
		case err := <-wrote:
			if err != io.ErrClosedPipe {
				t.Errorf("stream %d after clear: write got %v, want ErrClosedPipe (cancelled)", i+1, err)
			}
		case <-time.After(2 * time.Second):
			t.Errorf("stream %d after clear: not cancelled", i+1)
		}
	}
	f.stream(t, pcm16(playout.FrameSamples, 1), mono16k) // room again
}

func waitOpen(t *testing.T, r *Receiver, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		r.mu.Lock()
		got := len(r.open)
		r.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("open streams: got %d, want %d", got, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestWaitingStreamIsReadAndHeldWithinBound(t *testing.T) {
	f := newFixture(t)
	first, firstDone := openStream(t, f)
	first.Write(pcm16(playout.FrameSamples, 1))
	waitBuffered(t, f.buf, playout.FrameSamples)
	// The first keeps trickling, so it does not count as stalled.
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				first.Write(pcm16(16, 1))
			}
		}
	}()
	// The second sends more than MaxHeld while it waits: every write goes
	// through (a pipe write returns once read), and what is held stays
	// within the bound.
	// At 24 kHz, so the resampler's tail is played too.
	second, secondDone := openStreamAs(t, f, map[string]string{"sample_rate": "24000"})
	chunk := pcm16(24000, 1) // 1 s
	for i := 0; i < MaxHeld/playout.SampleRate+10; i++ {
		if _, err := second.Write(chunk); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
	}
	f.r.mu.Lock()
	held := f.r.held
	f.r.mu.Unlock()
	if held > MaxHeld {
		t.Errorf("held while waiting: got %d samples, want <= %d", held, MaxHeld)
	}
	close(stop)
	first.Close()
	second.Close()
	for _, done := range []chan error{firstDone, secondDone} {
		if err := <-done; err != nil {
			t.Errorf("handler: %v", err)
		}
	}
	f.r.mu.Lock()
	held = f.r.held
	f.r.mu.Unlock()
	if held != 0 {
		t.Errorf("held after both ended: got %d, want 0", held)
	}
	if got, want := f.buf.Buffered(), playout.DefaultMaxBuffered; got < want-playout.SampleRate {
		t.Errorf("buffered once the second's turn came: got %d samples, want about %d (what it held)", got, want)
	}
}
