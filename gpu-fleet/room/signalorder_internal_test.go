package room

import (
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/livekit/protocol/livekit"
	"google.golang.org/protobuf/proto"
)

func encodeSignal(t *testing.T, m *livekit.SignalResponse) wsMessage {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return wsMessage{kind: websocket.BinaryMessage, data: b}
}

func TestClassifySignal(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  *livekit.SignalResponse
		want signalKind
	}{
		{"answer", &livekit.SignalResponse{Message: &livekit.SignalResponse_Answer{Answer: &livekit.SessionDescription{Type: "answer"}}}, publisherAnswer},
		{"publisher candidate", &livekit.SignalResponse{Message: &livekit.SignalResponse_Trickle{Trickle: &livekit.TrickleRequest{Target: livekit.SignalTarget_PUBLISHER}}}, publisherTrickle},
		{"subscriber candidate", &livekit.SignalResponse{Message: &livekit.SignalResponse_Trickle{Trickle: &livekit.TrickleRequest{Target: livekit.SignalTarget_SUBSCRIBER}}}, otherSignal},
		{"offer", &livekit.SignalResponse{Message: &livekit.SignalResponse_Offer{Offer: &livekit.SessionDescription{Type: "offer"}}}, otherSignal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := encodeSignal(t, tc.msg)
			if got := classifySignal(m.kind, m.data); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSignalOrder: the publisher's answer goes out after the candidates
// right behind it, never later than the next other message, and nothing is
// lost or reordered otherwise.
func TestSignalOrder(t *testing.T) {
	msg := func(name string) wsMessage { return wsMessage{kind: websocket.TextMessage, data: []byte(name)} }
	kinds := map[byte]signalKind{'A': publisherAnswer, 'T': publisherTrickle, 'O': otherSignal}
	for _, tc := range []struct {
		in   string // one letter per message: A answer, T publisher candidate, O other; '.' the hold ends
		want string // the order written
	}{
		{"ATTO", "TTAO"},
		{"AO", "AO"},
		{"A.", "A"},
		{"AT.O", "TAO"},
		{"TATA.", "TTAA"}, // a second answer sends the first out
		{"OTO", "OTO"},
		{"AA.", "AA"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			var o signalOrder
			var got []string
			add := func(ms []wsMessage) {
				for _, m := range ms {
					got = append(got, string(m.data))
				}
			}
			for _, c := range []byte(tc.in) {
				if c == '.' {
					add(o.Due())
					continue
				}
				out, _ := o.Push(msg(string(c)), kinds[c])
				add(out)
			}
			if s := strings.Join(got, ""); s != tc.want {
				t.Errorf("written %q, want %q", s, tc.want)
			}
		})
	}
}
