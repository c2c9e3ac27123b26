package room_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/livekit/protocol/livekit"
	"google.golang.org/protobuf/proto"

	"avatarsvc/gpu-fleet/room"
	"avatarsvc/scripts/localstack"
	lkapi "avatarsvc/shared/livekit"
	"avatarsvc/shared/netguard"
)

// The policy of these tests allows the room server's address, 127.0.0.1,
// and refuses the rest of loopback; the trap listens on 127.0.0.2, where a
// hostile room server points the renderer.
var policy = netguard.Policy{AllowPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}

// liveness bounds waits for what must happen; never a speed assertion.
const liveness = 20 * time.Second

// trap counts what reaches 127.0.0.2: TCP connections (answered with 404,
// so an HTTP client that follows a redirect there does not hang) and UDP
// datagrams (STUN, TURN, ICE checks).
type trap struct {
	tcp, udp     atomic.Int64
	tcpAddr      string
	udpAddr      string
	tcpLn        net.Listener
	udpLn        net.PacketConn
	srv          *http.Server
	datagramSeen chan struct{}
}

func newTrap(t *testing.T) *trap {
	t.Helper()
	tr := &trap{datagramSeen: make(chan struct{}, 1)}
	var err error
	if tr.tcpLn, err = net.Listen("tcp", "127.0.0.2:0"); err != nil {
		t.Fatal(err)
	}
	if tr.udpLn, err = net.ListenPacket("udp", "127.0.0.2:0"); err != nil {
		t.Fatal(err)
	}
	tr.tcpAddr, tr.udpAddr = tr.tcpLn.Addr().String(), tr.udpLn.LocalAddr().String()
	tr.srv = &http.Server{
		Handler: http.NotFoundHandler(),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				tr.tcp.Add(1)
			}
		},
	}
	go tr.srv.Serve(tr.tcpLn)
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := tr.udpLn.ReadFrom(buf); err != nil {
				return
			}
			tr.udp.Add(1)
			select {
			case tr.datagramSeen <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		tr.srv.Close()
		tr.udpLn.Close()
	})
	return tr
}

func (tr *trap) reached() string {
	return fmt.Sprintf("%d TCP connections, %d UDP datagrams", tr.tcp.Load(), tr.udp.Load())
}

func quietLog() *slog.Logger { return slog.New(slog.NewJSONHandler(io.Discard, nil)) }

// TestValidateRedirectStaysInPolicy: a room server on an allowed address
// refuses the signal WebSocket, so the SDK falls back to /rtc/validate,
// which redirects to the trap. Guarded, the trap receives nothing; the
// unguarded SDK (the control) follows the redirect there.
func TestValidateRedirectStaysInPolicy(t *testing.T) {
	tests := []struct {
		name     string
		guard    room.Guard
		wantTrap bool
	}{
		{"guarded", policy, false},
		{"unguarded SDK (control)", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTrap(t)
			var validated atomic.Int64
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if strings.HasSuffix(r.URL.Path, "/validate") {
					validated.Add(1)
					http.Redirect(w, r, "http://"+tr.tcpAddr+r.URL.Path, http.StatusFound)
					return
				}
				http.Error(w, "no", http.StatusInternalServerError)
			})}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })

			ctx, cancel := context.WithTimeout(context.Background(), liveness)
			defer cancel()
			r, err := room.Join(ctx, room.Config{URL: "ws://" + ln.Addr().String(), Token: "not-a-real-token",
				VideoWidth: 64, VideoHeight: 64, Guard: tt.guard, Logger: quietLog()})
			if err == nil {
				r.Leave(room.Removed)
				t.Fatal("join: got success from a server that refuses every join")
			}
			if validated.Load() == 0 {
				t.Fatalf("the SDK never asked /rtc/validate (join error %v): the test does not exercise the redirect", err)
			}
			// Join returns after the SDK's validate request finished, redirect
			// and all, so the trap's count is final here.
			if got := tr.tcp.Load() > 0; got != tt.wantTrap {
				t.Fatalf("trap reached: got %s, want reached=%v", tr.reached(), tt.wantTrap)
			}
		})
	}
}

