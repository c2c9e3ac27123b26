// Package playout holds the audio an avatar is about to speak and hands it
// out one video frame at a time.
//
// The session's frame clock calls Next once per 40 ms frame. Next always
// fills exactly FrameSamples samples (silence when nothing is queued) and
// returns the speech events that this frame completes. The session emits
// those events only after the frame (and its audio) has been written to the
// room, which is what makes "speech finished" exact: it is reported when the
// last frame carrying the utterance's audio has been sent, never when the
// audio was merely buffered.
//
// Audio is grouped into utterances. Audio pushed while no utterance is open
// opens a new one; End closes it. An utterance never shares a frame with the
// next one: its last frame is padded with silence, so every frame belongs to
// at most one utterance and its events are unambiguous.
package playout

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

const (
	// SampleRate is the rate of all audio held here (Hz).
	SampleRate = 16000
	// FrameDuration is one video frame at 25 fps.
	FrameDuration = 40 * time.Millisecond
	// FrameSamples is the audio that one video frame shows.
	FrameSamples = SampleRate * int(FrameDuration/time.Millisecond) / 1000
	// DefaultMaxBuffered bounds queued audio so a client cannot grow a
	// session's memory without limit (60 s is about 1.9 MB of PCM).
	DefaultMaxBuffered = 60 * SampleRate
)

// ErrBufferFull is returned by Push when the audio would exceed the bound.
var ErrBufferFull = errors.New("playout: audio buffer full")

// EventType says what happened to an utterance.
type EventType int

const (
	// SpeechStarted: the first frame carrying the utterance's audio was sent.
	SpeechStarted EventType = iota + 1
	// SpeechFinished: the last frame carrying the utterance's audio was sent,
	// or the utterance was interrupted after it had started.
	SpeechFinished
)

func (t EventType) String() string {
	switch t {
	case SpeechStarted:
		return "speech_started"
	case SpeechFinished:
		return "speech_finished"
	}
	return fmt.Sprintf("EventType(%d)", int(t))
}

// Event reports a change in what the avatar is saying.
type Event struct {
	Type        EventType
	UtteranceID uint64
	// PlayedSamples counts the utterance's samples (at SampleRate) sent so
	// far; for SpeechFinished it is everything that was played.
	PlayedSamples int
	// Interrupted is true on a SpeechFinished caused by Interrupt.
	Interrupted bool
}

// Played is PlayedSamples as a duration.
func (e Event) Played() time.Duration {
	return time.Duration(e.PlayedSamples) * time.Second / SampleRate
}

// Frame is what Next hands out for one video frame.
type Frame struct {
	// Speaking is true when the frame carries utterance audio (possibly
	// padded with silence at the end of an utterance).
	Speaking bool
	// Interrupted is true on the first frame after Interrupt: a renderer
	// that smooths mouth motion should snap to rest on it.
	Interrupted bool
	// Underrun is true when an utterance under way (started, not ended)
	// had less than a frame of audio: the listener hears a gap.
	Underrun bool
	// Events complete with this frame; deliver them after the frame is sent.
	Events []Event
	// ChunkArrivals holds the arrival time of every pushed chunk whose first
	// sample is in this frame; the session measures audio-in to
	// encoded-frame latency from them.
	ChunkArrivals []time.Time
}

type chunkMark struct {
	offset  int // index of the chunk's first sample within the utterance
	arrived time.Time
}

type utterance struct {
	id      uint64
	pending []int16 // audio not yet handed out; played audio is sliced off
	played  int     // samples handed out so far
	ended   bool
	started bool
	chunks  []chunkMark // chunks whose first sample has not been handed out
}

func (u *utterance) remaining() int { return len(u.pending) }

// Buffer is safe for one consumer calling Next and any number of producers
// calling Push, End and Interrupt.
type Buffer struct {
	mu          sync.Mutex
	maxBuffered int
	queue       []*utterance // oldest first; the last one may be open
	buffered    int          // samples queued and not yet handed out
	nextID      uint64
	pending     []Event // events that the next frame delivers (interrupts)
	interrupted bool    // Interrupt was called since the last frame

	// reused between calls to Next so that the frame clock does not allocate
	events   []Event
	arrivals []time.Time
}

// New returns a Buffer that holds at most maxBuffered samples
// (DefaultMaxBuffered when maxBuffered <= 0).
func New(maxBuffered int) *Buffer {
	if maxBuffered <= 0 {
		maxBuffered = DefaultMaxBuffered
	}
	return &Buffer{maxBuffered: maxBuffered}
}

