// Package agentstream is the avatar's side of LiveKit Agents' avatar
// protocol, for a voice agent in the same room (verified from
// @livekit/agents 1.9.0 and livekit-agents 1.7):
//
//   - speech arrives as byte streams on topic "lk.audio_stream" sent to the
//     avatar, attributes "sample_rate" and "num_channels", payload raw
//     interleaved PCM16 little-endian; one stream is one segment, ended by
//     the stream closing;
//   - RPC "lk.clear_buffer" drops queued audio now (idempotent; it may come
//     before or after the stream closes, or twice);
//   - the avatar calls RPC "lk.playback_finished" on the sender with exactly
//     {"playback_position": seconds, "interrupted": bool}, once per segment,
//     after the segment's last audio went out (or at once when cleared), and
//     "lk.playback_started" when its first audio goes out.
//
// Segments feed the session's playout buffer, the same one ws_uri feeds:
// speech from both at once would interleave into one utterance, so a
// session should be driven by one of them.
package agentstream

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/playout"
)

// Protocol names.
const (
	Topic            = "lk.audio_stream"
	RPCClearBuffer   = "lk.clear_buffer"
	RPCPlaybackDone  = "lk.playback_finished"
	RPCPlaybackStart = "lk.playback_started"
)

// Caller performs an RPC on a participant of the room (*room.Room).
type Caller interface {
	CallRPC(destination, method, payload string) error
}

// segment is one byte stream: one utterance in the playout buffer.
type segment struct {
	ended     chan struct{} // closed with closed
	lastData  time.Time
	sender    string
	id        uint64 // playout utterance id; 0 until audio was pushed
	received  int    // samples pushed (16 kHz)
	closed    bool   // the stream ended (or was cut off)
	started   bool   // its first audio went out
	done      bool   // playback_finished was sent (or queued)
	abandoned bool   // cleared or superseded: ignore its further bytes
	dropped   bool   // audio held while waiting was dropped (logged once)
	cancel    func() // stops the transport buffering the stream (nil: none)
}

// abandonLocked marks seg abandoned and cancels its stream, so the
// transport stops buffering bytes nobody will read.
func (r *Receiver) abandonLocked(seg *segment) {
	seg.abandoned = true
	if seg.cancel != nil {
		go seg.cancel() // never under r.mu: the transport takes its own locks
		seg.cancel = nil
	}
}

// Receiver turns one session's agent streams into playout utterances and
// playout events into the protocol's RPCs.
type Receiver struct {
	buffer *playout.Buffer
	log    *slog.Logger

	mu       sync.Mutex
	byID     map[uint64]*segment
	current  *segment // the newest stream
	open     map[*segment]bool
	held     int // samples held by segments waiting for their turn
	calls    chan call
	stopOnce sync.Once
	stop     chan struct{}
}

type call struct{ dest, method, payload string }

// New returns a Receiver feeding buffer; RPCs go out through caller, in
// order, from one goroutine (Close stops it).
func New(buffer *playout.Buffer, caller Caller, log *slog.Logger) *Receiver {
	r := &Receiver{buffer: buffer, log: log, byID: map[uint64]*segment{}, open: map[*segment]bool{},
		calls: make(chan call, 64), stop: make(chan struct{})}
	go r.send(caller)
	return r
}

// send performs the RPCs in order. A slow or absent agent delays only
// this goroutine, never the frame clock.
func (r *Receiver) send(caller Caller) {
	for {
		select {
		case <-r.stop:
			return
		case c := <-r.calls:
			if err := caller.CallRPC(c.dest, c.method, c.payload); err != nil {
				r.log.Warn("agent rpc failed", "method", c.method, "to", c.dest, "err", err)
			}
		}
	}
}

func (r *Receiver) enqueue(c call) {
	select {
	case r.calls <- c:
	default:
		r.log.Warn("agent rpc queue full, dropped", "method", c.method)
	}
}

// Close stops sending RPCs.
func (r *Receiver) Close() { r.stopOnce.Do(func() { close(r.stop) }) }

// ErrBadFormat refuses a stream whose attributes are not PCM16 at a
// supported rate; ErrTooLong ends a stream past MaxStreamBytes;
// ErrTooManyStreams refuses a stream while MaxOpenStreams are open.
var (
	ErrBadFormat      = errors.New("agentstream: unsupported audio format")
	ErrTooLong        = errors.New("agentstream: stream longer than MaxStreamBytes")
	ErrTooManyStreams = errors.New("agentstream: too many open streams")
)

// Limits on what one session's agent may send. They bound memory and
// work whatever the sender does; a well-behaved agent never reaches them.
const (
	// MaxStreamBytes caps one stream (one segment, one agent turn): 32 MiB
	// is about 2.9 min at 48 kHz stereo, 11.6 min at 24 kHz mono. Past it
	// the segment ends where it got to and the rest is not read.
	MaxStreamBytes = 32 << 20
	// MaxOpenStreams caps the streams open at once (one plays, the others
	// wait for their turn); a further one is refused.
	MaxOpenStreams = 4
	// MaxHeld caps the audio held, across the session, by streams waiting
	// for their turn (60 s at 16 kHz, like the playout buffer's own bound):
	// such streams are read as their bytes arrive, so nothing piles up in
	// the transport, and audio past the cap is dropped.
	MaxHeld = playout.DefaultMaxBuffered
)

