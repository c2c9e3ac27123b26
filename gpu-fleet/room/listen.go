package room

import (
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/pion/webrtc/v4"

	"avatarsvc/gpu-fleet/encode/opus"
)

// Listener hears the people in the room (not agents, not the avatar): it
// learns who joined and gets their microphones as 16 kHz mono PCM, for
// transcription and for the avatar's own voice agent.
type Listener interface {
	UserJoined(identity string)
	// AgentJoined: a voice agent (a participant of kind agent other than
	// the avatar) is in the room.
	AgentJoined(identity string)
	// HearsAudio: whether to subscribe to the people's microphones at all.
	HearsAudio() bool
	// UserAudio gets 20 ms of decoded audio from one microphone track. It
	// is called from that track's reader goroutine: do not block it.
	UserAudio(identity, trackSID string, pcm []int16)
}

// listenSampleRate is what Listener gets; libopus decodes to it directly.
const listenSampleRate = 16000

// TranscriptionTopic is the text-stream topic LiveKit frontends read
// transcripts from, with the attributes below.
const (
	TranscriptionTopic = "lk.transcription"
	attrTrackID        = "lk.transcribed_track_id"
	attrSegmentID      = "lk.segment_id"
	attrFinal          = "lk.transcription_final"
)

// Caption is one transcript update: interim ones for a segment are
// replaced by later ones with the same SegmentID, until the final one.
type Caption struct {
	TrackSID  string // the transcribed audio track (a user's mic, or the avatar's own)
	SegmentID string
	Text      string
	Final     bool
}

// isUser tells the people from agents and the avatar itself.
func isUser(p *lksdk.RemoteParticipant) bool {
	return p.Identity() != AgentIdentity && p.Kind() == lksdk.ParticipantStandard
}

// listen wires cb so that the people's microphones reach l.
func (r *Room) listen(cb *lksdk.RoomCallback, l Listener) {
	cb.OnParticipantConnected = chain(cb.OnParticipantConnected, func(p *lksdk.RemoteParticipant) {
		switch {
		case isUser(p):
			l.UserJoined(p.Identity())
		case isAgent(p):
			l.AgentJoined(p.Identity())
		}
	})
	if !l.HearsAudio() {
		return
	}
	cb.OnTrackPublished = func(pub *lksdk.RemoteTrackPublication, p *lksdk.RemoteParticipant) {
		r.subscribeMic(pub, p)
	}
	cb.OnTrackSubscribed = func(track *webrtc.TrackRemote, pub *lksdk.RemoteTrackPublication, p *lksdk.RemoteParticipant) {
		if track.Kind() != webrtc.RTPCodecTypeAudio || !isUser(p) {
			return
		}
		go r.readMic(track, p.Identity(), pub.SID(), l)
	}
}

// isAgent tells voice agents from people and from the avatar itself.
func isAgent(p *lksdk.RemoteParticipant) bool {
	return p.Identity() != AgentIdentity && p.Kind() == lksdk.ParticipantAgent
}

// listenToPresent covers whoever was in the room before we joined.
func (r *Room) listenToPresent(l Listener) {
	for _, p := range r.lk.GetRemoteParticipants() {
		if isAgent(p) {
			l.AgentJoined(p.Identity())
		}
		if !isUser(p) {
			continue
		}
		l.UserJoined(p.Identity())
		if !l.HearsAudio() {
			continue
		}
		for _, pub := range p.TrackPublications() {
			if rp, ok := pub.(*lksdk.RemoteTrackPublication); ok {
				r.subscribeMic(rp, p)
			}
		}
	}
}

func (r *Room) subscribeMic(pub *lksdk.RemoteTrackPublication, p *lksdk.RemoteParticipant) {
	if !isUser(p) || pub.Kind() != lksdk.TrackKindAudio || pub.Source() != livekit.TrackSource_MICROPHONE || pub.IsSubscribed() {
		return
	}
	if err := pub.SetSubscribed(true); err != nil {
		r.log.Warn("subscribe to microphone", "identity", p.Identity(), "track_sid", pub.SID(), "err", err)
	}
}

// readMic decodes one microphone track until it ends.
func (r *Room) readMic(track *webrtc.TrackRemote, identity, trackSID string, l Listener) {
	dec, err := opus.NewDecoder(listenSampleRate, 1)
	if err != nil {
		r.log.Error("microphone decoder", "err", err)
		return
	}
	defer dec.Close()
	r.log.Info("listening to microphone", "identity", identity, "track_sid", trackSID)
	for {
		pkt, _, err := track.ReadRTP()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				r.log.Info("microphone track ended", "identity", identity, "err", err)
			}
			return
		}
		if len(pkt.Payload) == 0 {
			continue
		}
		pcm, err := dec.Decode(pkt.Payload)
		if err != nil {
			continue // one bad packet; the next decodes on its own
		}
		l.UserAudio(identity, trackSID, pcm)
	}
}

// AudioTrackSID is the avatar's own audio track, which captions of its
// speech refer to.
func (r *Room) AudioTrackSID() string {
	for _, pub := range r.lk.LocalParticipant.TrackPublications() {
		if pub.Kind() == lksdk.TrackKindAudio {
			return pub.SID()
		}
	}
	return ""
}

// Caption queues a transcript update for the room. Updates go out in
// order from one goroutine (sending a text stream waits on the data
// channel); when they back up, interim updates are dropped, finals never.
func (r *Room) Caption(c Caption) {
	select {
	case r.captions <- c:
		return
	default:
	}
	if !c.Final {
		return
	}
	select {
	case r.captions <- c:
	case <-r.done:
	}
}

func (r *Room) sendCaptions() {
	for {
		select {
		case c := <-r.captions:
			start := time.Now()
			r.lk.LocalParticipant.SendText(c.Text, lksdk.StreamTextOptions{
				Topic: TranscriptionTopic,
				Attributes: map[string]string{
					attrTrackID: c.TrackSID, attrSegmentID: c.SegmentID, attrFinal: strconv.FormatBool(c.Final),
				},
			})
			if d := time.Since(start); d > time.Second {
				r.log.Warn("caption send was slow", "took", d)
			}
		case <-r.done:
			return
		}
	}
}

func chain[F func(*lksdk.RemoteParticipant)](a, b F) F {
	if a == nil {
		return b
	}
	return func(p *lksdk.RemoteParticipant) { a(p); b(p) }
}