// Push appends 16 kHz samples to the open utterance, opening one if needed,
// and returns its id. It copies pcm.
func (b *Buffer) Push(pcm []int16, arrived time.Time) (uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buffered+len(pcm) > b.maxBuffered {
		return 0, fmt.Errorf("%w: %d samples queued, %d more would exceed %d (%s)",
			ErrBufferFull, b.buffered, len(pcm), b.maxBuffered,
			time.Duration(b.maxBuffered)*time.Second/SampleRate)
	}
	u := b.openLocked()
	if u == nil {
		b.nextID++
		u = &utterance{id: b.nextID}
		b.queue = append(b.queue, u)
	}
	if len(pcm) > 0 {
		u.chunks = append(u.chunks, chunkMark{offset: u.played + len(u.pending), arrived: arrived})
		// append copies only the unplayed part when it grows the array, so
		// a long streamed utterance does not pin audio already played.
		u.pending = append(u.pending, pcm...)
		b.buffered += len(pcm)
	}
	return u.id, nil
}

// End closes the open utterance so that it finishes once played out. It
// reports false when no utterance is open.
func (b *Buffer) End() (uint64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	u := b.openLocked()
	if u == nil {
		return 0, false
	}
	u.ended = true
	return u.id, true
}

// Interrupt drops all queued audio so that the next frame is silent. An
// utterance that had started finishes (Interrupted) with the next frame;
// queued utterances that never started are dropped without events. It
// returns the number of samples dropped.
func (b *Buffer) Interrupt() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	dropped := b.buffered
	for _, u := range b.queue {
		if u.started {
			b.pending = append(b.pending, Event{
				Type:          SpeechFinished,
				UtteranceID:   u.id,
				PlayedSamples: u.played,
				Interrupted:   true,
			})
		}
	}
	clear(b.queue)
	b.queue = b.queue[:0]
	b.buffered = 0
	b.interrupted = true
	return dropped
}

// Buffered returns the samples queued and not yet handed out.
func (b *Buffer) Buffered() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buffered
}

// Next fills dst (len FrameSamples) with the next frame's audio. The
// returned Frame's slices are valid until the next call.
func (b *Buffer) Next(dst []int16) Frame {
	if len(dst) != FrameSamples {
		panic(fmt.Sprintf("playout: Next needs %d samples, got %d", FrameSamples, len(dst)))
	}
	b.mu.Lock()
	defer b.mu.Unlock()

	b.events = append(b.events[:0], b.pending...)
	b.pending = b.pending[:0]
	b.arrivals = b.arrivals[:0]

	// An ended utterance with nothing left (it ran dry before End came)
	// finished with the frame already sent; report it now.
	for len(b.queue) > 0 && b.queue[0].ended && b.queue[0].remaining() == 0 {
		b.finishHeadLocked()
	}

	frame := Frame{Interrupted: b.interrupted}
	b.interrupted = false
	n := 0
	if len(b.queue) > 0 {
		u := b.queue[0]
		n = copy(dst, u.pending)
		if n > 0 {
			frame.Speaking = true
			if !u.started {
				u.started = true
				b.events = append(b.events, Event{Type: SpeechStarted, UtteranceID: u.id})
			}
			end := u.played + n
			k := 0
			for k < len(u.chunks) && u.chunks[k].offset < end {
				b.arrivals = append(b.arrivals, u.chunks[k].arrived)
				k++
			}
			u.chunks = u.chunks[k:]
			u.pending = u.pending[n:]
			u.played = end
			b.buffered -= n
		}
		frame.Underrun = u.started && !u.ended && n < FrameSamples
		if u.ended && u.remaining() == 0 {
			b.finishHeadLocked()
		}
	}
	clear(dst[n:])

	frame.Events = b.events
	frame.ChunkArrivals = b.arrivals
	return frame
}

func (b *Buffer) finishHeadLocked() {
	u := b.queue[0]
	if u.started {
		b.events = append(b.events, Event{
			Type:          SpeechFinished,
			UtteranceID:   u.id,
			PlayedSamples: u.played,
		})
	}
	b.queue[0] = nil
	b.queue = b.queue[1:]
}

func (b *Buffer) openLocked() *utterance {
	if len(b.queue) == 0 {
		return nil
	}
	if u := b.queue[len(b.queue)-1]; !u.ended {
		return u
	}
	return nil
}
