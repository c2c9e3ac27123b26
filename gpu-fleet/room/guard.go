package room

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/livekit/protocol/livekit"
	"github.com/pion/webrtc/v4"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Guard is the address policy every connection made for a room obeys
// (netguard.Policy). The room URL comes from the caller, and so does the
// server behind it, which names more destinations as the session goes on:
// a /rtc/validate redirect, ICE (STUN/TURN) servers, and ICE candidates.
type Guard interface {
	// Dialer connects only to allowed addresses, checked at connect time.
	Dialer(timeout time.Duration) *net.Dialer
	// Resolve returns host's addresses if the host and all of them are
	// allowed.
	Resolve(ctx context.Context, host string) ([]netip.Addr, error)
	// AddrAllowed reports whether an address may be reached.
	AddrAllowed(a netip.Addr) bool
}

// The LiveKit SDK dials the signal WebSocket with websocket.DefaultDialer,
// its /rtc/validate fallback with http.DefaultClient (which follows
// redirects), and hands the server's ICE servers and candidates to pion as
// they come, with no hook for any of it. So with a Guard the SDK is given
// a loopback relay instead of the room URL: the relay makes each connection
// to the room server through the guarded dialer, follows no redirect the
// policy refuses, and takes refused ICE servers and candidates out of the
// server's signal messages before the SDK sees them. The SDK's reconnects
// go to the relay too, so the guard holds for the whole session.

const (
	relayDialTimeout = 10 * time.Second
	// relayHTTPTimeout bounds a /rtc/validate round trip.
	relayHTTPTimeout = 20 * time.Second
	// relayBodyBytes bounds a relayed HTTP answer (an error text).
	relayBodyBytes = 64 << 10
	// relayMessageBytes bounds one signal message from the server; a join
	// response for a full room is well under it.
	relayMessageBytes = 16 << 20
	// relayRedirects: a validate request follows at most this many
	// redirects, each to an allowed host and address.
	relayRedirects = 3
	// relayResolveTimeout bounds resolving one ICE server's host name.
	relayResolveTimeout = 3 * time.Second
	// relayDrain is how long Close lets open signal connections end on
	// their own (the SDK's leave message still on its way) before cutting
	// them.
	relayDrain = 2 * time.Second
)

// signalRelay is a room's loopback relay to its LiveKit server.
type signalRelay struct {
	guard    Guard
	log      *slog.Logger
	upstream *url.URL
	secure   bool
	prefix   string // "/<random>": only the SDK that was given it can use the relay
	ln       net.Listener
	srv      *http.Server
	client   *http.Client
	dialer   *websocket.Dialer
	upgrader websocket.Upgrader

	mu     sync.Mutex
	conns  map[*websocket.Conn]struct{}
	wg     sync.WaitGroup
	closed bool
}

// startSignalRelay starts a relay to the LiveKit server at rawURL.
func startSignalRelay(rawURL string, g Guard, log *slog.Logger) (*signalRelay, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("room URL %q is not a URL with a host", rawURL)
	}
	rl := &signalRelay{guard: g, log: log, upstream: u, conns: make(map[*websocket.Conn]struct{})}
	switch strings.ToLower(u.Scheme) {
	case "ws", "http":
	case "wss", "https":
		rl.secure = true
	default:
		return nil, fmt.Errorf("room URL scheme %q: want ws, wss, http or https", u.Scheme)
	}
	secret := make([]byte, 16)
	if _, err := rand.Read(secret); err != nil {
		return nil, err
	}
	rl.prefix = "/" + hex.EncodeToString(secret)
	dial := g.Dialer(relayDialTimeout).DialContext
	rl.client = &http.Client{
		Timeout: relayHTTPTimeout,
		// Proxy nil: a proxy would make the connection on the guard's behalf.
		Transport: &http.Transport{DialContext: dial, TLSHandshakeTimeout: relayDialTimeout, MaxIdleConns: 1},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) > relayRedirects {
				return fmt.Errorf("more than %d redirects", relayRedirects)
			}
			// The dialer checks the address again at connect time; this
			// refuses a host off the allowlist before anything is sent.
			if _, err := g.Resolve(req.Context(), req.URL.Hostname()); err != nil {
				return fmt.Errorf("redirect refused: %w", err)
			}
			return nil
		},
	}
	rl.dialer = &websocket.Dialer{NetDialContext: dial, HandshakeTimeout: relayHTTPTimeout}
	if rl.ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		return nil, err
	}
	rl.srv = &http.Server{Handler: rl, ReadHeaderTimeout: relayDialTimeout}
	go rl.srv.Serve(rl.ln)
	return rl, nil
}

