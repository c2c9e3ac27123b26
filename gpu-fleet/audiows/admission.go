package audiows

import (
	"log"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

// pendingByClient counts, per client, the connections that have not yet
// sent a valid session.init, so one address cannot hold the listener's
// pre-init places (MaxUnauthenticated) and lock everyone else out.
type pendingByClient struct {
	mu    sync.Mutex
	count map[netip.Prefix]int
}

// acquire takes one of client's places, or reports false when it has max.
func (p *pendingByClient) acquire(client netip.Prefix, max int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count[client] >= max {
		return false
	}
	if p.count == nil {
		p.count = make(map[netip.Prefix]int)
	}
	p.count[client]++
	return true
}

func (p *pendingByClient) release(client netip.Prefix) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.count[client] <= 1 {
		delete(p.count, client) // the map holds only clients with places taken
		return
	}
	p.count[client]--
}

// clientOf is whom a request counts against: the connection's remote
// address, or, when that is a trusted proxy, the nearest address in
// X-Forwarded-For that is not one (entries further left are whatever the
// client wrote, so they are never believed). An IPv6 client counts by its
// /64, which one host usually has whole; an address that cannot be read
// counts as one shared unknown client.
func clientOf(r *http.Request, trusted []netip.Prefix) netip.Prefix {
	addr, ok := parseHostAddr(r.RemoteAddr)
	if ok && isTrusted(addr, trusted) {
		hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
		for i := len(hops) - 1; i >= 0; i-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[i]))
			if err != nil {
				break // unreadable: the proxy's own peer is the best we know
			}
			addr = hop.Unmap()
			if !isTrusted(addr, trusted) {
				break
			}
		}
	}
	if !ok {
		return netip.Prefix{}
	}
	bits := 32
	if addr.Is6() {
		bits = 64
	}
	p, _ := addr.Prefix(bits)
	return p
}

func parseHostAddr(hostport string) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(hostport)
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap().WithZone(""), true
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// HTTP timeouts of the listener HTTPServer returns. The upgrade is one small
// GET, so a client that has not sent its headers within HeaderTimeout (a
// socket opened and left silent) is dropped; the upgrader clears these
// deadlines on the WebSocket, whose own limits take over.
const (
	// requestTimeout bounds reading a whole request and writing its answer.
	requestTimeout = 10 * time.Second
	// idleTimeout: a kept-alive connection with no new request is closed.
	idleTimeout = 30 * time.Second
	// maxHeaderBytes: an upgrade request's headers are a few hundred bytes.
	maxHeaderBytes = 16 << 10
)

// HTTPServer returns the http.Server to serve s with: header, request and
// idle timeouts, so sockets that never finish their upgrade are closed, not
// kept. errorLog may be nil.
func (s *Server) HTTPServer(errorLog *log.Logger) *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.limits.HeaderTimeout,
		ReadTimeout:       requestTimeout,
		WriteTimeout:      requestTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          errorLog,
	}
}
