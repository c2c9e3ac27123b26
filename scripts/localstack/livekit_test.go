package localstack_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media"

	"avatarsvc/scripts/localstack"
)

func TestLiveKitRoomService(t *testing.T) {
	t.Parallel()
	lk := localstack.LiveKitT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	rooms := lksdk.NewRoomServiceClient(lk.URL, lk.APIKey, lk.APISecret)
	created, err := rooms.CreateRoom(ctx, &livekit.CreateRoomRequest{Name: "room-a", EmptyTimeout: 60})
	if err != nil {
		t.Fatalf("CreateRoom: %v", err)
	}
	if got, want := created.Name, "room-a"; got != want {
		t.Errorf("created room name: got %q, want %q", got, want)
	}
	listed, err := rooms.ListRooms(ctx, &livekit.ListRoomsRequest{})
	if err != nil {
		t.Fatalf("ListRooms: %v", err)
	}
	if got, want := len(listed.Rooms), 1; got != want {
		t.Fatalf("rooms listed: got %d, want %d", got, want)
	}
	if got, want := listed.Rooms[0].Sid, created.Sid; got != want {
		t.Errorf("listed room sid: got %q, want %q", got, want)
	}

	wrongKey := lksdk.NewRoomServiceClient(lk.URL, lk.APIKey, strings.Repeat("x", 40))
	if _, err := wrongKey.ListRooms(ctx, &livekit.ListRoomsRequest{}); err == nil {
		t.Error("ListRooms with a wrong secret: got no error, want one")
	}
}

// TestLiveKitMediaOverLoopback checks that ICE completes over the loopback
// interface: a track published by one participant reaches another.
func TestLiveKitMediaOverLoopback(t *testing.T) {
	t.Parallel()
	lk := localstack.LiveKitT(t)

	subscribed := make(chan string, 1)
	viewer, err := lksdk.ConnectToRoom(lk.URL, lksdk.ConnectInfo{
		APIKey: lk.APIKey, APISecret: lk.APISecret, RoomName: "media", ParticipantIdentity: "viewer",
	}, &lksdk.RoomCallback{ParticipantCallback: lksdk.ParticipantCallback{
		OnTrackSubscribed: func(track *webrtc.TrackRemote, _ *lksdk.RemoteTrackPublication, rp *lksdk.RemoteParticipant) {
			select {
			case subscribed <- rp.Identity() + "/" + track.Codec().MimeType:
			default:
			}
		},
	}})
	if err != nil {
		t.Fatalf("viewer ConnectToRoom: %v", err)
	}
	defer viewer.Disconnect()

	publisher, err := lksdk.ConnectToRoom(lk.URL, lksdk.ConnectInfo{
		APIKey: lk.APIKey, APISecret: lk.APISecret, RoomName: "media", ParticipantIdentity: "avatar",
	}, lksdk.NewRoomCallback())
	if err != nil {
		t.Fatalf("publisher ConnectToRoom: %v", err)
	}
	defer publisher.Disconnect()

	track, err := webrtc.NewTrackLocalStaticSample(webrtc.RTPCodecCapability{MimeType: webrtc.MimeTypeOpus, ClockRate: 48000, Channels: 2}, "audio", "avatar")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := publisher.LocalParticipant.PublishTrack(track, &lksdk.TrackPublicationOptions{Name: "voice"}); err != nil {
		t.Fatalf("PublishTrack: %v", err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// 20 ms Opus silence frames, so the subscriber sees RTP.
		ticker := time.NewTicker(20 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
				_ = track.WriteSample(media.Sample{Data: []byte{0xf8, 0xff, 0xfe}, Duration: 20 * time.Millisecond})
			}
		}
	}()

	select {
	case got := <-subscribed:
		if want := "avatar/" + webrtc.MimeTypeOpus; !strings.EqualFold(got, want) {
			t.Errorf("subscribed track: got %q, want %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("viewer never received the published track over loopback")
	}
}

func TestLiveKitConfigUsesFreePorts(t *testing.T) {
	t.Parallel()
	a := localstack.LiveKitT(t)
	b := localstack.LiveKitT(t)
	ports := map[int]bool{}
	for _, p := range []int{a.Port, a.TCPPort, b.Port, b.TCPPort} {
		if ports[p] {
			t.Errorf("tcp port %d used twice across two instances", p)
		}
		ports[p] = true
	}
	if a.UDPPort == b.UDPPort {
		t.Errorf("udp port %d used by both instances", a.UDPPort)
	}
	cfg, err := os.ReadFile(a.ConfigPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"node_ip: 127.0.0.1", "enable_loopback_candidate: true", a.APIKey + ": " + a.APISecret} {
		if !strings.Contains(string(cfg), want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
}
