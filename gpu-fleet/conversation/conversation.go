// Package conversation gives a hosted session's avatar a voice, ears and a
// brain, inside the renderer beside the session: it greets the person who
// joins (espeak-ng, gpu-fleet/tts), transcribes their microphone
// (pocketsphinx, gpu-fleet/stt) into captions on lk.transcription, and
// answers each finished utterance through a Brain (the `local` provider),
// speaking into the same playout buffer as every other speech source so
// lip-sync and speech events are the same. When the person starts talking
// over the avatar, the avatar stops (barge-in).
package conversation

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"avatarsvc/gpu-fleet/remoteagent"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/stt"
	"avatarsvc/gpu-fleet/tts"
)

// DefaultGreeting is spoken when the agent has no custom_greeting.
const DefaultGreeting = "Hello! It's nice to meet you. I'm listening."

const (
	// greetDelay lets the person's page subscribe to the avatar's tracks
	// before the greeting starts, so its first words are heard.
	greetDelay = time.Second
	// calibration: pocketsphinx learns the background noise over the first
	// second of a microphone and may report speech meanwhile; barge-in
	// waits until it has.
	calibration = time.Second
	// audioQueue bounds microphone audio waiting for the recogniser (20 ms
	// packets: 10 s).
	audioQueue = 500
	// agentGrace is how long a dispatched LiveKit agent may take to join
	// once the person is in the room before it is dispatched again.
	agentGrace = 10 * time.Second
	// maxRedispatch bounds the dispatches after the first one.
	maxRedispatch = 3
)

// Speaker is the session's playout buffer (*playout.Buffer).
type Speaker interface {
	Push(pcm []int16, arrived time.Time) (uint64, error)
	End() (uint64, bool)
	Interrupt() int
	Buffered() int
}

// Captioner sends transcript updates into the room (*room.Room, once
// joined).
type Captioner interface {
	Caption(c room.Caption)
	AudioTrackSID() string
}

// Brain is a voice-agent provider that runs in the renderer: it answers
// what the person said ("" for nothing to say).
type Brain interface {
	Reply(ctx context.Context, heard string) (string, error)
}

// Remote is a voice agent elsewhere that listens and speaks by itself
// (*elevenlabs.Conversation, the elevenlabs provider): the person's audio
// goes up, its speech comes back into the playout buffer, its interruption
// stops the avatar and its transcripts become captions.
type Remote interface {
	SendUserAudio(pcm []int16) error
	Events() <-chan remoteagent.Event
	Close() error
}

// remoteUtteranceGap ends the avatar's utterance when the remote agent's
// audio pauses this long (its protocol has no end-of-speech marker).
const remoteUtteranceGap = 300 * time.Millisecond

// Config sets up one conversation.
type Config struct {
	Voice      string // a shared/voices id; "" is the default voice
	Greeting   string // DefaultGreeting when empty
	Transcribe bool   // send captions of what the person says
	// Brain answers the person; nil when the session's speech comes from
	// elsewhere (a LiveKit agent, ws_uri): then there is no greeting either.
	Brain Brain
	// Remote, instead of Brain, is a remote voice agent that does its own
	// listening, greeting and speaking (the session's recogniser is then
	// not loaded). The conversation closes it.
	Remote Remote
	// Redispatch, for the livekit provider, sends the customer's agent into
	// the room again when none has joined AgentGrace after the person did
	// (up to maxRedispatch times, AgentGrace apart).
	// LiveKit's CreateDispatch can succeed and still launch no job (its
	// cache of registered agent names refreshes asynchronously: a dispatch
	// made during a refresh is dropped with "no worker is available").
	Redispatch func(ctx context.Context) error
	AgentGrace time.Duration // agentGrace when zero
	Speaker    Speaker
	Captions   Captioner
	Log        *slog.Logger
}

type micAudio struct {
	trackSID string
	pcm      []int16
}

// Conversation runs one session's conversation loop on its own goroutine.
type Conversation struct {
	cfg    Config
	log    *slog.Logger
	rec    *stt.Recognizer
	audio  chan micAudio
	joined chan struct{}
	agent  chan struct{} // closed when a voice agent is in the room
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	joinOnce   sync.Once
	agentOnce  sync.Once
	dropped    atomic.Int64 // microphone packets the loop could not take
	remoteErrs int
	track      string // the microphone being transcribed (the first one heard)
	heard      time.Duration
	speaking   bool // the avatar's last utterance may still be playing
	avatarSeg  int
	userSeg    int // remote transcripts' segments
	// what the avatar is saying: its text and the samples synthesised
	sayingText    string
	sayingSamples int
}

