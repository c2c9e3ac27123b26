// Package wsconn is the life cycle of one gorilla/websocket connection,
// written once for both of the renderer's WebSockets (ws_uri, the server
// side, and the ElevenLabs client): gorilla allows one concurrent writer and
// one concurrent reader, so one goroutine here owns every data write (queued
// text messages, pings, the close frame) while the caller's own goroutine
// stays the only reader; closing happens once, with the first code given.
//
// The reader's part: read in one loop, and call ReaderDone when it ends, so
// that a closing writer stops waiting for the peer's close reply.
package wsconn

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// Options bound the writer. Zero values take the defaults.
type Options struct {
	// Queue is how many messages may wait for the writer (default 64);
	// Urgent, how many replies may wait ahead of them (default 16).
	Queue, Urgent int
	// WriteTimeout bounds every write (default 10 s).
	WriteTimeout time.Duration
	// PingInterval is how often a ping frame goes out; zero or negative
	// sends none.
	PingInterval time.Duration
	// CloseGrace is how long the writer waits, after its close frame, for
	// the peer's reply (seen by the reader) before dropping the TCP
	// connection (default 1 s): dropping at once could reset the
	// connection while the peer still reads our last messages.
	CloseGrace time.Duration
	// FlushOnClose writes what is queued before the close frame (a
	// server's last answers and errors); otherwise it is discarded (a
	// client's audio nobody will hear).
	FlushOnClose bool
}

// ErrClosing is returned by the send methods once the connection is
// closing; ErrQueueFull by TrySend when the peer does not keep up.
var (
	ErrClosing   = errors.New("wsconn: connection closing")
	ErrQueueFull = errors.New("wsconn: send queue full")
)

// Conn is one connection's writer. Its methods are safe for concurrent use.
type Conn struct {
	ws  *websocket.Conn
	opt Options

	queue  chan []byte
	urgent chan []byte

	closing    chan struct{} // closed by the first Close, Abort or write failure
	readerDone chan struct{}
	writerDone chan struct{}
	closeOnce  sync.Once
	readerOnce sync.Once

	mu        sync.Mutex
	closeCode int
	closeText string
	abort     bool
	writeErr  error
}

// Start takes over writing to ws and starts the writer goroutine. Until
// Start, the caller may write to ws itself (a handshake).
func Start(ws *websocket.Conn, opt Options) *Conn {
	c := newConn(ws, opt)
	go c.writeLoop()
	return c
}

func newConn(ws *websocket.Conn, opt Options) *Conn {
	if opt.Queue <= 0 {
		opt.Queue = 64
	}
	if opt.Urgent <= 0 {
		opt.Urgent = 16
	}
	if opt.WriteTimeout <= 0 {
		opt.WriteTimeout = 10 * time.Second
	}
	if opt.CloseGrace <= 0 {
		opt.CloseGrace = time.Second
	}
	return &Conn{
		ws:         ws,
		opt:        opt,
		queue:      make(chan []byte, opt.Queue),
		urgent:     make(chan []byte, opt.Urgent),
		closing:    make(chan struct{}),
		readerDone: make(chan struct{}),
		writerDone: make(chan struct{}),
		closeCode:  websocket.CloseNormalClosure,
	}
}

// TrySend queues a text message without waiting: ErrQueueFull when the
// queue is full, ErrClosing once closing.
func (c *Conn) TrySend(data []byte) error {
	if c.isClosing() {
		return ErrClosing
	}
	select {
	case c.queue <- data:
		return nil
	default:
		return ErrQueueFull
	}
}

// Send queues a text message, waiting while the queue is full (each
// message ahead takes at most the write timeout) until the connection
// closes.
func (c *Conn) Send(data []byte) error {
	return c.put(c.queue, data)
}

// SendUrgent queues a reply that goes out ahead of everything Send queued
// (pongs, answers the peer waits for).
func (c *Conn) SendUrgent(data []byte) error {
	return c.put(c.urgent, data)
}

func (c *Conn) put(q chan []byte, data []byte) error {
	if c.isClosing() {
		return ErrClosing
	}
	select {
	case q <- data:
		return nil
	case <-c.closing:
		return ErrClosing
	}
}

