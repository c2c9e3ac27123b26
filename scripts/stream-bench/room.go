package main

// Room mode (-room): the streams publish into a real livekit-server, as the
// fleet does, one worker process with many sessions (rendersession.Start),
// each room with one subscriber. The subscribers run in a separate child
// process so their CPU is not counted as the renderer's; they read RTP and
// drop it (no decoding), as a light stand-in for remote viewers.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	protologger "github.com/livekit/protocol/logger"
	lksdk "github.com/livekit/server-sdk-go/v2"
	"github.com/pion/webrtc/v4"

	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/rendersession"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/shared/livekit"
)

// roomConfig is how children reach the parent's livekit-server.
type roomConfig struct {
	URL, Key, Secret, Prefix string
}

func (rc roomConfig) args() []string {
	return []string{"-lk-url", rc.URL, "-lk-key", rc.Key, "-lk-secret", rc.Secret, "-room-prefix", rc.Prefix}
}

func (rc roomConfig) token(i int, identity string) (string, error) {
	return livekit.JoinToken(rc.Key, rc.Secret, fmt.Sprintf("%s-%d", rc.Prefix, i), identity, time.Hour)
}

// startSubscribers runs the subscriber child for n rooms and returns a stop.
func startSubscribers(self string, n int, rc roomConfig) (func(), error) {
	cmd := exec.Command(self, append([]string{"-subscribers", strconv.Itoa(n)}, rc.args()...)...)
	cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() { cmd.Process.Signal(os.Interrupt); cmd.Wait() }, nil
}

// subscribe joins n rooms as "viewer-i" and drains every track until
// interrupted.
func subscribe(n int, rc roomConfig) error {
	lksdk.SetLogger(protologger.LogRLogger(logr.Discard()))
	var rooms []*lksdk.Room
	for i := range n {
		tok, err := rc.token(i, fmt.Sprintf("viewer-%d", i))
		if err != nil {
			return err
		}
		cb := lksdk.NewRoomCallback()
		cb.OnTrackSubscribed = func(track *webrtc.TrackRemote, _ *lksdk.RemoteTrackPublication, _ *lksdk.RemoteParticipant) {
			go func() {
				for {
					if _, _, err := track.ReadRTP(); err != nil {
						return
					}
				}
			}()
		}
		r, err := lksdk.ConnectToRoomWithToken(rc.URL, tok, cb)
		if err != nil {
			return fmt.Errorf("subscriber %d: %w", i, err)
		}
		rooms = append(rooms, r)
	}
	sig := make(chan os.Signal, 1)
	signalNotify(sig)
	<-sig
	for _, r := range rooms {
		r.Disconnect()
	}
	return nil
}

// roomStream is one session publishing into its room.
type roomStream struct {
	s *rendersession.Session
}

// measureRoom is measure's room mode: n sessions in this process.
func measureRoom(n int, aspect, imagePath, wavPath string, warmup, duration time.Duration, rc roomConfig) (result, error) {
	speech, av, err := loadInputs(aspect, imagePath, wavPath)
	if err != nil {
		return result{}, err
	}
	rssBase := rssMB()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	lksdk.SetLogger(protologger.LogRLogger(logr.Discard()))
	audioSrv := audiows.NewServer(log, audiows.Limits{})
	streams := make([]*roomStream, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for i := range streams {
		tok, err := rc.token(i, room.AgentIdentity)
		if err != nil {
			return result{}, err
		}
		jctx, jcancel := context.WithTimeout(ctx, 30*time.Second)
		s, err := rendersession.Start(jctx, rendersession.Config{
			SessionID: fmt.Sprintf("sess_bench_%d", i), TokenHash: audiows.HashToken("x"),
			Room:     room.Config{URL: rc.URL, Token: tok, JoinTimeout: time.Minute, GracePeriod: time.Minute},
			Renderer: render.NewCPURenderer(av), Audio: audioSrv, Logger: log,
		})
		jcancel()
		if err != nil {
			return result{}, fmt.Errorf("stream %d: %w", i, err)
		}
		streams[i] = &roomStream{s: s}
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(rand.Int64N(int64(rendersession.FrameDuration))))
			feed(ctx, s.Buffer(), speech)
		}()
	}
	defer func() {
		cancel()
		for _, s := range streams {
			s.s.Stop()
			s.s.Wait()
		}
		wg.Wait()
	}()

	obs := make([]observed, n)
	for i, s := range streams {
		obs[i] = s.s
	}
	return measureWindow(obs, aspect, warmup, duration, rssBase, rc.livekitPid(), "")
}

// livekitPid finds the server from its URL's port via the environment the
// parent passed (STREAM_BENCH_LIVEKIT_PID); 0 when unknown.
func (rc roomConfig) livekitPid() int {
	pid, _ := strconv.Atoi(os.Getenv("STREAM_BENCH_LIVEKIT_PID"))
	return pid
}

// procCPU is a process's user+system CPU time from /proc (0 if unknown).
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name (which may hold spaces) start at ')'.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}
