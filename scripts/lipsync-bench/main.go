// Command lipsync-bench measures how fast speech moves the avatar's mouth,
// for each way speech reaches a renderer, in one run against the same
// session and the same subscriber:
//
//   - ws_uri: a client streams PCM over the session's WebSocket;
//   - in-room agent: a voice agent on the real LiveKit Agents framework
//     (scripts/agent/avatar-agent.mjs, @livekit/agents'
//     voice.DataStreamAudioOutput) streams byte streams to the avatar.
//
// Each of -n segments starts at a voiced onset with the mouth at rest. The
// figure is the time from the sender handing the segment's first audio to
// its transport to the first video frame, decoded by a subscriber in the
// same local livekit-server, whose mouth is open (roomtest.MouthMoving).
// It includes the renderer's frame clock (a segment waits up to 40 ms for
// the next tick), rendering, VP8 encoding, the SFU and decoding, so it
// bounds "first frame with mouth motion published" from above.
//
//	go run ./scripts/lipsync-bench -n 20
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/room"
	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/gpu-fleet/testfiles"
	"avatarsvc/scripts/benchrig"
	"avatarsvc/scripts/benchtable"
	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/livekit"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lipsync-bench:", err)
		os.Exit(1)
	}
}

const (
	sessionID   = "sess_lipsync_bench"
	roomName    = "lipsync-bench"
	segment     = time.Second
	restBetween = 700 * time.Millisecond // the mouth closes again between segments
)

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("lipsync-bench", flag.ContinueOnError)
	n := fs.Int("n", 20, "segments per path")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := localstack.RepoRoot()
	if err != nil {
		return err
	}
	lab, err := benchrig.Start(ctx)
	if err != nil {
		return err
	}
	defer lab.Close()
	av := roomtest.Face(roomtest.PanicT{}, render.Square)
	sess, err := lab.Session(ctx, sessionID, roomName, av, nil)
	if err != nil {
		return err
	}
	defer func() { sess.Stop(); sess.Wait() }()
	viewer := lab.Viewer(roomtest.PanicT{}, roomName, "viewer", av)
	defer viewer.Room.Disconnect()
	roomtest.WaitFor(roomtest.PanicT{}, "the avatar's video", func() bool { n, _, _ := viewer.Counts(); return n > 25 })

	pcm := roomtest.Speech(roomtest.PanicT{})
	onset := voicedOnset(pcm)
	seg := pcm[onset : onset+int(segment.Seconds()*16000)]

	// ws_uri: the whole segment goes out at once, as a TTS client would.
	ws := roomtest.DialWS(roomtest.PanicT{}, lab.WSBase+"/ws/"+sessionID, sessionID, "tok")
	var wsSends []time.Time
	for range *n {
		wsSends = append(wsSends, time.Now())
		for i := 0; i < len(seg); i += 640 {
			ws.SendPCM(seg[i:min(i+640, len(seg))])
		}
		ws.Send(map[string]any{"type": "agent.speak_end"})
		ws.Await("agent.speak_ended")
		time.Sleep(restBetween)
	}
	fmt.Fprintf(os.Stderr, "lipsync-bench: ws_uri path done (%d segments)\n", *n)

	agentSends, err := runAgent(ctx, root, lab.LiveKit, *n, onset)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "lipsync-bench: in-room agent path done (%d segments)\n", len(agentSends))

	wsLat, wsMissed := toMouth(viewer, wsSends)
	agentLat, agentMissed := toMouth(viewer, agentSends)
	fmt.Fprintf(out, "\nSpeech in -> first decoded frame with the mouth open, %d segments per path, local livekit-server (load %s)\n\n", *n, benchtable.LoadAvg())
	fmt.Fprintf(out, "| path | p50 | p90 | p99 | max | missed | target |\n|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(out, "| ws_uri (PCM over the session WebSocket) | %s | %s | %s | %s | %d | - |\n",
		benchtable.Percentile(wsLat, 50), benchtable.Percentile(wsLat, 90), benchtable.Percentile(wsLat, 99), benchtable.Percentile(wsLat, 100), wsMissed)
	fmt.Fprintf(out, "| in-room agent (@livekit/agents byte streams) | %s | %s | %s | %s | %d | p50 <= 60 ms |\n",
		benchtable.Percentile(agentLat, 50), benchtable.Percentile(agentLat, 90), benchtable.Percentile(agentLat, 99), benchtable.Percentile(agentLat, 100), agentMissed)
	return nil
}

// runAgent runs the Node agent's bench mode and returns when it handed each
// segment's first frame to the framework.
func runAgent(ctx context.Context, root string, lk *localstack.LiveKit, n, onset int) ([]time.Time, error) {
	// A voice agent is a participant of kind agent: the avatar hears no other.
	token, err := livekit.AgentToken(lk.APIKey, lk.APISecret, roomName, "bench-agent", nil, time.Hour)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(n)*5*time.Second+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", filepath.Join("agent", "avatar-agent.mjs"),
		lk.URL, token, room.AgentIdentity, testfiles.Path(testfiles.Speech16k), "bench")
	cmd.Dir = filepath.Join(root, "scripts")
	cmd.Env = append(os.Environ(), "BENCH_SEGMENTS="+strconv.Itoa(n), "BENCH_ONSET="+strconv.Itoa(onset))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("avatar-agent bench: %v\n%s", err, stderr.String())
	}
	// rtc-node logs to stdout too: the result is the last line.
	lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
	var res struct{ Sends []float64 }
	if err := json.Unmarshal(lines[len(lines)-1], &res); err != nil {
		return nil, fmt.Errorf("avatar-agent bench output %q: %v", stdout.String(), err)
	}
	sends := make([]time.Time, len(res.Sends))
	for i, ms := range res.Sends {
		sends[i] = time.UnixMicro(int64(ms * 1000))
	}
	return sends, nil
}

// toMouth is, per send, the time to the first decoded frame after it with
// the mouth open; sends whose segment never opened the mouth count as
// missed.
func toMouth(v *roomtest.Viewer, sends []time.Time) (lat []time.Duration, missed int) {
	for _, at := range sends {
		found := false
		for _, f := range v.FramesBetween(at, at.Add(segment)) {
			if f.Mouth >= roomtest.MouthMoving {
				lat = append(lat, f.At.Sub(at))
				found = true
				break
			}
		}
		if !found {
			missed++
		}
	}
	return lat, missed
}

// voicedOnset is the first sample of the first 20 ms with clear speech
// energy, so every segment starts with the mouth's cue.
func voicedOnset(pcm []int16) int {
	const win = 320
	for i := 0; i+win <= len(pcm); i += win {
		var sum float64
		for _, s := range pcm[i : i+win] {
			sum += float64(s) * float64(s)
		}
		if math.Sqrt(sum/win) > 2000 {
			return i
		}
	}
	return 0
}
