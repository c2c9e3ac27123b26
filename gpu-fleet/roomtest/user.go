package roomtest

import (
	"sync"
	"time"

	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"avatarsvc/gpu-fleet/encode/opus"
	"avatarsvc/gpu-fleet/room"
)

// Caption is one lk.transcription text stream as a viewer received it.
type Caption struct {
	At        time.Time
	From      string // the sending participant
	TrackID   string // lk.transcribed_track_id
	SegmentID string
	Text      string
	Final     bool
}

// Captions collects the room's lk.transcription text streams from now on.
type Captions struct {
	mu   sync.Mutex
	list []Caption
}

// ListenCaptions registers the viewer for transcripts.
func (v *Viewer) ListenCaptions() *Captions {
	v.t.Helper()
	c := &Captions{}
	err := v.Room.RegisterTextStreamHandler(room.TranscriptionTopic, func(r *lksdk.TextStreamReader, from string) {
		text := r.ReadAll()
		a := r.Info.Attributes
		c.mu.Lock()
		c.list = append(c.list, Caption{At: time.Now(), From: from, TrackID: a["lk.transcribed_track_id"],
			SegmentID: a["lk.segment_id"], Text: text, Final: a["lk.transcription_final"] == "true"})
		c.mu.Unlock()
	})
	if err != nil {
		v.t.Fatal(err)
	}
	return c
}

// All returns the captions so far, oldest first.
func (c *Captions) All() []Caption {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Caption(nil), c.list...)
}

// Mic is a microphone track the viewer publishes, as a person's page does.
type Mic struct {
	t     T
	track *lksdk.LocalSampleTrack
	enc   *opus.Encoder
	SID   string
}

// PublishMic publishes a microphone track for the viewer.
func (v *Viewer) PublishMic() *Mic {
	v.t.Helper()
	track, err := lksdk.NewLocalSampleTrack(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2})
	if err != nil {
		v.t.Fatal(err)
	}
	pub, err := v.Room.LocalParticipant.PublishTrack(track, &lksdk.TrackPublicationOptions{Name: "microphone", Source: livekit.TrackSource_MICROPHONE})
	if err != nil {
		v.t.Fatal(err)
	}
	enc, err := opus.NewEncoder(16000, 1)
	if err != nil {
		v.t.Fatal(err)
	}
	v.t.Cleanup(enc.Close)
	return &Mic{t: v.t, track: track, enc: enc, SID: pub.SID()}
}

// Play sends 16 kHz mono pcm in real time (20 ms Opus packets on a ticker)
// and returns when it has all gone out.
func (m *Mic) Play(pcm []int16) {
	const frame = 320 // 20 ms
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	buf := make([]int16, frame)
	for i := 0; i < len(pcm); i += frame {
		clear(buf)
		copy(buf, pcm[i:min(i+frame, len(pcm))])
		pkt, err := m.enc.Encode(buf)
		if err != nil {
			m.t.Fatal(err)
		}
		if err := m.track.WriteSample(media.Sample{Data: pkt, Duration: 20 * time.Millisecond}, nil); err != nil {
			m.t.Fatal(err)
		}
		<-tick.C
	}
}

// Silence is d of 16 kHz silence.
func Silence(d time.Duration) []int16 { return make([]int16, int(d.Seconds()*16000)) }
