// Command speak streams a WAV file to an avatar session's ws_uri in real
// time, the way a TTS engine would, and prints what the server says back.
//
//	go run ./scripts/speak -ws ws://127.0.0.1:8765/ws/sess_x \
//	    -session-id sess_x -session-token <token> -wav speech.wav
//
// It sends session.init, then agent.speak chunks of -chunk length at the
// file's own sample rate (or raw binary PCM with -binary, 16 kHz files
// only), then agent.speak_end, and exits once agent.speak_ended arrives.
// -interrupt-after sends agent.interrupt part way through.
package main

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"time"

	"github.com/gorilla/websocket"

	"avatarsvc/gpu-fleet/audio"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "speak:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("speak", flag.ContinueOnError)
	wsURI := fs.String("ws", "", "the session's ws_uri")
	sessionID := fs.String("session-id", "", "session id")
	sessionToken := fs.String("session-token", "", "session token")
	wavPath := fs.String("wav", "", "PCM16 WAV file to speak")
	chunk := fs.Duration("chunk", 100*time.Millisecond, "audio per message")
	binaryFrames := fs.Bool("binary", false, "send raw PCM16 binary frames (16 kHz files only)")
	interruptAfter := fs.Duration("interrupt-after", 0, "send agent.interrupt this long after the first chunk (0: never)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *wsURI == "" || *sessionID == "" || *wavPath == "" {
		return errors.New("-ws, -session-id and -wav are required")
	}
	f, err := os.Open(*wavPath)
	if err != nil {
		return err
	}
	pcm, rate, err := audio.ReadWAV(f)
	f.Close()
	if err != nil {
		return err
	}
	if *binaryFrames && rate != 16000 {
		return fmt.Errorf("-binary needs a 16 kHz file, %s is %d Hz", *wavPath, rate)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ws, _, err := websocket.DefaultDialer.DialContext(ctx, *wsURI, nil)
	if err != nil {
		return err
	}
	defer ws.Close()

	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- printEvents(ws, start) }()

	if err := ws.WriteJSON(map[string]any{"type": "session.init", "session_id": *sessionID, "session_token": *sessionToken}); err != nil {
		return err
	}
	per := int(int64(rate) * int64(*chunk) / int64(time.Second))
	ticker := time.NewTicker(*chunk)
	defer ticker.Stop()
	var interrupt <-chan time.Time
	if *interruptAfter > 0 {
		interrupt = time.After(*interruptAfter)
	}
	interrupted := false
	for i := 0; i < len(pcm); i += per {
		part := pcm[i:min(i+per, len(pcm))]
		raw := make([]byte, 2*len(part))
		for j, s := range part {
			binary.LittleEndian.PutUint16(raw[2*j:], uint16(s))
		}
		if *binaryFrames {
			err = ws.WriteMessage(websocket.BinaryMessage, raw)
		} else {
			err = ws.WriteJSON(map[string]any{"type": "agent.speak", "audio": base64.StdEncoding.EncodeToString(raw), "sample_rate": rate})
		}
		if err != nil {
			return err
		}
		select {
		case <-ticker.C:
		case <-interrupt:
			interrupt = nil
			fmt.Printf("%8.3fs -> agent.interrupt\n", time.Since(start).Seconds())
			if err := ws.WriteJSON(map[string]any{"type": "agent.interrupt"}); err != nil {
				return err
			}
			interrupted = true
			i = len(pcm) // stop sending
		case err := <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// After an interrupt there is no utterance left to end; the server
	// sends agent.speak_ended (interrupted) by itself.
	if !interrupted {
		if err := ws.WriteJSON(map[string]any{"type": "agent.speak_end"}); err != nil {
			return err
		}
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// printEvents prints every server message and returns once the utterance
// has ended (nil) or the connection failed.
func printEvents(ws *websocket.Conn, start time.Time) error {
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return fmt.Errorf("connection closed: %w", err)
		}
		fmt.Printf("%8.3fs <- %s\n", time.Since(start).Seconds(), data)
		var m struct {
			Type  string `json:"type"`
			Error string `json:"error"`
		}
		json.Unmarshal(data, &m)
		switch m.Type {
		case "agent.speak_ended":
			return nil
		case "session.ended":
			return errors.New("session ended")
		case "error":
			if m.Error == "First message must be session.init" || m.Error == "invalid session_id or session_token" {
				return errors.New(m.Error)
			}
		}
	}
}