// URL is what the SDK joins instead of the room URL.
func (rl *signalRelay) URL() string {
	return "ws://" + rl.ln.Addr().String() + rl.prefix + strings.TrimSuffix(rl.upstream.EscapedPath(), "/")
}

// Close stops the relay, letting open signal connections end first (for at
// most relayDrain). It may be called more than once, and on a nil relay.
func (rl *signalRelay) Close() {
	if rl == nil {
		return
	}
	rl.mu.Lock()
	if rl.closed {
		rl.mu.Unlock()
		return
	}
	rl.closed = true
	rl.mu.Unlock()
	rl.srv.Close() // the listener and plain HTTP requests; not hijacked WebSockets
	drained := make(chan struct{})
	go func() { rl.wg.Wait(); close(drained) }()
	select {
	case <-drained:
		return
	case <-time.After(relayDrain):
	}
	rl.mu.Lock()
	for c := range rl.conns {
		c.Close()
	}
	rl.mu.Unlock()
	<-drained
}

// track registers a relayed connection so Close can cut it; false once the
// relay is closed.
func (rl *signalRelay) track(cs ...*websocket.Conn) bool {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	if rl.closed {
		return false
	}
	for _, c := range cs {
		rl.conns[c] = struct{}{}
	}
	rl.wg.Add(1)
	return true
}

func (rl *signalRelay) untrack(cs ...*websocket.Conn) {
	rl.mu.Lock()
	for _, c := range cs {
		delete(rl.conns, c)
	}
	rl.mu.Unlock()
	rl.wg.Done()
}

// target is the room server's address for a relayed path and query.
func (rl *signalRelay) target(r *http.Request, websocketScheme bool) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), rl.prefix)
	if !ok || (rest != "" && rest[0] != '/') {
		return "", false
	}
	scheme := "http"
	if websocketScheme {
		scheme = "ws"
	}
	if rl.secure {
		scheme += "s"
	}
	t := scheme + "://" + rl.upstream.Host + rest
	if r.URL.RawQuery != "" {
		t += "?" + r.URL.RawQuery
	}
	return t, true
}

// forwardedHeaders are the request headers the room server needs: the join
// token, and who is asking.
func forwardedHeaders(r *http.Request) http.Header {
	h := http.Header{}
	for _, k := range []string{"Authorization", "User-Agent"} {
		if v := r.Header.Get(k); v != "" {
			h.Set(k, v)
		}
	}
	return h
}

func (rl *signalRelay) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	upgrade := websocket.IsWebSocketUpgrade(r)
	target, ok := rl.target(r, upgrade)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if upgrade {
		rl.relayWebSocket(w, r, target)
		return
	}
	if r.Method != http.MethodGet {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	rl.relayHTTP(w, r, target)
}

// relayHTTP forwards a plain request (/rtc/validate). A redirect is followed
// here, within the policy, and never handed to the SDK, whose client would
// follow it unguarded.
func (rl *signalRelay) relayHTTP(w http.ResponseWriter, r *http.Request, target string) {
	req, err := http.NewRequestWithContext(r.Context(), http.MethodGet, target, nil)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	req.Header = forwardedHeaders(r)
	res, err := rl.client.Do(req)
	if err != nil {
		rl.log.Warn("room server request refused or failed", "path", r.URL.Path, "err", err)
		http.Error(w, "room server unreachable", http.StatusBadGateway)
		return
	}
	defer res.Body.Close()
	copyAnswer(w, res)
}

