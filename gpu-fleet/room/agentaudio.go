package room

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-jose/go-jose/v3/jwt"
	"github.com/livekit/protocol/livekit"
	lksdk "github.com/livekit/server-sdk-go/v2"

	"avatarsvc/gpu-fleet/agentstream"
)

// PublishOnBehalfAttribute is the avatar token's participant attribute
// naming the voice agent the avatar speaks for (LiveKit Agents' avatar
// convention). When present, only that agent drives the avatar.
const PublishOnBehalfAttribute = "lk.publish_on_behalf"

// Why a participant may not drive the avatar.
var (
	errUnknownSender = errors.New("sender is not in the room")
	errNotAnAgent    = errors.New("sender is not a participant of kind agent")
	errNotFollowed   = errors.New("sender is not the agent the avatar follows")
)

// agentGate decides who may drive the avatar: speech (lk.audio_stream byte
// streams) and lk.clear_buffer are taken only from the agent the session
// follows, that is a participant of kind agent and, when the avatar's
// token names one in lk.publish_on_behalf, with exactly that identity.
//
// Participant kind agent comes only from a token that says so (signed with
// the API secret) or from LiveKit's own agent dispatch; the service never
// mints it for people (shared/livekit mints visitors and end users as
// standard participants). So in rooms the service hosts, where the
// renderer's token names no agent and the dispatched agent's identity is
// not known in advance, any agent-kind participant is the dispatched
// agent. Kind and identity come from the server (it stamps the sender of
// every data packet), not from anything the sender claims.
type agentGate struct {
	lk     *lksdk.Room
	follow string // the avatar token's lk.publish_on_behalf; "" for any agent
	log    *slog.Logger

	mu      sync.Mutex
	refused map[string]bool // senders already logged, so a flood logs once

	unannounced atomic.Int64 // bytes held for senders not announced yet
	waiting     atomic.Int64 // their streams
	order       *senderOrder
}

func (g *agentGate) admit(identity string) error {
	p := g.lk.GetParticipantByIdentity(identity)
	switch {
	case identity == "" || p == nil:
		// Not announced (yet): see awaitAnnounced.
		return errUnknownSender
	case p.Kind() != lksdk.ParticipantAgent:
		return errNotAnAgent
	case g.follow != "" && identity != g.follow:
		return errNotFollowed
	}
	return nil
}

// logRefusal logs the first refusal of each sender.
func (g *agentGate) logRefusal(what, sender string, err error) {
	g.mu.Lock()
	first := !g.refused[sender]
	g.refused[sender] = true
	g.mu.Unlock()
	if first {
		g.log.Warn("refused "+what+" from a participant that may not drive the avatar (further ones not logged)",
			"from", sender, "err", err, "follows", g.follow)
	}
}

// sdkStream is one incoming byte stream. Close makes the SDK forget it at
// once: the SDK buffers every stream it has a handler for, without limit,
// until the stream's trailer, and has no other way to drop one. Feeding it
// a trailer of our own closes the reader (a pending Read returns what is
// left, then EOF) and removes it, so the stream's further chunks are
// discarded on arrival (server-sdk-go v2.13.3 Room.OnStreamTrailer).
type sdkStream struct {
	*lksdk.ByteStreamReader
	lk   *lksdk.Room
	once sync.Once
}

func (s *sdkStream) Close() error {
	s.once.Do(func() { s.lk.OnStreamTrailer(&livekit.DataStream_Trailer{StreamId: s.Info.Id}) })
	return nil
}

// How long a stream from a participant LiveKit has not announced yet waits
// for the announcement, and how much of such streams is held meanwhile,
// across the room. LiveKit sends the participant list at once only for
// participants that publish tracks; others (a voice agent that speaks
// through byte streams publishes none) reach the rest of the room in
// batches, every 3 s (livekit-server's subscriberUpdateInterval), so an
// agent's first words can arrive before the agent is known.
const (
	announceWait          = 5 * time.Second
	maxUnannounced        = 4 << 20 // bytes held
	maxUnannouncedStreams = 8       // streams waiting (each costs goroutines)
)

var errHeldTooMuch = errors.New("sender not announced yet, and streams of unannounced senders exceed what is held meanwhile")

