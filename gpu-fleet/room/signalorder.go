package room

import (
	"time"

	"github.com/gorilla/websocket"
	"github.com/livekit/protocol/livekit"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// The server answers the renderer's publisher offer, then trickles its ICE
// candidates. When the SDK sets the answer before those candidates arrive,
// pion starts checking, meets the server's first connectivity check from an
// address it does not know yet, and accepts that (peer-reflexive) pair only
// after its one-second minimum wait: the avatar's first frame came a second
// late in about a third of the sessions. The SDK queues candidates that
// come before an answer and adds them as it sets it, so the relay hands
// the publisher's answer over just after the candidates that follow it
// (or after answerHold, whichever comes first).
const answerHold = 60 * time.Millisecond

// signalKind is what the ordering needs to know of a server message.
type signalKind int

const (
	otherSignal signalKind = iota
	publisherAnswer
	publisherTrickle
)

func classifySignal(kind int, data []byte) signalKind {
	msg, err := decodeSignal(kind, data)
	if err != nil {
		return otherSignal
	}
	switch m := msg.Message.(type) {
	case *livekit.SignalResponse_Answer:
		return publisherAnswer // the server answers only the publisher's offers
	case *livekit.SignalResponse_Trickle:
		if m.Trickle.Target == livekit.SignalTarget_PUBLISHER {
			return publisherTrickle
		}
	}
	return otherSignal
}

// signalOrder decides when each message is written: it holds a publisher
// answer until the candidates right behind it have gone out. Pure logic:
// Push returns what to write now; Due says the hold is over.
type signalOrder struct {
	held       *wsMessage
	sawTrickle bool // a candidate went out while the answer was held
}

type wsMessage struct {
	kind int
	data []byte
}

// Push takes the next message (already filtered) and returns the messages
// to write now, in order, and whether an answer is being held (the caller
// then arms a timer and calls Due when it fires).
func (o *signalOrder) Push(m wsMessage, k signalKind) (out []wsMessage, holding bool) {
	switch {
	case k == publisherAnswer:
		out = o.release(out)
		o.held = &m
	case k == publisherTrickle && o.held != nil:
		out = append(out, m)
		o.sawTrickle = true
	default:
		out = append(o.release(out), m)
	}
	return out, o.held != nil
}

// Due ends the hold: the held answer, if any, goes out.
func (o *signalOrder) Due() []wsMessage { return o.release(nil) }

func (o *signalOrder) release(out []wsMessage) []wsMessage {
	if o.held != nil {
		out = append(out, *o.held)
		o.held, o.sawTrickle = nil, false
	}
	return out
}

// pumpSignals is pump for the server's messages to the SDK with the
// answer ordering: one goroutine reads, this one filters, orders and
// writes.
func pumpSignals(src, dst *websocket.Conn, filter func(kind int, data []byte) ([]byte, bool)) {
	defer func() {
		src.Close()
		dst.Close()
	}()
	type read struct {
		wsMessage
		err error
	}
	reads := make(chan read, 16)
	stop := make(chan struct{})
	defer close(stop) // the reader never blocks on a writer that left
	go func() {
		defer close(reads)
		for {
			kind, data, err := src.ReadMessage()
			select {
			case reads <- read{wsMessage{kind, data}, err}:
			case <-stop:
				return
			}
			if err != nil {
				return
			}
		}
	}()
	var order signalOrder
	var timer *time.Timer
	var due <-chan time.Time
	write := func(ms []wsMessage) bool {
		for _, m := range ms {
			if err := dst.WriteMessage(m.kind, m.data); err != nil {
				return false
			}
		}
		return true
	}
	for {
		select {
		case <-due:
			due = nil
			if !write(order.Due()) {
				return
			}
		case r, ok := <-reads:
			if !ok {
				return
			}
			if r.err != nil {
				write(order.Due())
				closeLike(dst, r.err)
				return
			}
			data, keep := filter(r.kind, r.data)
			if !keep {
				continue
			}
			m := wsMessage{r.kind, data}
			out, holding := order.Push(m, classifySignal(m.kind, m.data))
			if !write(out) {
				return
			}
			switch {
			case holding && due == nil:
				if timer != nil {
					timer.Stop()
				}
				timer = time.NewTimer(answerHold)
				due = timer.C
			case holding && order.sawTrickle:
				// Candidates are going out: the answer follows the last
				// of them, a moment later.
				timer.Reset(5 * time.Millisecond)
			case !holding:
				due = nil
			}
		}
	}
}

// decodeSignal reads a server message in either of the SDK's encodings
// (JSON text or protobuf binary).
func decodeSignal(kind int, data []byte) (*livekit.SignalResponse, error) {
	var msg livekit.SignalResponse
	var err error
	if kind == websocket.TextMessage {
		err = protojson.Unmarshal(data, &msg)
	} else {
		err = proto.Unmarshal(data, &msg)
	}
	return &msg, err
}