// copyAnswer passes on a refusal's status and text; redirects become 502
// (the relay followed what the policy allows) and no other header is copied.
func copyAnswer(w http.ResponseWriter, res *http.Response) {
	status := res.StatusCode
	if status >= 300 && status < 400 {
		status = http.StatusBadGateway
	}
	if ct := res.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(status)
	io.Copy(w, io.LimitReader(res.Body, relayBodyBytes))
}

func (rl *signalRelay) relayWebSocket(w http.ResponseWriter, r *http.Request, target string) {
	up, res, err := rl.dialer.DialContext(r.Context(), target, forwardedHeaders(r))
	if err != nil {
		if res != nil && res.StatusCode != http.StatusSwitchingProtocols {
			// The SDK reads a refusal's status to decide on /rtc/validate.
			defer res.Body.Close()
			copyAnswer(w, res)
			return
		}
		rl.log.Warn("room server signal connection refused or failed", "err", err)
		http.Error(w, "room server unreachable", http.StatusBadGateway)
		return
	}
	up.SetReadLimit(relayMessageBytes)
	down, err := rl.upgrader.Upgrade(w, r, nil)
	if err != nil {
		up.Close()
		return
	}
	if !rl.track(up, down) {
		up.Close()
		down.Close()
		return
	}
	defer rl.untrack(up, down)
	done := make(chan struct{})
	go func() {
		defer close(done)
		pump(down, up, nil) // the SDK's requests, as they are
	}()
	f := &signalFilter{guard: rl.guard, log: rl.log}
	pumpSignals(up, down, f.filter)
	<-done
}

// pump copies messages from src to dst until either side ends, passing each
// through filter (nil: unchanged; false: dropped), then passes the close on
// and closes both.
func pump(src, dst *websocket.Conn, filter func(kind int, data []byte) ([]byte, bool)) {
	defer func() {
		src.Close()
		dst.Close()
	}()
	for {
		kind, data, err := src.ReadMessage()
		if err != nil {
			closeLike(dst, err)
			return
		}
		if filter != nil {
			var keep bool
			if data, keep = filter(kind, data); !keep {
				continue
			}
		}
		if err := dst.WriteMessage(kind, data); err != nil {
			return
		}
	}
}

// closeLike passes a read's end on to dst: its close code and text, or
// "going away" when the connection just broke.
func closeLike(dst *websocket.Conn, err error) {
	code, text := websocket.CloseGoingAway, ""
	var ce *websocket.CloseError
	if errors.As(err, &ce) && ce.Code != websocket.CloseNoStatusReceived && ce.Code != websocket.CloseAbnormalClosure {
		code, text = ce.Code, ce.Text
	}
	dst.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, text), time.Now().Add(time.Second))
}

// signalFilter takes what the policy refuses out of the server's signal
// messages: ICE servers (STUN/TURN) in join and reconnect responses, and
// ICE candidates in offers, answers and trickle messages.
type signalFilter struct {
	guard Guard
	log   *slog.Logger
}

func (f *signalFilter) filter(kind int, data []byte) ([]byte, bool) {
	msg, err := decodeSignal(kind, data)
	if err != nil {
		// The SDK could not read it either; nothing unread reaches it.
		f.log.Warn("room server sent an unreadable signal message, dropped", "err", err)
		return nil, false
	}
	changed := false
	switch m := msg.Message.(type) {
	case *livekit.SignalResponse_Join:
		m.Join.IceServers, changed = f.iceServers(m.Join.IceServers)
	case *livekit.SignalResponse_Reconnect:
		m.Reconnect.IceServers, changed = f.iceServers(m.Reconnect.IceServers)
	case *livekit.SignalResponse_Offer:
		m.Offer.Sdp, changed = f.sdp(m.Offer.Sdp)
	case *livekit.SignalResponse_Answer:
		m.Answer.Sdp, changed = f.sdp(m.Answer.Sdp)
	case *livekit.SignalResponse_Trickle:
		var init webrtc.ICECandidateInit
		if err := json.Unmarshal([]byte(m.Trickle.CandidateInit), &init); err != nil {
			return nil, false
		}
		if init.Candidate != "" && !f.candidateAllowed(init.Candidate) {
			return nil, false
		}
	}
	if !changed {
		return data, true
	}
	if kind == websocket.TextMessage {
		data, err = protojson.Marshal(msg)
	} else {
		data, err = proto.Marshal(msg)
	}
	if err != nil {
		f.log.Error("re-encode filtered signal message", "err", err)
		return nil, false
	}
	return data, true
}

