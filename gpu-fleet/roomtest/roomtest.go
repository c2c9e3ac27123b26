// Package roomtest holds test helpers shared by the renderer's integration
// tests: a real LiveKit participant that subscribes to the avatar, decodes
// its VP8 and Opus and measures the mouth in every frame, and a ws_uri
// client. Only tests import it.
package roomtest

import (
	"encoding/json"
	"fmt"
	"image"
	"os"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/samplebuilder"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/encode/opus"
	"avatarsvc/gpu-fleet/encode/vp8"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/testfiles"
	"avatarsvc/shared/avatarimage"
)

// T is what the helpers need of a *testing.T; benchmarks commands pass their
// own (see scripts/startbench).
type T interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// Liveness bounds how long a helper waits for something that must happen;
// it never asserts speed.
const Liveness = 20 * time.Second

// Mouth thresholds on Frame.Mouth, calibrated on the test face with the CPU
// renderer: at or above MouthMoving the mouth is visibly open; at or below
// MouthAtRest it is closed (idle head motion stays under it).
const (
	MouthMoving = 22.0
	MouthAtRest = 16.0
)

// PanicT lets the helpers run outside a test (benchmark commands): a
// failure panics.
type PanicT struct{}

func (PanicT) Helper()                        {}
func (PanicT) Fatal(args ...any)              { panic(fmt.Sprint(args...)) }
func (PanicT) Fatalf(format string, a ...any) { panic(fmt.Sprintf(format, a...)) }
func (PanicT) Cleanup(func())                 {}

// Frame is one decoded video frame as a viewer saw it.
type Frame struct {
	At    time.Time
	Mouth float64 // mean |Y - still image| over the mouth rectangle
}

// viewer is a real participant that subscribes to the avatar, depacketizes
// and decodes its VP8 and Opus, and measures the mouth in every frame.
type Viewer struct {
	t     T
	Room  *lksdk.Room
	rest  *render.Frame
	mouth image.Rectangle

	mu          sync.Mutex
	frames      []Frame
	audioPkts   int
	loudPkts    int
	decodeFails int
	loudAt      []time.Time // arrival of each audio packet with speech energy
	width       int
	height      int
	data        map[string][][]byte // the avatar's data packets by topic
}

// JoinViewer joins the room at url with token as a viewer of the avatar av.
func JoinViewer(t T, url, token string, av *avatarimage.Prepared) *Viewer {
	t.Helper()
	rest := render.NewFrame(av.Image.Rect.Dx(), av.Image.Rect.Dy())
	render.RGBAToI420(av.Image, rest)
	v := &Viewer{t: t, rest: rest, mouth: av.Mouth}
	cb := lksdk.NewRoomCallback()
	cb.OnTrackSubscribed = func(track *webrtc.TrackRemote, _ *lksdk.RemoteTrackPublication, rp *lksdk.RemoteParticipant) {
		if rp.Identity() != room.AgentIdentity {
			return
		}
		switch track.Kind() {
		case webrtc.RTPCodecTypeVideo:
			go v.readVideo(track)
		case webrtc.RTPCodecTypeAudio:
			go v.readAudio(track)
		}
	}
	cb.OnDataPacket = func(p lksdk.DataPacket, params lksdk.DataReceiveParams) {
		if ud, ok := p.(*lksdk.UserDataPacket); ok && params.SenderIdentity == room.AgentIdentity {
			v.mu.Lock()
			v.data[ud.Topic] = append(v.data[ud.Topic], ud.Payload)
			v.mu.Unlock()
		}
	}
	v.data = map[string][][]byte{}
	lkr, err := lksdk.ConnectToRoomWithToken(url, token, cb)
	if err != nil {
		t.Fatalf("viewer join: %v", err)
	}
	v.Room = lkr
	return v
}

// Data is what the avatar sent on topic as data packets, oldest first.
func (v *Viewer) Data(topic string) [][]byte {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([][]byte(nil), v.data[topic]...)
}

func (v *Viewer) readVideo(track *webrtc.TrackRemote) {
	sb := samplebuilder.New(128, &codecs.VP8Packet{}, 90000)
	dec, err := vp8.NewDecoder()
	if err != nil {
		panic(err)
	}
	defer dec.Close()
	for {
		pkt, _, err := track.ReadRTP()
		if err != nil {
			return
		}
		sb.Push(pkt)
		for s := sb.Pop(); s != nil; s = sb.Pop() {
			frame, err := dec.Decode(s.Data)
			now := time.Now()
			v.mu.Lock()
			if err != nil || frame == nil {
				v.decodeFails++ // frames before the first keyframe
			} else {
				v.width, v.height = frame.Width, frame.Height
				v.frames = append(v.frames, Frame{At: now, Mouth: v.mouthDiff(frame)})
			}
			v.mu.Unlock()
		}
	}
}

