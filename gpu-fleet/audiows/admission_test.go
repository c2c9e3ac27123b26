package audiows_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/playout"
)

// listen serves s the way the worker does (HTTPServer) on 127.0.0.1, which
// clients from any 127/8 address reach over lo.
func listen(t *testing.T, s *audiows.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := s.HTTPServer(nil)
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	return ln.Addr().String()
}

// dialerFrom dials from the local address ip, so one test process can be
// several clients.
func dialerFrom(ip string) *net.Dialer {
	return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: wait}
}

func wsDialerFrom(ip string) *websocket.Dialer {
	return &websocket.Dialer{NetDialContext: dialerFrom(ip).DialContext, HandshakeTimeout: wait}
}

// TestSilentSocketsDoNotLockOutOtherClients: 200 silent sockets from
// 127.0.0.2, half of them raw TCP that never finish the upgrade and half
// WebSockets that never send session.init, leave a client on 127.0.0.1 able
// to connect and initialize, with the default caps. Of the attacker's
// upgrades only MaxPendingPerClient (4 by default) get through. The init
// deadline is lengthened so none of them is dropped while the test runs (on
// a loaded machine), which keeps the count exact; TestSilentSocketsAreClosed
// covers the deadlines.
func TestSilentSocketsDoNotLockOutOtherClients(t *testing.T) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	s := audiows.NewServer(log, audiows.Limits{InitTimeout: time.Minute})
	if _, err := s.Register(sessionID, audiows.HashToken(token), playout.New(0)); err != nil {
		t.Fatal(err)
	}
	addr := listen(t, s)
	url := "ws://" + addr + "/ws/" + sessionID

	const silent = 200
	var (
		mu       sync.Mutex
		upgraded int
		refused  int
		wg       sync.WaitGroup
	)
	for i := range silent {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%2 == 0 {
				c, err := dialerFrom("127.0.0.2").Dial("tcp", addr)
				if err != nil {
					t.Errorf("raw socket %d: %v", i, err)
					return
				}
				t.Cleanup(func() { c.Close() })
				return
			}
			ws, res, err := wsDialerFrom("127.0.0.2").Dial(url, nil)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				upgraded++
				t.Cleanup(func() { ws.Close() })
			case res != nil && res.StatusCode == http.StatusServiceUnavailable:
				refused++
			default:
				t.Errorf("silent websocket %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	if upgraded != 4 || refused != silent/2-4 {
		t.Errorf("attacker upgrades: got %d through and %d refused, want 4 and %d", upgraded, refused, silent/2-4)
	}

	ws, res, err := wsDialerFrom("127.0.0.1").Dial(url, nil)
	if err != nil {
		status := 0
		if res != nil {
			status = res.StatusCode
		}
		t.Fatalf("client on 127.0.0.1 while 127.0.0.2 holds %d silent sockets: got %v (HTTP %d), want connected", silent, err, status)
	}
	defer ws.Close()
	newClient(t, ws).init()
}

// TestSilentSocketsAreClosed: a socket that never sends its upgrade request
// is closed after HeaderTimeout, and a WebSocket that never sends
// session.init after InitTimeout, so neither is held.
func TestSilentSocketsAreClosed(t *testing.T) {
	limits := audiows.Limits{HeaderTimeout: 300 * time.Millisecond, InitTimeout: 300 * time.Millisecond}
	tests := []struct {
		name string
		open func(t *testing.T, addr string) net.Conn
	}{
		{"raw TCP, no request", func(t *testing.T, addr string) net.Conn {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{"upgraded, no session.init", func(t *testing.T, addr string) net.Conn {
			ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/ws/"+sessionID, nil)
			if err != nil {
				t.Fatal(err)
			}
			return ws.NetConn()
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := audiows.NewServer(slog.New(slog.NewJSONHandler(io.Discard, nil)), limits)
			c := tt.open(t, listen(t, s))
			defer c.Close()
			// Read until the server closes; the deadline is only a liveness
			// guard far above the 300 ms limits.
			c.SetReadDeadline(time.Now().Add(wait))
			_, err := io.Copy(io.Discard, c)
			if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("silent socket still open after %v", wait)
			}
		})
	}
}

// TestTrustedProxyClients: behind a trusted proxy each X-Forwarded-For
// client has its own places; from an untrusted peer the header is ignored,
// so a client cannot escape its cap by writing it.
func TestTrustedProxyClients(t *testing.T) {
	limits := audiows.Limits{MaxPendingPerClient: 1, InitTimeout: 5 * time.Second}
	tests := []struct {
		name       string
		trusted    string
		wantSecond int
	}{
		{"proxy trusted: two clients", "127.0.0.1/32", http.StatusSwitchingProtocols},
		{"no proxy trusted: one client writing the header", "", http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := limits
			if tt.trusted != "" {
				l.TrustedProxies = []netip.Prefix{netip.MustParsePrefix(tt.trusted)}
			}
			s := audiows.NewServer(slog.New(slog.NewJSONHandler(io.Discard, nil)), l)
			url := "ws://" + listen(t, s) + "/ws/" + sessionID
			status := func(forwardedFor string) int {
				h := http.Header{"X-Forwarded-For": {forwardedFor}}
				ws, res, err := wsDialerFrom("127.0.0.1").DialContext(context.Background(), url, h)
				if err != nil {
					if res == nil {
						t.Fatal(err)
					}
					return res.StatusCode
				}
				t.Cleanup(func() { ws.Close() })
				return http.StatusSwitchingProtocols
			}
			if got := status("198.51.100.1"); got != http.StatusSwitchingProtocols {
				t.Fatalf("first client: got HTTP %d, want 101", got)
			}
			if got := status("198.51.100.2"); got != tt.wantSecond {
				t.Fatalf("second client: got HTTP %d, want %d", got, tt.wantSecond)
			}
		})
	}
}