// Start loads the recogniser (about 100 MB and half a second; see
// gpu-fleet/stt) when there is anything to listen for, and starts the loop.
func Start(cfg Config) (*Conversation, error) {
	if cfg.Speaker == nil || cfg.Captions == nil {
		return nil, fmt.Errorf("conversation: Speaker and Captions are required")
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Greeting == "" {
		cfg.Greeting = DefaultGreeting
	}
	if cfg.AgentGrace <= 0 {
		cfg.AgentGrace = agentGrace
	}
	c := &Conversation{cfg: cfg, log: cfg.Log, audio: make(chan micAudio, audioQueue), joined: make(chan struct{}), agent: make(chan struct{}), done: make(chan struct{})}
	if cfg.Remote == nil && (cfg.Transcribe || cfg.Brain != nil) {
		rec, err := stt.New(stt.Config{})
		if err != nil {
			return nil, fmt.Errorf("conversation: speech recogniser: %w", err)
		}
		c.rec = rec
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	go c.run()
	return c, nil
}

// Close stops the loop and frees the recogniser.
func (c *Conversation) Close() {
	c.cancel()
	<-c.done
}

// UserJoined implements room.Listener: the first person to join is greeted.
func (c *Conversation) UserJoined(identity string) {
	c.joinOnce.Do(func() {
		c.log.Info("user joined", "identity", identity)
		close(c.joined)
	})
}

// HearsAudio implements room.Listener: the person's microphone is needed
// to transcribe, to answer, or to pass on to a remote agent.
func (c *Conversation) HearsAudio() bool {
	return c.rec != nil || c.cfg.Remote != nil
}

// AgentJoined implements room.Listener.
func (c *Conversation) AgentJoined(identity string) {
	c.agentOnce.Do(func() {
		c.log.Info("voice agent joined", "identity", identity)
		close(c.agent)
	})
}

// UserAudio implements room.Listener. It never blocks the track's reader:
// audio beyond the queue is dropped (and counted), which happens only when
// the box cannot keep up with recognition.
func (c *Conversation) UserAudio(identity, trackSID string, pcm []int16) {
	select {
	case c.audio <- micAudio{trackSID, pcm}:
	default:
		if n := c.dropped.Add(1); n == 1 || n%250 == 0 {
			c.log.Warn("recogniser behind, microphone audio dropped", "packets", n)
		}
	}
}

func (c *Conversation) run() {
	defer close(c.done)
	if c.rec != nil {
		defer c.rec.Close()
	}
	if c.cfg.Remote != nil {
		defer c.cfg.Remote.Close()
	}
	var greet, agentLate <-chan time.Time
	redispatched := 0
	joined := c.joined
	var remote <-chan remoteagent.Event
	if c.cfg.Remote != nil {
		remote = c.cfg.Remote.Events()
	}
	gap := time.NewTimer(time.Hour)
	gap.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case ev, ok := <-remote:
			if !ok {
				remote = nil
				c.log.Warn("the remote voice agent ended the conversation")
				continue
			}
			if c.fromRemote(ev) {
				gap.Reset(remoteUtteranceGap)
			}
		case <-gap.C:
			c.cfg.Speaker.End()
		case <-joined:
			joined = nil
			if c.cfg.Brain != nil {
				greet = time.After(greetDelay)
			}
			if c.cfg.Redispatch != nil {
				agentLate = time.After(c.cfg.AgentGrace)
			}
		case <-agentLate:
			agentLate = nil
			select {
			case <-c.agent:
				continue
			default:
			}
			redispatched++
			err := c.cfg.Redispatch(c.ctx)
			c.log.Warn("the voice agent did not join: dispatched it again", "after", c.cfg.AgentGrace, "attempt", redispatched, "err", err)
			if redispatched < maxRedispatch {
				agentLate = time.After(c.cfg.AgentGrace)
			}
		case <-greet:
			greet = nil
			c.say(c.cfg.Greeting)
		case a := <-c.audio:
			c.hear(a)
		}
	}
}

// hear feeds the recogniser, stops the avatar when the person starts
// talking over it, and captions and answers what was said.
func (c *Conversation) hear(a micAudio) {
	if c.track == "" {
		c.track = a.trackSID
	}
	if a.trackSID != c.track {
		return // one listener per session: the first microphone heard
	}
	if c.cfg.Remote != nil {
		if err := c.cfg.Remote.SendUserAudio(a.pcm); err != nil {
			if c.remoteErrs++; c.remoteErrs == 1 {
				c.log.Warn("sending audio to the remote voice agent", "err", err) // once: it ended
			}
		}
		return
	}
	if c.rec == nil {
		return
	}
	was := c.rec.InSpeech()
	results, err := c.rec.Write(a.pcm)
	if err != nil {
		c.log.Warn("recogniser", "err", err)
		return
	}
	c.heard += time.Duration(len(a.pcm)) * time.Second / stt.SampleRate
	if !was && c.rec.InSpeech() && c.heard > calibration && c.cfg.Brain != nil && c.avatarTalking() {
		dropped := c.cfg.Speaker.Interrupt()
		c.speaking = false
		c.log.Info("barge-in: the user spoke over the avatar", "dropped_samples", dropped)
		c.captionCut(dropped)
	}
	for _, r := range results {
		if c.cfg.Transcribe && r.Text != "" {
			c.cfg.Captions.Caption(room.Caption{
				TrackSID: c.track, SegmentID: fmt.Sprintf("%s-%d", c.track, r.SegmentID), Text: r.Text, Final: r.Final,
			})
		}
		if r.Final && c.cfg.Brain != nil && strings.TrimSpace(r.Text) != "" {
			reply, err := c.cfg.Brain.Reply(c.ctx, r.Text)
			if err != nil {
				c.log.Warn("voice agent reply", "err", err)
				continue
			}
			c.say(reply)
		}
	}
}