// SampleRates are the sample rates a stream may declare (Hz): those TTS
// engines and LiveKit Agents produce.
var SampleRates = []int{8000, 11025, 12000, 16000, 22050, 24000, 32000, 44100, 48000}

// Format is a stream's declared audio format.
type Format struct{ Rate, Channels int }

// ParseFormat reads a stream's attributes ("sample_rate", "num_channels";
// mono when the latter is absent) and refuses anything but 1 or 2
// channels at one of SampleRates.
func ParseFormat(attrs map[string]string) (Format, error) {
	rate, err1 := strconv.Atoi(attrs["sample_rate"])
	channels, err2 := strconv.Atoi(attrs["num_channels"])
	if attrs["num_channels"] == "" {
		channels, err2 = 1, nil
	}
	if err1 != nil || err2 != nil || !slices.Contains(SampleRates, rate) || channels < 1 || channels > 2 {
		return Format{}, ErrBadFormat
	}
	return Format{rate, channels}, nil
}

// StallTimeout: a stream that brought no data for this long while a newer
// one waits is abandoned (ended where it stopped), so a stalled stream
// cannot wedge the avatar.
const StallTimeout = 500 * time.Millisecond

// HandleStream reads one segment until the stream closes: Open, then play.
func (r *Receiver) HandleStream(stream io.Reader, sender string, attrs map[string]string) error {
	play, err := r.Open(sender, attrs)
	if err != nil {
		return err
	}
	return play(stream)
}

// Open takes the place of one stream from sender in the order of speech,
// after every stream opened before it, and returns play, which reads the
// stream until it closes (call it exactly once). The format is checked
// here, before anything is read.
//
// Segments play in the order they were opened: a newer stream waits for
// the previous one to close (its data may still be in flight), unless that
// one stalls. While it waits its audio is read and held (within MaxHeld).
// When the stream given to play is also an io.Closer, Close is called if
// the segment is abandoned (cleared, or superseded after a stall) so the
// transport stops buffering it; the caller should also close it once play
// returns.
func (r *Receiver) Open(sender string, attrs map[string]string) (play func(stream io.Reader) error, err error) {
	f, err := ParseFormat(attrs)
	if err != nil {
		return nil, err
	}
	seg := &segment{sender: sender, ended: make(chan struct{}), lastData: time.Now()}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.open) >= MaxOpenStreams {
		return nil, ErrTooManyStreams
	}
	prev := r.current
	r.current = seg
	r.open[seg] = true
	return func(stream io.Reader) error { return r.play(seg, prev, f, stream) }, nil
}

func (r *Receiver) play(seg, prev *segment, f Format, stream io.Reader) error {
	if c, ok := stream.(io.Closer); ok {
		r.mu.Lock()
		abandoned := seg.abandoned
		seg.cancel = func() { c.Close() }
		r.mu.Unlock()
		if abandoned { // cleared before it began
			return nil
		}
	}
	// turn closes when the previous segment has closed.
	turn := make(chan struct{})
	if prev == nil {
		close(turn)
	} else {
		go func() { r.waitFor(prev); close(turn) }()
	}
	var held []int16
	defer func() { r.unhold(len(held)) }()

	var rs *audio.Resampler
	if f.Rate != playout.SampleRate {
		rs = audio.NewResampler(f.Rate, playout.SampleRate)
	}
	frameBytes := 2 * f.Channels
	buf := make([]byte, 32<<10)
	carry := 0 // bytes of a partial sample frame kept from the last read
	total := 0
	var result error
	for {
		n, err := stream.Read(buf[carry:])
		if total += n; total > MaxStreamBytes {
			n -= total - MaxStreamBytes // keep what fits, end the segment there
			err, result = ErrTooLong, ErrTooLong
		}
		n += carry
		whole := n - n%frameBytes
		if whole > 0 {
			pcm := audio.DecodePCM16(buf[:whole], f.Channels)
			if rs != nil {
				pcm = rs.Process(pcm)
			}
			if !r.feed(seg, turn, &held, pcm) {
				return nil
			}
		}
		carry = copy(buf, buf[whole:n])
		if err != nil {
			break
		}
	}
	<-turn
	if r.pushHeld(seg, held) && rs != nil {
		r.push(seg, rs.Flush())
	}
	r.mu.Lock()
	r.closeLocked(seg)
	r.mu.Unlock()
	return result
}