func (v *Viewer) mouthDiff(f *render.Frame) float64 {
	if f.Width != v.rest.Width || f.Height != v.rest.Height {
		return -1
	}
	sum, n := 0, 0
	for y := v.mouth.Min.Y; y < v.mouth.Max.Y; y++ {
		for x := v.mouth.Min.X; x < v.mouth.Max.X; x++ {
			d := int(f.Y[y*f.Width+x]) - int(v.rest.Y[y*f.Width+x])
			sum += max(d, -d)
			n++
		}
	}
	return float64(sum) / float64(n)
}

func (v *Viewer) readAudio(track *webrtc.TrackRemote) {
	dec, err := opus.NewDecoder(48000, 1)
	if err != nil {
		panic(err)
	}
	defer dec.Close()
	for {
		pkt, _, err := track.ReadRTP()
		if err != nil {
			return
		}
		pcm, err := dec.Decode(pkt.Payload)
		peak := 0
		for _, s := range pcm {
			peak = max(peak, int(s), -int(s))
		}
		v.mu.Lock()
		v.audioPkts++
		if err == nil && peak > 2000 {
			v.loudPkts++
			v.loudAt = append(v.loudAt, time.Now())
		}
		v.mu.Unlock()
	}
}

func (v *Viewer) FramesBetween(from, to time.Time) []Frame {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []Frame
	for _, f := range v.frames {
		if !f.At.Before(from) && f.At.Before(to) {
			out = append(out, f)
		}
	}
	return out
}

// FirstLoudAfter is when the first audio packet with speech energy arrived
// after t (zero if none yet).
func (v *Viewer) FirstLoudAfter(t time.Time) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, at := range v.loudAt {
		if at.After(t) {
			return at
		}
	}
	return time.Time{}
}

func (v *Viewer) Counts() (frames, audioPkts, loudPkts int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.frames), v.audioPkts, v.loudPkts
}

// wsClient is the ws_uri client: it collects server messages with the time
// they arrived.
type WSClient struct {
	t    T
	ws   *websocket.Conn
	msgs chan Msg
}

type Msg struct {
	At   time.Time
	Body map[string]any
}

func (m Msg) Type() string { s, _ := m.Body["type"].(string); return s }

func DialWS(t T, url, sessionID, token string) *WSClient {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	c := &WSClient{t: t, ws: ws, msgs: make(chan Msg, 4096)}
	go func() {
		defer close(c.msgs)
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			m := Msg{At: time.Now()}
			if json.Unmarshal(data, &m.Body) != nil {
				panic("invalid JSON from server: " + string(data))
			}
			c.msgs <- m
		}
	}()
	c.Send(map[string]any{"type": "session.init", "session_id": sessionID, "session_token": token})
	c.Await(audiows.TypeConnectionEstablished)
	return c
}

func (c *WSClient) Send(v any) {
	c.t.Helper()
	if err := c.ws.WriteJSON(v); err != nil {
		c.t.Fatal(err)
	}
}

func (c *WSClient) SendPCM(pcm []int16) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.BinaryMessage, audio.EncodePCM16(pcm)); err != nil {
		c.t.Fatal(err)
	}
}

// await skips confirmations until a message of type typ arrives; an error
// message fails the test.
func (c *WSClient) Await(typ string) Msg {
	c.t.Helper()
	timeout := time.After(Liveness)
	for {
		select {
		case m, ok := <-c.msgs:
			if !ok {
				c.t.Fatalf("websocket closed while waiting for %s", typ)
			}
			if m.Type() == typ {
				return m
			}
			if m.Type() == audiows.TypeError {
				c.t.Fatalf("server error while waiting for %s: %v", typ, m.Body)
			}
		case <-timeout:
			c.t.Fatalf("no %s from server", typ)
		}
	}
}

// Size is the decoded video's size (0x0 before the first frame).
func (v *Viewer) Size() (width, height int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.width, v.height
}

// FirstFrameAt is when the first frame was decoded (zero before).
func (v *Viewer) FirstFrameAt() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	if len(v.frames) == 0 {
		return time.Time{}
	}
	return v.frames[0].At
}

// Face is the test face photo prepared at aspect's size.
func Face(t T, aspect render.AspectRatio) *avatarimage.Prepared {
	t.Helper()
	f, err := os.Open(testfiles.Path(testfiles.FacePNG))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := avatarimage.Decode(f, 0)
	if err != nil {
		t.Fatal(err)
	}
	w, h, err := render.Dimensions(aspect)
	if err != nil {
		t.Fatal(err)
	}
	av, err := avatarimage.Prepare(img, w, h)
	if err != nil {
		t.Fatal(err)
	}
	return av
}

// Speech is the test speech clip, 16 kHz mono.
func Speech(t T) []int16 {
	t.Helper()
	f, err := os.Open(testfiles.Path(testfiles.Speech16k))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pcm, rate, err := audio.ReadWAV(f)
	if err != nil || rate != 16000 {
		t.Fatalf("speech: %v (rate %d)", err, rate)
	}
	return pcm
}

// WaitFor polls cond until it holds, failing t after Liveness.
func WaitFor(t T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Liveness)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
