package rendersession

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"avatarsvc/gpu-fleet/playout"
	"avatarsvc/gpu-fleet/render"
)

const (
	// FrameDuration paces video at 25 fps.
	FrameDuration = playout.FrameDuration
	// OpusInputRate is the rate the Opus encoder takes: the playout's own
	// 16 kHz. libopus encodes it directly, so no resampler sits in the
	// per-frame path; the RTP clock of WebRTC Opus stays 48 kHz (the room
	// track derives it from each packet's 20 ms duration).
	OpusInputRate = playout.SampleRate
	// AudioPacketSamples is one 20 ms Opus packet at OpusInputRate.
	AudioPacketSamples = OpusInputRate / 50
	// DefaultLateThreshold: a frame written more than half a frame after
	// its scheduled time counts as late.
	DefaultLateThreshold = FrameDuration / 2
	// DefaultMaxBacklog: a clock further behind than this (the process was
	// stalled) skips ahead instead of bursting frames to catch up. No audio
	// is lost: playout only advances when a frame is produced.
	DefaultMaxBacklog = 500 * time.Millisecond

	latencyWindow = 8192 // latency samples kept for percentiles
)

// Renderer draws the avatar for one frame of 16 kHz audio.
type Renderer interface {
	Render(pcm []int16, dst *render.Frame) error
	Size() (width, height int)
}

// MouthResetter is implemented by renderers that smooth mouth motion over
// several frames. The pipeline calls ResetMouth before the first frame after
// an interrupt, so the mouth is at rest within one frame instead of closing
// gradually.
type MouthResetter interface {
	ResetMouth()
}

// VideoEncoder turns frames into VP8 packets.
type VideoEncoder interface {
	Encode(f *render.Frame, forceKeyframe bool) (packet []byte, keyframe bool, err error)
}

// AudioEncoder turns 20 ms of 16 kHz mono PCM into one Opus packet.
type AudioEncoder interface {
	Encode(pcm []int16) ([]byte, error)
}

// Publisher sends encoded media to the room. *room.Room implements it.
type Publisher interface {
	WriteVideo(frame []byte, at time.Time) error
	WriteAudio(packet []byte, at time.Time) error
	KeyframeRequested() bool
}

// EventSink receives speech events once the frame completing them is
// sent. *audiows.Endpoint implements it.
type EventSink interface {
	Emit(ev playout.Event)
}

// PipelineConfig wires one pipeline.
type PipelineConfig struct {
	Buffer    *playout.Buffer
	Renderer  Renderer
	Video     VideoEncoder
	Audio     AudioEncoder
	Publisher Publisher
	Events    EventSink // may be nil
	Logger    *slog.Logger

	LateThreshold time.Duration // DefaultLateThreshold when zero
	MaxBacklog    time.Duration // DefaultMaxBacklog when zero
	// Now is the clock (time.Now when nil); tests fake it.
	Now func() time.Time
}

// Stats are a pipeline's counters since it started.
type Stats struct {
	Frames         uint64
	SpeakingFrames uint64
	LateFrames     uint64        // written later than LateThreshold after schedule
	MaxLateness    time.Duration // worst lateness of any frame
	Resyncs        uint64        // times the clock skipped ahead after a stall
	Keyframes      uint64
	WriteErrors    uint64
	// Busy is the time spent rendering, encoding and writing.
	Busy time.Duration
	// MaxAVSkew is the largest gap between writing a frame's video and
	// writing its audio (see the package doc on A/V sync).
	MaxAVSkew time.Duration
	// Underruns counts frames in which an utterance under way ran out of
	// audio (playout.Frame.Underrun).
	Underruns uint64
	// Bytes is what was written: encoded video and audio.
	Bytes uint64
	// FirstFrameAt is when the first frame was written.
	FirstFrameAt time.Time
}

// Pipeline turns queued audio into published frames, one per tick: take
// 640 samples from playout, render, encode VP8, write the frame, then
// encode the same 640 samples as two 20 ms Opus packets and
// write them, then emit the speech events the frame completed.
type Pipeline struct {
	cfg   PipelineConfig
	log   *slog.Logger
	now   func() time.Time
	pcm   []int16
	frame *render.Frame

	mu        sync.Mutex
	stats     Stats
	latencies []time.Duration // ring of audio-in -> encoded-frame latencies
	latNext   int
}