// feed plays pcm once seg's turn has come (first what was held), and holds
// it until then; false means seg was abandoned and the reader should stop.
func (r *Receiver) feed(seg *segment, turn <-chan struct{}, held *[]int16, pcm []int16) bool {
	select {
	case <-turn:
		if len(*held) > 0 {
			ok := r.pushHeld(seg, *held)
			r.unhold(len(*held))
			*held = nil
			if !ok {
				return false
			}
		}
		return r.push(seg, pcm)
	default:
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if seg.abandoned {
		return false
	}
	seg.lastData = time.Now() // a waiting stream that brings data is not stalled
	k := min(len(pcm), MaxHeld-r.held)
	*held = append(*held, pcm[:k]...)
	r.held += k
	if k < len(pcm) && !seg.dropped {
		seg.dropped = true
		r.log.Warn("agent audio dropped: too much held while waiting for the previous segment", "from", seg.sender)
	}
	return true
}

// pushHeld pushes held audio in read-sized pieces, so that as much of it
// as the playout buffer has room for is kept (a push is all or nothing).
func (r *Receiver) pushHeld(seg *segment, held []int16) bool {
	for len(held) > 0 {
		k := min(len(held), 8<<10)
		if !r.push(seg, held[:k]) {
			return false
		}
		held = held[k:]
	}
	return true
}

func (r *Receiver) unhold(n int) {
	r.mu.Lock()
	r.held -= n
	r.mu.Unlock()
}

// waitFor returns once prev has closed, abandoning it if it stalls.
func (r *Receiver) waitFor(prev *segment) {
	t := time.NewTicker(StallTimeout / 5)
	defer t.Stop()
	for {
		select {
		case <-prev.ended:
			return
		case <-t.C:
			r.mu.Lock()
			if !prev.closed && time.Since(prev.lastData) > StallTimeout {
				r.log.Warn("agent audio stream stalled; a newer one replaces it", "from", prev.sender)
				r.abandonLocked(prev)
				r.closeLocked(prev)
			}
			r.mu.Unlock()
		}
	}
}

// push appends audio to the segment's utterance; false means the segment
// was abandoned and the reader should stop.
func (r *Receiver) push(seg *segment, pcm []int16) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if seg.abandoned {
		return false
	}
	seg.lastData = time.Now()
	if len(pcm) == 0 {
		return true
	}
	id, err := r.buffer.Push(pcm, time.Now())
	if err != nil {
		r.log.Warn("agent audio dropped", "err", err)
		return true
	}
	if seg.id == 0 {
		seg.id = id
		r.byID[id] = seg
	}
	seg.received += len(pcm)
	return true
}

// closeLocked ends the segment's utterance, so what it received plays out
// and then finishes. A segment that never carried audio is finished at once
// (the buffer reports nothing for it).
func (r *Receiver) closeLocked(seg *segment) {
	if seg.closed {
		return
	}
	r.markClosedLocked(seg)
	if seg.id == 0 {
		r.finishLocked(seg, 0, false)
		return
	}
	r.buffer.End()
}

// markClosedLocked records that no more audio of seg will be pushed.
func (r *Receiver) markClosedLocked(seg *segment) {
	seg.closed = true
	delete(r.open, seg)
	close(seg.ended)
}

func (r *Receiver) finishLocked(seg *segment, played int, interrupted bool) {
	if seg.done {
		return
	}
	seg.done = true
	if seg.id != 0 {
		delete(r.byID, seg.id)
	}
	// Never report more than was received.
	played = min(played, seg.received)
	payload, _ := json.Marshal(struct {
		PlaybackPosition float64 `json:"playback_position"`
		Interrupted      bool    `json:"interrupted"`
	}{float64(played) / playout.SampleRate, interrupted})
	r.enqueue(call{seg.sender, RPCPlaybackDone, string(payload)})
}

// Clear is lk.clear_buffer: queued audio is dropped now, the current
// segment is abandoned, and every segment not yet finished is reported
// interrupted (a started one with what it played, from the next frame's
// event; one that never started at once, at 0).
func (r *Receiver) Clear(caller string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for seg := range r.open {
		r.abandonLocked(seg)
		r.markClosedLocked(seg)
		if seg.id == 0 { // nothing of it reached the buffer yet
			r.finishLocked(seg, 0, true)
		}
	}
	r.buffer.Interrupt()
	for id, seg := range r.byID {
		seg.abandoned = true
		if !seg.started {
			r.finishLocked(seg, 0, true)
			delete(r.byID, id)
		}
	}
}

// Emit is the pipeline's event sink: it turns the buffer's events for
// agent segments into playback RPCs; events of other utterances (ws_uri's)
// are ignored.
func (r *Receiver) Emit(ev playout.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	seg := r.byID[ev.UtteranceID]
	if seg == nil {
		return
	}
	switch ev.Type {
	case playout.SpeechStarted:
		seg.started = true
		r.enqueue(call{seg.sender, RPCPlaybackStart, ""})
	case playout.SpeechFinished:
		r.finishLocked(seg, ev.PlayedSamples, ev.Interrupted)
	}
}
