package wsconn

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// pair connects a client to a test server; the server's end arrives on
// server.
func pair(t *testing.T) (server chan *websocket.Conn, client *websocket.Conn) {
	t.Helper()
	server = make(chan *websocket.Conn, 1)
	up := websocket.Upgrader{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		server <- ws
	}))
	t.Cleanup(srv.Close)
	c, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return server, c
}

// readAll reads text messages until the connection ends and returns them
// with the close code seen (-1 for none).
func readAll(t *testing.T, c *websocket.Conn) (msgs []string, code int) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for {
		_, data, err := c.ReadMessage()
		if err != nil {
			var ce *websocket.CloseError
			if errors.As(err, &ce) && ce.Code != websocket.CloseAbnormalClosure {
				return msgs, ce.Code
			}
			return msgs, -1
		}
		msgs = append(msgs, string(data))
	}
}

func TestClose(t *testing.T) {
	for _, tc := range []struct {
		name     string
		flush    bool
		close    func(c *Conn)
		wantMsgs []string
		wantCode int
	}{
		{"flushes queued messages, replies first, then the close frame", true,
			func(c *Conn) { c.Close(websocket.ClosePolicyViolation, "bye") },
			[]string{"reply", "one", "two"}, websocket.ClosePolicyViolation},
		{"discards queued messages without FlushOnClose", false,
			func(c *Conn) { c.Close(websocket.CloseNormalClosure, "") },
			nil, websocket.CloseNormalClosure},
		{"the first close wins", true,
			func(c *Conn) {
				c.Close(websocket.CloseTryAgainLater, "first")
				c.Close(websocket.CloseNormalClosure, "second")
			},
			[]string{"reply", "one", "two"}, websocket.CloseTryAgainLater},
		{"abort drops the connection without a close frame", true,
			func(c *Conn) { c.Abort() },
			nil, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			server, client := pair(t)
			ws := <-server
			// Everything is queued and closed before the writer starts,
			// so what it writes does not depend on timing.
			c := newConn(ws, Options{Queue: 4, Urgent: 4, WriteTimeout: time.Second, CloseGrace: 200 * time.Millisecond, FlushOnClose: tc.flush})
			for _, m := range []string{"one", "two"} {
				if err := c.TrySend([]byte(m)); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.SendUrgent([]byte("reply")); err != nil {
				t.Fatal(err)
			}
			tc.close(c)
			go c.writeLoop()
			got, code := readAll(t, client)
			<-c.WriterDone()
			if strings.Join(got, ",") != strings.Join(tc.wantMsgs, ",") {
				t.Errorf("messages: got %q, want %q", got, tc.wantMsgs)
			}
			if code != tc.wantCode {
				t.Errorf("close code: got %d, want %d", code, tc.wantCode)
			}
			if err := c.Send([]byte("late")); !errors.Is(err, ErrClosing) {
				t.Errorf("Send after close: got %v, want ErrClosing", err)
			}
		})
	}
}

func TestTrySendRefusesAFullQueue(t *testing.T) {
	server, _ := pair(t)
	ws := <-server
	c := newConn(ws, Options{Queue: 1, Urgent: 1})
	if err := c.TrySend([]byte("a")); err != nil {
		t.Fatalf("first: got %v, want nil", err)
	}
	if err := c.TrySend([]byte("b")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("second: got %v, want ErrQueueFull", err)
	}
}

func TestSendWaitsForRoomAndStopsAtClose(t *testing.T) {
	server, _ := pair(t)
	ws := <-server
	c := newConn(ws, Options{Queue: 1, Urgent: 1})
	c.queue <- []byte("full")
	got := make(chan error, 1)
	go func() { got <- c.Send([]byte("waits")) }()
	select {
	case err := <-got:
		t.Fatalf("Send returned %v with the queue full", err)
	case <-time.After(50 * time.Millisecond):
	}
	c.Close(websocket.CloseNormalClosure, "")
	if err := <-got; !errors.Is(err, ErrClosing) {
		t.Errorf("got %v, want ErrClosing", err)
	}
}

func TestWriteFailureEndsTheConnection(t *testing.T) {
	server, client := pair(t)
	c := Start(<-server, Options{WriteTimeout: time.Second})
	client.Close()
	// Writes to a closed peer fail within a few messages (the first may
	// still fit in the socket buffer).
	deadline := time.After(5 * time.Second)
	for c.WriteErr() == nil {
		select {
		case <-deadline:
			t.Fatal("no write error after the peer closed")
		default:
		}
		_ = c.TrySend(make([]byte, 64<<10))
		time.Sleep(time.Millisecond)
	}
	<-c.WriterDone()
	select {
	case <-c.Closing():
	default:
		t.Error("Closing is open after a write failure")
	}
}

func TestPings(t *testing.T) {
	server, client := pair(t)
	c := Start(<-server, Options{PingInterval: 20 * time.Millisecond})
	defer c.Abort()
	pinged := make(chan struct{}, 1)
	client.SetPingHandler(func(string) error {
		select {
		case pinged <- struct{}{}:
		default:
		}
		return nil
	})
	go client.ReadMessage()
	select {
	case <-pinged:
	case <-time.After(2 * time.Second):
		t.Fatal("no ping within 2 s at a 20 ms interval")
	}
}

func TestCloseTextIsTruncatedToAFrame(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	got := truncateCloseText(long)
	if len(got) > 120 {
		t.Errorf("got %d bytes, want at most 120", len(got))
	}
	if !strings.HasPrefix(long, got) || len(got) < 118 {
		t.Errorf("got %q, want a whole-rune prefix of 118+ bytes", got)
	}
}