// TestRefusedICEServersAndCandidatesAreDropped: a room server on an allowed
// address (a relay in front of a real livekit-server) adds to its join
// response STUN and TURN servers on the trap, and to every offer and answer
// an ICE candidate on the trap. Guarded, the avatar still joins and
// publishes over the real server's candidates, and the trap receives
// nothing; the unguarded SDK (the control) sends it packets.
func TestRefusedICEServersAndCandidatesAreDropped(t *testing.T) {
	lk := localstack.LiveKitT(t)
	tests := []struct {
		name     string
		guard    room.Guard
		wantTrap bool
	}{
		{"guarded", policy, false},
		{"unguarded SDK (control)", nil, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := newTrap(t)
			hostile := startHostileRelay(t, lk.URL, tr)
			roomName := fmt.Sprintf("guard-%d", i)
			token, err := lkapi.JoinToken(lk.APIKey, lk.APISecret, roomName, room.AgentIdentity, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), liveness)
			defer cancel()
			r, err := room.Join(ctx, room.Config{URL: hostile, Token: token, VideoWidth: 64, VideoHeight: 64,
				Guard: tt.guard, Logger: quietLog()})
			if err != nil {
				t.Fatalf("join through a room server on an allowed address: %v", err)
			}
			defer r.Leave(room.Removed)
			if tt.wantTrap {
				select {
				case <-tr.datagramSeen:
				case <-time.After(liveness):
					t.Fatalf("control: the unguarded SDK never reached the trap (%s); the test does not exercise what it should", tr.reached())
				}
				return
			}
			// Join returned with both tracks published over ICE, so gathering
			// (the TURN allocation) and the checks of the offered candidates
			// have started; the control reaches the trap within this much.
			time.Sleep(3 * time.Second)
			if tr.tcp.Load() != 0 || tr.udp.Load() != 0 {
				t.Fatalf("trap reached: got %s, want nothing", tr.reached())
			}
		})
	}
}

// startHostileRelay serves, on 127.0.0.1, a room server that passes
// everything to the livekit-server at lkURL but points the renderer at tr:
// it adds STUN and TURN servers there to the join response and a host
// candidate there to every offer and answer. It returns its ws:// URL.
func startHostileRelay(t *testing.T, lkURL string, tr *trap) string {
	t.Helper()
	_, udpPort, _ := net.SplitHostPort(tr.udpAddr)
	_, tcpPort, _ := net.SplitHostPort(tr.tcpAddr)
	inject := func(kind int, data []byte) []byte {
		var msg livekit.SignalResponse
		if kind != websocket.BinaryMessage || proto.Unmarshal(data, &msg) != nil {
			return data
		}
		candidate := "a=candidate:1 1 udp 2130706431 127.0.0.2 " + udpPort + " typ host\r\n"
		addCandidate := func(sdp string) string {
			var b strings.Builder
			for _, l := range strings.SplitAfter(sdp, "\n") {
				b.WriteString(l)
				if strings.HasPrefix(l, "a=mid:") {
					b.WriteString(candidate)
				}
			}
			return b.String()
		}
		switch m := msg.Message.(type) {
		case *livekit.SignalResponse_Join:
			m.Join.IceServers = append(m.Join.IceServers, &livekit.ICEServer{
				Urls: []string{
					"stun:127.0.0.2:" + udpPort,
					"turn:127.0.0.2:" + udpPort + "?transport=udp",
					"turn:127.0.0.2:" + tcpPort + "?transport=tcp",
				},
				Username: "u", Credential: "p",
			})
		case *livekit.SignalResponse_Offer:
			m.Offer.Sdp = addCandidate(m.Offer.Sdp)
		case *livekit.SignalResponse_Answer:
			m.Answer.Sdp = addCandidate(m.Answer.Sdp)
		default:
			return data
		}
		out, err := proto.Marshal(&msg)
		if err != nil {
			panic(err)
		}
		return out
	}
	upstream := strings.TrimPrefix(lkURL, "ws://")
	var upgrader websocket.Upgrader
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := http.Header{"Authorization": r.Header["Authorization"]}
		up, res, err := websocket.DefaultDialer.Dial("ws://"+upstream+r.URL.RequestURI(), h)
		if err != nil {
			status := http.StatusBadGateway
			if res != nil {
				status = res.StatusCode
			}
			http.Error(w, "upstream refused", status)
			return
		}
		down, err := upgrader.Upgrade(w, r, nil)
		if err != nil {
			up.Close()
			return
		}
		copyMessages := func(src, dst *websocket.Conn, change func(int, []byte) []byte) {
			defer src.Close()
			defer dst.Close()
			for {
				kind, data, err := src.ReadMessage()
				if err != nil {
					return
				}
				if dst.WriteMessage(kind, change(kind, data)) != nil {
					return
				}
			}
		}
		go copyMessages(down, up, func(_ int, b []byte) []byte { return b })
		copyMessages(up, down, inject)
	})}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "ws://" + ln.Addr().String()
}