// NewPipeline checks cfg and returns a pipeline ready to Step or Run.
func NewPipeline(cfg PipelineConfig) (*Pipeline, error) {
	if cfg.Buffer == nil || cfg.Renderer == nil || cfg.Video == nil || cfg.Audio == nil || cfg.Publisher == nil {
		return nil, fmt.Errorf("session: pipeline needs Buffer, Renderer, Video, Audio and Publisher")
	}
	if cfg.LateThreshold <= 0 {
		cfg.LateThreshold = DefaultLateThreshold
	}
	if cfg.MaxBacklog <= 0 {
		cfg.MaxBacklog = DefaultMaxBacklog
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w, h := cfg.Renderer.Size()
	return &Pipeline{
		cfg:   cfg,
		log:   cfg.Logger,
		now:   cfg.Now,
		pcm:   make([]int16, playout.FrameSamples),
		frame: render.NewFrame(w, h),
	}, nil
}

// Step produces the frame scheduled at scheduled. Render and encode
// failures are returned; write failures are counted and logged, because
// the SDK reconnects underneath and publishing resumes.
func (p *Pipeline) Step(scheduled time.Time) error {
	began := p.now()
	frame := p.cfg.Buffer.Next(p.pcm)

	if frame.Interrupted {
		if r, ok := p.cfg.Renderer.(MouthResetter); ok {
			r.ResetMouth()
		}
	}
	if err := p.cfg.Renderer.Render(p.pcm, p.frame); err != nil {
		return fmt.Errorf("session: render: %w", err)
	}
	forceKey := p.cfg.Publisher.KeyframeRequested()
	packet, keyframe, err := p.cfg.Video.Encode(p.frame, forceKey)
	if err != nil {
		return fmt.Errorf("session: encode video: %w", err)
	}
	encoded := p.now()
	writeErrs := 0
	if err := p.cfg.Publisher.WriteVideo(packet, scheduled); err != nil {
		writeErrs++
		p.logWriteError("video", err)
	}
	videoWritten := p.now()

	// Audio leaves right behind the video showing it, stamped with the
	// same scheduled time, so receivers line them up (A/V offset is the
	// gap between the two writes). A frame's 640 samples are exactly two
	// 20 ms packets.
	audioAt := scheduled
	var audioWritten time.Time
	var audioBytes uint64
	for off := 0; off+AudioPacketSamples <= len(p.pcm); off += AudioPacketSamples {
		opus, err := p.cfg.Audio.Encode(p.pcm[off : off+AudioPacketSamples])
		if err != nil {
			return fmt.Errorf("session: encode audio: %w", err)
		}
		audioBytes += uint64(len(opus))
		if err := p.cfg.Publisher.WriteAudio(opus, audioAt); err != nil {
			writeErrs++
			p.logWriteError("audio", err)
		}
		if audioWritten.IsZero() {
			audioWritten = p.now()
		}
		audioAt = audioAt.Add(20 * time.Millisecond)
	}
	done := p.now()

	// The frame and its audio are out: now the events it completed are true.
	if p.cfg.Events != nil {
		for _, ev := range frame.Events {
			p.cfg.Events.Emit(ev)
		}
	}

	lateness := done.Sub(scheduled)
	p.mu.Lock()
	s := &p.stats
	s.Frames++
	if frame.Speaking {
		s.SpeakingFrames++
	}
	if keyframe {
		s.Keyframes++
	}
	s.WriteErrors += uint64(writeErrs)
	s.Bytes += uint64(len(packet)) + audioBytes
	if frame.Underrun {
		s.Underruns++
	}
	if s.FirstFrameAt.IsZero() {
		s.FirstFrameAt = videoWritten
	}
	if lateness > p.cfg.LateThreshold {
		s.LateFrames++
	}
	s.MaxLateness = max(s.MaxLateness, lateness)
	s.Busy += done.Sub(began)
	if !audioWritten.IsZero() {
		s.MaxAVSkew = max(s.MaxAVSkew, audioWritten.Sub(videoWritten))
	}
	for _, arrived := range frame.ChunkArrivals {
		p.recordLatencyLocked(encoded.Sub(arrived))
	}
	p.mu.Unlock()
	return nil
}

func (p *Pipeline) recordLatencyLocked(d time.Duration) {
	if len(p.latencies) < latencyWindow {
		p.latencies = append(p.latencies, d)
		return
	}
	p.latencies[p.latNext] = d
	p.latNext = (p.latNext + 1) % latencyWindow
}

func (p *Pipeline) logWriteError(kind string, err error) {
	p.mu.Lock()
	n := p.stats.WriteErrors
	p.mu.Unlock()
	// The first errors matter; a disconnected room would otherwise log
	// 75 lines a second.
	if n < 10 || n%250 == 0 {
		p.log.Warn("write sample failed", "kind", kind, "err", err, "write_errors", n+1)
	}
}

// Stats returns a snapshot of the counters.
func (p *Pipeline) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Latencies returns the recent audio-in -> encoded-frame latencies: for
// each chunk pushed into playout, the time from its arrival to the moment
// the frame showing its first sample was encoded.
func (p *Pipeline) Latencies() []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.latencies)
}

// Run paces Step at 25 fps until ctx is done or a step fails. Frame n is
// scheduled at start + n*40ms: when a frame runs late the next ones are
// produced at once until the schedule is met again (no drift), and a
// backlog beyond MaxBacklog skips the schedule ahead (a Resync) rather
// than bursting.
func (p *Pipeline) Run(ctx context.Context) error {
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	start := p.now()
	for n := int64(0); ; n++ {
		scheduled := start.Add(time.Duration(n) * FrameDuration)
		if wait := scheduled.Sub(p.now()); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
			}
		} else {
			select {
			case <-ctx.Done():
				return nil
			default:
			}
			if behind := -wait; behind > p.cfg.MaxBacklog {
				skipped := int64(behind / FrameDuration)
				n += skipped
				scheduled = start.Add(time.Duration(n) * FrameDuration)
				p.mu.Lock()
				p.stats.Resyncs++
				p.mu.Unlock()
				p.log.Warn("frame clock stalled, skipping ahead", "behind", behind, "frames_skipped", skipped)
			}
		}
		if err := p.Step(scheduled); err != nil {
			return err
		}
	}
}