// Close asks the writer to end the connection: write what is queued when
// FlushOnClose, send a close frame with code and text (none for
// websocket.CloseAbnormalClosure, which is never sent), wait up to
// CloseGrace for the reader to see the reply, and drop the connection.
// Only the first Close, Abort or write failure counts.
func (c *Conn) Close(code int, text string) {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closeCode, c.closeText = code, truncateCloseText(text)
		c.mu.Unlock()
		close(c.closing)
	})
}

// Abort drops the connection without writing anything more: for a peer
// too slow to read its messages.
func (c *Conn) Abort() {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.abort = true
		c.mu.Unlock()
		close(c.closing)
	})
}

// Closing is closed once the connection is going away.
func (c *Conn) Closing() <-chan struct{} { return c.closing }

func (c *Conn) isClosing() bool {
	select {
	case <-c.closing:
		return true
	default:
		return false
	}
}

// ReaderDone tells the writer the reader has stopped reading. Call it once
// the read loop has ended, whatever ended it.
func (c *Conn) ReaderDone() {
	c.readerOnce.Do(func() { close(c.readerDone) })
}

// WriterDone is closed when the writer goroutine has returned; the TCP
// connection is closed by then.
func (c *Conn) WriterDone() <-chan struct{} { return c.writerDone }

// WriteErr is the write that failed and ended the connection, if one did.
func (c *Conn) WriteErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writeErr
}

func (c *Conn) writeLoop() {
	defer close(c.writerDone)
	var tick <-chan time.Time
	if c.opt.PingInterval > 0 {
		t := time.NewTicker(c.opt.PingInterval)
		defer t.Stop()
		tick = t.C
	}
	for {
		// Closing goes before anything queued (which finish flushes or
		// discards), and urgent replies before the rest.
		if c.isClosing() {
			c.finish()
			return
		}
		select {
		case data := <-c.urgent:
			if !c.write(data) {
				return
			}
			continue
		default:
		}
		select {
		case <-c.closing:
			c.finish()
			return
		case data := <-c.urgent:
			if !c.write(data) {
				return
			}
		case data := <-c.queue:
			if !c.write(data) {
				return
			}
		case <-tick:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.opt.WriteTimeout)); err != nil {
				c.failed(fmt.Errorf("write ping: %w", err))
				return
			}
		}
	}
}

func (c *Conn) write(data []byte) bool {
	c.ws.SetWriteDeadline(time.Now().Add(c.opt.WriteTimeout))
	if err := c.ws.WriteMessage(websocket.TextMessage, data); err != nil {
		c.failed(fmt.Errorf("write: %w", err))
		return false
	}
	return true
}

// failed ends the connection after a write error; the reader's next read
// fails with it.
func (c *Conn) failed(err error) {
	c.mu.Lock()
	c.writeErr = err
	c.mu.Unlock()
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closeCode = websocket.CloseAbnormalClosure
		c.mu.Unlock()
		close(c.closing)
	})
	c.ws.Close()
}

func (c *Conn) finish() {
	c.mu.Lock()
	abort, code, text := c.abort, c.closeCode, c.closeText
	c.mu.Unlock()
	if abort {
		c.ws.Close()
		return
	}
	if c.opt.FlushOnClose && !c.flush() {
		return
	}
	if code != websocket.CloseAbnormalClosure {
		msg := websocket.FormatCloseMessage(code, text)
		if c.ws.WriteControl(websocket.CloseMessage, msg, time.Now().Add(c.opt.WriteTimeout)) == nil {
			t := time.NewTimer(c.opt.CloseGrace)
			select {
			case <-c.readerDone:
			case <-t.C:
			}
			t.Stop()
		}
	}
	c.ws.Close()
}

// flush writes everything still queued, replies first.
func (c *Conn) flush() bool {
	for _, q := range []chan []byte{c.urgent, c.queue} {
		for {
			select {
			case data := <-q:
				if !c.write(data) {
					return false
				}
				continue
			default:
			}
			break
		}
	}
	return true
}

// truncateCloseText keeps a close reason within the 123 bytes a close
// frame allows.
func truncateCloseText(s string) string {
	const maxLen = 120
	if len(s) <= maxLen {
		return s
	}
	return strings.ToValidUTF8(s[:maxLen], "")
}