// iceServers keeps the servers' URLs the policy allows, each STUN/TURN
// host pinned to the address that was checked (a name resolved again by
// pion could answer differently); a TLS one (stuns:, turns:) keeps its name
// for certificate checks.
func (f *signalFilter) iceServers(in []*livekit.ICEServer) ([]*livekit.ICEServer, bool) {
	changed := false
	var out []*livekit.ICEServer
	for _, s := range in {
		var urls []string
		for _, raw := range s.Urls {
			u, ok := f.iceURL(raw)
			if !ok {
				f.log.Warn("room server offered an ICE server the policy refuses; dropped", "url", raw)
			}
			if u != raw {
				changed = true
			}
			if ok {
				urls = append(urls, u)
			}
		}
		if len(urls) == 0 {
			changed = true
			continue
		}
		s.Urls = urls
		out = append(out, s)
	}
	return out, changed
}

// iceURL checks one ICE server URL, scheme:host[:port][?transport=...],
// and returns it pinned.
func (f *signalFilter) iceURL(raw string) (string, bool) {
	scheme, rest, ok := strings.Cut(raw, ":")
	scheme = strings.ToLower(scheme)
	if !ok || (scheme != "stun" && scheme != "stuns" && scheme != "turn" && scheme != "turns") {
		return "", false
	}
	hostport, query, hasQuery := strings.Cut(rest, "?")
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), relayResolveTimeout)
	defer cancel()
	addrs, err := f.guard.Resolve(ctx, host)
	if err != nil || len(addrs) == 0 {
		return "", false
	}
	if scheme == "stuns" || scheme == "turns" {
		return raw, true
	}
	pin := addrs[0]
	for _, a := range addrs {
		if a.Is4() {
			pin = a // pion gathers over IPv4 everywhere; IPv6 may have no route
			break
		}
	}
	hp := pin.String()
	if port != "" {
		hp = net.JoinHostPort(hp, port)
	} else if pin.Is6() {
		hp = "[" + hp + "]"
	}
	out := scheme + ":" + hp
	if hasQuery {
		out += "?" + query
	}
	return out, true
}

// sdp drops the candidate lines the policy refuses.
func (f *signalFilter) sdp(in string) (string, bool) {
	lines := strings.SplitAfter(in, "\n")
	out := lines[:0]
	changed := false
	for _, l := range lines {
		attr, isCandidate := strings.CutPrefix(strings.TrimRight(l, "\r\n"), "a=")
		if isCandidate && strings.HasPrefix(attr, "candidate:") && !f.candidateAllowed(attr) {
			changed = true
			continue
		}
		out = append(out, l)
	}
	return strings.Join(out, ""), changed
}

// candidateAllowed checks an ICE candidate, "candidate:foundation component
// transport priority address port typ type ...": its address must be an IP
// the policy allows (a host name, an mDNS .local one included, would be
// resolved out of the guard's sight).
func (f *signalFilter) candidateAllowed(c string) bool {
	fields := strings.Fields(c)
	if len(fields) < 8 {
		return false
	}
	a, err := netip.ParseAddr(fields[4])
	if err != nil || !f.guard.AddrAllowed(a) {
		f.log.Warn("room server offered an ICE candidate the policy refuses; dropped", "address", fields[4])
		return false
	}
	return true
}