// awaitAnnounced reads stream s from sender while the room waits for
// LiveKit to announce sender, holding what arrives (within the room's
// maxUnannounced), then either returns the stream (what was held first) or
// refuses it. Reading all along keeps the SDK from piling up the bytes.
func (g *agentGate) awaitAnnounced(s *sdkStream, sender string) (io.ReadCloser, error) {
	defer g.waiting.Add(-1)
	if g.waiting.Add(1) > maxUnannouncedStreams {
		return nil, errHeldTooMuch
	}
	var (
		mu       sync.Mutex
		held     []byte
		decided  bool
		overflow bool
	)
	pr, pw := io.Pipe()
	go func() { // the one reader of s; what it holds is released by the decision below
		buf := make([]byte, 32<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				mu.Lock()
				if !decided {
					if g.unannounced.Add(int64(n)) > maxUnannounced {
						g.unannounced.Add(-int64(n))
						overflow = true
						mu.Unlock()
						s.Close()
						return
					}
					held = append(held, buf[:n]...)
					mu.Unlock()
					continue
				}
				mu.Unlock()
				if _, werr := pw.Write(buf[:n]); werr != nil {
					s.Close() // the consumer stopped reading
					return
				}
			}
			if err != nil {
				pw.Close()
				return
			}
		}
	}()
	deadline := time.Now().Add(announceWait)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := g.admit(sender)
		mu.Lock()
		if err == errUnknownSender && overflow {
			err = errHeldTooMuch
		}
		if err == errUnknownSender && time.Now().After(deadline) {
			err = fmt.Errorf("%w after %v", errUnknownSender, announceWait)
		}
		if err == errUnknownSender {
			mu.Unlock()
			<-tick.C
			continue
		}
		// Decided: from now on the pump passes bytes through the pipe;
		// what it held is read first.
		decided = true
		first := held
		g.unannounced.Add(-int64(len(held)))
		held = nil
		mu.Unlock()
		if err != nil {
			s.Close()
			pr.Close()
			return nil, err
		}
		return readCloser{io.MultiReader(bytes.NewReader(first), pr), func() error {
			s.Close()
			return pr.Close()
		}}, nil
	}
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// senderOrder keeps each sender's streams in the order they came: the SDK
// starts a handler per stream, and a stream may wait a while to be
// admitted. Only the followed agent's order matters; others are refused,
// and never wait on each other across senders.
type senderOrder struct {
	mu     sync.Mutex
	cond   *sync.Cond
	queues map[string]*turns
}

type turns struct{ next, now uint64 } // tickets handed out; the one whose turn it is

func newSenderOrder() *senderOrder {
	o := &senderOrder{queues: map[string]*turns{}}
	o.cond = sync.NewCond(&o.mu)
	return o
}

func (o *senderOrder) take(sender string) uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	q := o.queues[sender]
	if q == nil {
		q = &turns{}
		o.queues[sender] = q
	}
	q.next++
	return q.next - 1
}

// inTurn runs f once every earlier ticket of sender has had its turn.
func (o *senderOrder) inTurn(sender string, ticket uint64, f func()) {
	o.mu.Lock()
	q := o.queues[sender]
	for q.now != ticket {
		o.cond.Wait()
	}
	o.mu.Unlock()
	f()
	o.mu.Lock()
	if q.now++; q.now == q.next {
		delete(o.queues, sender) // idle: nothing kept per past sender
	}
	o.cond.Broadcast()
	o.mu.Unlock()
}

// registerAgentAudio routes the followed agent's speech and clear_buffer
// to a; everyone else's streams are dropped unread and their clear_buffer
// calls answered with an error.
func registerAgentAudio(lk *lksdk.Room, a AgentAudio, token string, log *slog.Logger) error {
	g := &agentGate{lk: lk, follow: publishOnBehalf(token), log: log, refused: map[string]bool{}, order: newSenderOrder()}
	// The SDK calls the handler on its own goroutine, once per stream.
	err := lk.RegisterByteStreamHandler(agentstream.Topic, func(reader *lksdk.ByteStreamReader, sender string) {
		s := &sdkStream{ByteStreamReader: reader, lk: lk}
		defer s.Close() // whatever happened, nothing more of it is buffered
		// A sender's streams take their places in the order they came,
		// even when the first waits for its sender to be announced.
		ticket := g.order.take(sender)
		var stream io.ReadCloser = s
		err := g.admit(sender)
		if err == errUnknownSender {
			stream, err = g.awaitAnnounced(s, sender)
		}
		var play func(io.Reader) error
		g.order.inTurn(sender, ticket, func() {
			if err == nil {
				play, err = a.Open(sender, reader.Info.Attributes)
			}
		})
		switch {
		case errors.Is(err, errUnknownSender) || errors.Is(err, errNotAnAgent) || errors.Is(err, errNotFollowed) || errors.Is(err, errHeldTooMuch):
			g.logRefusal("agent audio stream", sender, err)
		case err != nil:
			log.Warn("agent audio stream refused", "from", sender, "err", err)
		default:
			if err := play(stream); err != nil {
				log.Warn("agent audio stream cut", "from", sender, "err", err)
			}
		}
	})
	if err != nil {
		return err
	}
	return lk.RegisterRpcMethod(agentstream.RPCClearBuffer, func(d lksdk.RpcInvocationData) (string, error) {
		if err := g.admit(d.CallerIdentity); err != nil {
			g.logRefusal(agentstream.RPCClearBuffer, d.CallerIdentity, err)
			return "", lksdk.NewRpcError(lksdk.RpcApplicationError, "only the session's agent may clear the avatar's audio", nil)
		}
		a.Clear(d.CallerIdentity)
		return "", nil
	})
}

// publishOnBehalf reads the lk.publish_on_behalf attribute of the avatar's
// own join token. The signature is not checked: the renderer cannot (it
// has no API secret) and need not (LiveKit checks the token at join, and a
// token that fails there never joins).
func publishOnBehalf(token string) string {
	tok, err := jwt.ParseSigned(token)
	if err != nil {
		return ""
	}
	var c struct {
		Attributes map[string]string `json:"attributes"`
	}
	if err := tok.UnsafeClaimsWithoutVerification(&c); err != nil {
		return ""
	}
	return c.Attributes[PublishOnBehalfAttribute]
}