// fromRemote applies one event of the remote agent; it reports whether the
// event was speech (which keeps the avatar's utterance open).
func (c *Conversation) fromRemote(ev remoteagent.Event) bool {
	switch ev.Kind {
	case remoteagent.AgentAudio:
		if _, err := c.cfg.Speaker.Push(ev.PCM, time.Now()); err != nil {
			c.log.Warn("remote agent audio", "err", err)
		}
		return true
	case remoteagent.Interruption:
		c.cfg.Speaker.Interrupt()
	case remoteagent.AgentResponse:
		if track := c.cfg.Captions.AudioTrackSID(); track != "" {
			c.avatarSeg++
			c.cfg.Captions.Caption(room.Caption{TrackSID: track, SegmentID: fmt.Sprintf("avatar-%d", c.avatarSeg), Text: ev.Text, Final: true})
		}
	case remoteagent.TentativeUserTranscript, remoteagent.UserTranscript:
		if c.cfg.Transcribe && c.track != "" {
			final := ev.Kind == remoteagent.UserTranscript
			c.cfg.Captions.Caption(room.Caption{TrackSID: c.track, SegmentID: fmt.Sprintf("%s-remote-%d", c.track, c.userSeg), Text: ev.Text, Final: final})
			if final {
				c.userSeg++
			}
		}
	}
	return false
}

func (c *Conversation) avatarTalking() bool {
	return c.speaking && c.cfg.Speaker.Buffered() > 0
}

// say speaks text in the avatar's voice: synthesised in chunks straight
// into the playout buffer (espeak-ng runs hundreds of times faster than
// real time), captioned as the avatar's own track.
func (c *Conversation) say(text string) {
	text = strings.TrimSpace(text)
	if text == "" {
		return
	}
	c.avatarSeg++
	if track := c.cfg.Captions.AudioTrackSID(); track != "" {
		c.cfg.Captions.Caption(room.Caption{TrackSID: track, SegmentID: fmt.Sprintf("avatar-%d", c.avatarSeg), Text: text, Final: true})
	}
	pushed := false
	c.sayingText, c.sayingSamples = text, 0
	err := tts.Synthesize(c.ctx, text, c.cfg.Voice, func(pcm []int16) error {
		_, err := c.cfg.Speaker.Push(pcm, time.Now())
		if err == nil {
			pushed = true
			c.sayingSamples += len(pcm)
		}
		return err
	})
	if pushed {
		c.cfg.Speaker.End()
		c.speaking = true
	}
	if err != nil && c.ctx.Err() == nil {
		c.log.Warn("speech synthesis", "err", err, "voice", c.cfg.Voice)
	}
}

// captionCut replaces the interrupted answer's caption with the part that
// was spoken (by the share of its audio that played), as LiveKit's own
// agents truncate theirs, so the captions show what the visitor heard.
func (c *Conversation) captionCut(dropped int) {
	track := c.cfg.Captions.AudioTrackSID()
	if track == "" || c.sayingSamples == 0 {
		return
	}
	words := strings.Fields(c.sayingText)
	played := max(0, c.sayingSamples-dropped)
	keep := len(words) * played / c.sayingSamples
	c.cfg.Captions.Caption(room.Caption{TrackSID: track, SegmentID: fmt.Sprintf("avatar-%d", c.avatarSeg),
		Text: strings.Join(words[:keep], " ") + "…", Final: true})
}

// Local is the `local` voice-agent provider: an offline demo partner that
// answers each utterance by repeating back what it understood. It exists
// so the whole loop (greeting, listening, captions, replies, barge-in) can
// be seen and tested without any network.
type Local struct{}

// Reply repeats what was heard.
func (Local) Reply(_ context.Context, heard string) (string, error) {
	heard = strings.TrimSpace(heard)
	if heard == "" {
		return "", nil
	}
	return "I heard you say: " + heard + ".", nil
}
