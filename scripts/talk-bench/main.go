// Command talk-bench measures the avatar's own conversation (provider
// local; gpu-fleet/conversation) in a real local livekit-server:
//
//   - word error rate on Debian's pocketsphinx-testdata LibriVox clips
//     through the room (a participant's microphone -> Opus -> LiveKit ->
//     the renderer's decoder -> pocketsphinx), beside the same clips fed
//     straight to the recogniser;
//
//   - reply latency: the person's last voiced sample -> the first audio
//     packet of the avatar's answer with speech energy at a subscriber
//     (p50 / p99). It includes pocketsphinx's end-of-utterance wait
//     (0.5 s of silence), synthesis, the 25 fps tick, Opus and the SFU;
//
//   - CPU: the process's CPU while the clips play, with the conversation on
//     and, in a second identical room, off; the difference is what
//     listening and answering cost on top of rendering.
//
//     go run ./scripts/talk-bench -rounds 2
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"syscall"
	"time"

	"avatarsvc/gpu-fleet/conversation"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/gpu-fleet/stt"
	"avatarsvc/gpu-fleet/stttest"
	"avatarsvc/scripts/benchrig"
	"avatarsvc/scripts/benchtable"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "talk-bench:", err)
		os.Exit(1)
	}
}

// pause follows each clip: long enough for the recogniser to end the
// utterance and for the avatar to answer before the next one.
const pause = 9 * time.Second

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("talk-bench", flag.ContinueOnError)
	rounds := fs.Int("rounds", 2, "times the five clips are played through the room")
	if err := fs.Parse(args); err != nil {
		return err
	}
	clips, err := stttest.Clips()
	if err != nil {
		return err
	}
	direct, err := directWER(clips)
	if err != nil {
		return err
	}

	lab, err := benchrig.Start(ctx)
	if err != nil {
		return err
	}
	defer lab.Close()

	talking, err := playThrough(ctx, lab, "talk-on", clips, *rounds, true)
	if err != nil {
		return err
	}
	silent, err := playThrough(ctx, lab, "talk-off", clips, *rounds, false)
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "\nThe avatar's own conversation (provider local), %d x 5 LibriVox clips, local livekit-server (load %s)\n\n", *rounds, benchtable.LoadAvg())
	fmt.Fprintf(out, "| measure | value |\n|---|---|\n")
	fmt.Fprintf(out, "| WER, clips straight to pocketsphinx | %.1f%% |\n", 100*direct)
	fmt.Fprintf(out, "| WER, through the room (mic -> Opus -> LiveKit -> decode -> STT) | %.1f%% |\n", 100*talking.wer)
	fmt.Fprintf(out, "| person stops speaking -> first answer audio at a subscriber, p50 | %s |\n", benchtable.Percentile(talking.replies, 50))
	fmt.Fprintf(out, "| same, p99 (%d answers, %d missing) | %s |\n", len(talking.replies), talking.missing, benchtable.Percentile(talking.replies, 99))
	fmt.Fprintf(out, "| process CPU, session + conversation (cores) | %.3f |\n", talking.cores)
	fmt.Fprintf(out, "| process CPU, same room without conversation (cores) | %.3f |\n", silent.cores)
	fmt.Fprintf(out, "| listening + answering on top of rendering (cores) | %.3f |\n", talking.cores-silent.cores)
	return nil
}

func directWER(clips []stttest.Clip) (float64, error) {
	edits, words := 0, 0
	for _, c := range clips {
		rec, err := stt.New(stt.Config{})
		if err != nil {
			return 0, err
		}
		var finals []string
		for i := 0; i < len(c.PCM); i += 320 {
			rs, err := rec.Write(c.PCM[i:min(i+320, len(c.PCM))])
			if err != nil {
				rec.Close()
				return 0, err
			}
			finals = appendFinals(finals, rs)
		}
		rs, err := rec.Flush()
		rec.Close()
		if err != nil {
			return 0, err
		}
		e, w := stttest.WordErrors(c.Reference, strings.Join(appendFinals(finals, rs), " "))
		edits, words = edits+e, words+w
	}
	return float64(edits) / float64(words), nil
}

func appendFinals(to []string, rs []stt.Result) []string {
	for _, r := range rs {
		if r.Final && r.Text != "" {
			to = append(to, r.Text)
		}
	}
	return to
}

type roomResult struct {
	wer     float64
	replies []time.Duration
	missing int
	cores   float64
}

// playThrough runs one session in roomName, plays the clips as a person's
// microphone and measures.
func playThrough(ctx context.Context, lab *benchrig.Rig, roomName string, clips []stttest.Clip, rounds int, talk bool) (roomResult, error) {
	av := roomtest.Face(roomtest.PanicT{}, render.Square)
	viewer := lab.Viewer(roomtest.PanicT{}, roomName, "person", av)
	defer viewer.Room.Disconnect()
	captions := viewer.ListenCaptions()
	var conv *conversation.Config
	if talk {
		conv = &conversation.Config{Transcribe: true, Brain: conversation.Local{}, Greeting: "Hello."}
	}
	sess, err := lab.Session(ctx, "sess_"+roomName, roomName, av, conv)
	if err != nil {
		return roomResult{}, err
	}
	defer func() { sess.Stop(); sess.Wait() }()
	roomtest.WaitFor(roomtest.PanicT{}, "the avatar's video", func() bool { n, _, _ := viewer.Counts(); return n > 25 })
	mic := viewer.PublishMic()
	mic.Play(roomtest.Silence(3 * time.Second)) // the greeting, and the recogniser's noise estimate

	var res roomResult
	var stops []time.Time
	cpu0, wall0 := cpuTime(), time.Now()
	edits, words := 0, 0
	for r := 0; r < rounds; r++ {
		for _, c := range clips {
			before := len(captions.All())
			start := time.Now()
			mic.Play(c.PCM)
			stops = append(stops, start.Add(time.Duration(lastVoiced(c.PCM))*time.Second/16000))
			mic.Play(roomtest.Silence(pause))
			if talk {
				var heard []string
				for _, cp := range captions.All()[before:] {
					if cp.TrackID == mic.SID && cp.Final {
						heard = append(heard, cp.Text)
					}
				}
				e, w := stttest.WordErrors(c.Reference, strings.Join(heard, " "))
				edits, words = edits+e, words+w
			}
			fmt.Fprintf(os.Stderr, "talk-bench: %s round %d %s\n", roomName, r+1, c.Name)
		}
	}
	res.cores = (cpuTime() - cpu0).Seconds() / time.Since(wall0).Seconds()
	if talk {
		res.wer = float64(edits) / float64(words)
		for _, stop := range stops {
			if at := viewer.FirstLoudAfter(stop); !at.IsZero() && at.Sub(stop) < pause {
				res.replies = append(res.replies, at.Sub(stop))
			} else {
				res.missing++
			}
		}
	}
	return res, nil
}

// lastVoiced is the index just past the last 20 ms of pcm with speech
// energy: where the person stopped speaking.
func lastVoiced(pcm []int16) int {
	const win = 320
	last := 0
	for i := 0; i+win <= len(pcm); i += win {
		var sum float64
		for _, s := range pcm[i : i+win] {
			sum += float64(s) * float64(s)
		}
		if math.Sqrt(sum/win) > 500 {
			last = i + win
		}
	}
	return last
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
