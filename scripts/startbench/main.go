// Command startbench measures how fast a started session becomes usable, on
// the real local stack (DynamoDB Local, the SQS server, S3, livekit-server)
// with one warm renderer worker in this process:
//
//   - PUT start -> real ws_uri: from sending PUT start until the sessions
//     table holds the renderer's ws_uri (what a repeated PUT start returns;
//     the table is polled every 2 ms so the figure is not the client's poll
//     interval);
//   - PUT start -> first video frame: until a LiveKit participant that joined
//     the room beforehand decoded the avatar's first VP8 frame.
//
// Each iteration creates a session for the face photo (a data URI, stored in
// S3 like a caller's), starts it, measures, and ends it.
//
//	go run ./scripts/startbench -n 30
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/gpu-fleet/testfiles"
	"avatarsvc/gpu-fleet/worker"
	"avatarsvc/scripts/benchtable"
	"avatarsvc/scripts/localstack"
	"avatarsvc/scripts/stacktest"
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/livekit"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "startbench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("startbench", flag.ContinueOnError)
	n := fs.Int("n", 30, "measured sessions (after 2 warm-up ones)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logDir, err := os.MkdirTemp("", "startbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(logDir)
	stack, err := stacktest.StartRealTime(ctx)
	if err != nil {
		return err
	}
	defer stack.Stop()
	lk, err := localstack.StartLiveKit(ctx, localstack.Options{LogDir: logDir})
	if err != nil {
		return err
	}
	defer lk.Stop()

	env := map[string]string{"WS_LISTEN": "127.0.0.1:0", "ROOM_ALLOW_PREFIXES": "127.0.0.1/32", "QUEUE_WAIT": "20s", "WORKER_SLOTS": "4"}
	for k, v := range stack.Env {
		env[k] = v
	}
	settings, err := worker.SettingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		return err
	}
	p, err := worker.Start(ctx, settings, slog.New(slog.NewJSONHandler(io.Discard, nil)), nil)
	if err != nil {
		return err
	}
	wctx, stopWorker := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(wctx) }()
	defer func() { stopWorker(); <-done }()

	face, err := os.ReadFile(testfiles.Path(testfiles.FacePNG))
	if err != nil {
		return err
	}
	img, err := avatarimage.Decode(bytes.NewReader(face), 0)
	if err != nil {
		return err
	}
	prepared, err := avatarimage.Prepare(img, 512, 512)
	if err != nil {
		return err
	}
	dataURI := "data:image/png;base64," + base64.StdEncoding.EncodeToString(face)

	var toURI, toFrame []time.Duration
	var acct stacktest.Account
	for i := -2; i < *n; i++ {
		if i%20 == 0 || i == -2 { // a fresh key before its per-minute write quota runs out
			if acct, err = stack.NewAccount(ctx, "pro"); err != nil {
				return err
			}
		}
		uri, frame, err := once(ctx, stack, lk, acct, dataURI, prepared, fmt.Sprintf("bench-%d", i+2))
		if err != nil {
			return err
		}
		if i >= 0 {
			toURI, toFrame = append(toURI, uri), append(toFrame, frame)
		}
		fmt.Fprintf(os.Stderr, "startbench: session %d/%d: ws_uri %v, first frame %v\n", i+1, *n, uri.Round(time.Millisecond), frame.Round(time.Millisecond))
	}
	fmt.Fprintf(out, "\nPUT start on the local stack, one warm renderer worker, %d sessions (load %s)\n\n", *n, benchtable.LoadAvg())
	fmt.Fprintf(out, "| measure | p50 | p90 | p99 | target |\n|---|---|---|---|---|\n")
	fmt.Fprintf(out, "| PUT start -> real ws_uri | %s | %s | %s | p50 <= 300 ms, p99 <= 1 s |\n", benchtable.Percentile(toURI, 50), benchtable.Percentile(toURI, 90), benchtable.Percentile(toURI, 99))
	fmt.Fprintf(out, "| PUT start -> first decoded video frame | %s | %s | %s | p50 <= 1 s |\n", benchtable.Percentile(toFrame, 50), benchtable.Percentile(toFrame, 90), benchtable.Percentile(toFrame, 99))
	return nil
}

// once runs one session: viewer in the room, create, start, measure, end.
func once(ctx context.Context, stack *stacktest.Stack, lk *localstack.LiveKit, acct stacktest.Account, dataURI string, prepared *avatarimage.Prepared, roomName string) (toURI, toFrame time.Duration, err error) {
	rendererTok, err := livekit.JoinToken(lk.APIKey, lk.APISecret, roomName, room.AgentIdentity, time.Hour)
	if err != nil {
		return 0, 0, err
	}
	viewerTok, err := livekit.JoinToken(lk.APIKey, lk.APISecret, roomName, "viewer", time.Hour)
	if err != nil {
		return 0, 0, err
	}
	v := roomtest.JoinViewer(roomtest.PanicT{}, lk.URL, viewerTok, prepared)
	defer v.Room.Disconnect()

	var created struct {
		Session struct {
			ID string `json:"session_id"`
		} `json:"session"`
	}
	if err := stack.Call("POST", "/v1/sessions", acct.LiveKey, map[string]any{
		"avatar": dataURI, "room": map[string]any{"platform": "livekit", "url": lk.URL, "token": rendererTok},
	}, &created); err != nil {
		return 0, 0, err
	}
	id := created.Session.ID
	began := time.Now()
	if err := stack.Call("PUT", "/v1/sessions/"+id+"/start", acct.LiveKey, nil, nil); err != nil {
		return 0, 0, err
	}
	deadline := began.Add(30 * time.Second)
	for toURI == 0 {
		s, err := stack.App.Store.GetSession(ctx, acct.User.ID, id)
		if err != nil {
			return 0, 0, err
		}
		if s.WSURI != domain.TryAgain && s.WSURI != "" {
			toURI = time.Since(began)
		} else if s.Status == domain.StatusEnded {
			return 0, 0, fmt.Errorf("session %s ended before serving: %s", id, s.EndReason)
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("no ws_uri for %s after 30 s", id)
		}
		time.Sleep(2 * time.Millisecond)
	}
	for v.FirstFrameAt().IsZero() {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("no video frame for %s after 30 s", id)
		}
		time.Sleep(2 * time.Millisecond)
	}
	toFrame = v.FirstFrameAt().Sub(began)
	return toURI, toFrame, stack.Call("POST", "/v1/sessions/"+id+"/end", acct.LiveKey, nil, nil)
}
