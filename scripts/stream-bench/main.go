// Command stream-bench measures how many paced avatar streams one box
// holds: N sessions' pipelines in one process, each rendering (CPU
// renderer), encoding VP8 and Opus at 25 fps while a feeder streams speech
// into its playout buffer in real time (40 ms chunks; 8.8 s utterances with
// 1 s pauses). Encoded media is written to a discarding publisher, not to a
// room: this measures the renderer box, not the network. With -room the
// sessions publish into a real livekit-server instead, one process with many
// sessions as the fleet runs, with a subscriber per room (room.go).
//
//	go run ./scripts/stream-bench -streams 1,8,10,12 -aspect 1:1,4:3
//
// Each configuration runs in a fresh child process so memory figures are
// its own. It prints a markdown table:
//   - late %: frames written more than 20 ms after their slot
//   - CPU/stream: process CPU time (getrusage) / wall time / N, in cores
//   - RSS/stream: resident memory growth over the idle process / N
//   - latency: a speech chunk's arrival in playout -> the encoded frame
//     showing its first sample (p50 / p99)
//   - A/V skew: the largest gap between writing a frame and writing the
//     audio packets made from the same 40 ms (both carry the same
//     timestamp); Opus takes the 16 kHz audio directly.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/encode/opus"
	"avatarsvc/gpu-fleet/encode/vp8"
	"avatarsvc/gpu-fleet/playout"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/gpu-fleet/rendersession"
	"avatarsvc/gpu-fleet/testfiles"
	"avatarsvc/scripts/localstack"
	"avatarsvc/shared/avatarimage"
)

func signalNotify(c chan os.Signal) { signal.Notify(c, os.Interrupt, syscall.SIGTERM) }

type result struct {
	Aspect       string  `json:"aspect"`
	Streams      int     `json:"streams"`
	FPS          float64 `json:"fps_per_stream"`
	LatePct      float64 `json:"late_pct"`
	MaxLateMS    float64 `json:"max_late_ms"`
	Resyncs      uint64  `json:"resyncs"`
	CPUPerStream float64 `json:"cpu_cores_per_stream"`
	RSSPerStream float64 `json:"rss_mb_per_stream"`
	LatP50MS     float64 `json:"latency_p50_ms"`
	LatP99MS     float64 `json:"latency_p99_ms"`
	AVSkewMaxMS  float64 `json:"av_skew_max_ms"`
	SpeakingPct  float64 `json:"speaking_pct"`
	LiveKitCPU   float64 `json:"livekit_cpu_cores,omitempty"` // room mode
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "stream-bench:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("stream-bench", flag.ContinueOnError)
	streams := fs.String("streams", "1,8,10,12", "stream counts to measure, comma separated")
	aspects := fs.String("aspect", "1:1,4:3", "aspect ratios to measure, comma separated")
	duration := fs.Duration("duration", 10*time.Second, "measured time per configuration")
	warmup := fs.Duration("warmup", 2*time.Second, "unmeasured time before it")
	image := fs.String("image", "", "avatar image (default gpu-fleet/testfiles/images/face-astronaut.png)")
	wav := fs.String("wav", "", "speech WAV (default gpu-fleet/testfiles/audio/speech-16k.wav)")
	child := fs.Bool("child", false, "internal: measure one configuration and print JSON")
	cpuProfile := fs.String("cpuprofile", "", "with -child: write a CPU profile of the measured window here")
	roomMode := fs.Bool("room", false, "publish into a real livekit-server (started here) with one subscriber per room")
	subscribers := fs.Int("subscribers", 0, "internal: join this many rooms and drain them")
	var rc roomConfig
	fs.StringVar(&rc.URL, "lk-url", "", "internal: livekit-server URL")
	fs.StringVar(&rc.Key, "lk-key", "", "internal: livekit API key")
	fs.StringVar(&rc.Secret, "lk-secret", "", "internal: livekit API secret")
	fs.StringVar(&rc.Prefix, "room-prefix", "", "internal: room name prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *subscribers > 0 {
		return subscribe(*subscribers, rc)
	}
	if *image == "" {
		*image = testfiles.Path(testfiles.FacePNG)
	}
	if *wav == "" {
		*wav = testfiles.Path(testfiles.Speech16k)
	}
	if *child {
		n, err := strconv.Atoi(*streams)
		if err != nil {
			return err
		}
		measureOne := func() (result, error) {
			if rc.URL != "" {
				return measureRoom(n, *aspects, *image, *wav, *warmup, *duration, rc)
			}
			return measure(n, *aspects, *image, *wav, *warmup, *duration, *cpuProfile)
		}
		r, err := measureOne()
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(r)
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	where := "pipelines write to a discarding publisher (no room)"
	if *roomMode {
		logDir, err := os.MkdirTemp("", "stream-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(logDir)
		lk, err := localstack.StartLiveKit(context.Background(), localstack.Options{LogDir: logDir})
		if err != nil {
			return err
		}
		defer lk.Stop()
		rc = roomConfig{URL: lk.URL, Key: lk.APIKey, Secret: lk.APISecret}
		os.Setenv("STREAM_BENCH_LIVEKIT_PID", strconv.Itoa(lk.Pid()))
		where = "one process publishing into a real livekit-server, one subscriber per room (another process)"
	}
	fmt.Printf("stream-bench: %d CPUs, %v measured per row after %v warmup; %s\n\n",
		numCPU(), *duration, *warmup, where)
	fmt.Println("| aspect | streams | fps/stream | late % | max late | CPU/stream | RSS/stream | latency p50 | latency p99 | A/V skew max | speaking | livekit-server CPU |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, aspect := range strings.Split(*aspects, ",") {
		for _, ns := range strings.Split(*streams, ",") {
			childArgs := []string{"-child", "-streams", ns, "-aspect", aspect, "-image", *image, "-wav", *wav,
				"-warmup", warmup.String(), "-duration", duration.String()}
			if *roomMode {
				rc.Prefix = fmt.Sprintf("bench-%s-%s-%d", strings.ReplaceAll(aspect, ":", "x"), ns, time.Now().UnixNano())
				childArgs = append(childArgs, rc.args()...)
				n, _ := strconv.Atoi(ns)
				stop, err := startSubscribers(self, n, rc)
				if err != nil {
					return err
				}
				defer stop()
			}
			cmd := exec.Command(self, childArgs...)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, os.Stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("%s x%s: %w", aspect, ns, err)
			}
			var r result
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				return fmt.Errorf("%s x%s: %w: %s", aspect, ns, err, out.String())
			}
			lkCPU := "-"
			if *roomMode {
				lkCPU = fmt.Sprintf("%.2f cores", r.LiveKitCPU)
			}
			fmt.Printf("| %s | %d | %.1f | %.2f | %.0f ms | %.3f cores | %.1f MB | %.1f ms | %.1f ms | %.1f ms | %.0f%% | %s |\n",
				r.Aspect, r.Streams, r.FPS, r.LatePct, r.MaxLateMS, r.CPUPerStream, r.RSSPerStream,
				r.LatP50MS, r.LatP99MS, r.AVSkewMaxMS, r.SpeakingPct, lkCPU)
		}
	}
	return nil
}

// discard is a Publisher that drops what it is given.
type discard struct{}

func (discard) WriteVideo([]byte, time.Time) error { return nil }
func (discard) WriteAudio([]byte, time.Time) error { return nil }
func (discard) KeyframeRequested() bool            { return false }

type stream struct {
	buffer   *playout.Buffer
	pipeline *rendersession.Pipeline
	video    *vp8.Encoder
	audio    *opus.Encoder
}

func measure(n int, aspect, imagePath, wavPath string, warmup, duration time.Duration, cpuProfile string) (result, error) {
	speech, av, err := loadInputs(aspect, imagePath, wavPath)
	if err != nil {
		return result{}, err
	}
	w, h := av.Image.Rect.Dx(), av.Image.Rect.Dy()
	rssBase := rssMB()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))

	streams := make([]*stream, n)
	for i := range streams {
		s := &stream{buffer: playout.New(0)}
		if s.video, err = vp8.NewEncoder(vp8.Config{Width: w, Height: h}); err != nil {
			return result{}, err
		}
		if s.audio, err = opus.NewEncoder(rendersession.OpusInputRate, 1); err != nil {
			return result{}, err
		}
		s.pipeline, err = rendersession.NewPipeline(rendersession.PipelineConfig{
			Buffer: s.buffer, Renderer: render.NewCPURenderer(av), Video: s.video, Audio: s.audio,
			Publisher: discard{}, Logger: log,
		})
		if err != nil {
			return result{}, err
		}
		streams[i] = s
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for _, s := range streams {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := s.pipeline.Run(ctx); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			// Audio arrives at a random phase to the frame clock, as it
			// would from a client; aligned phases would bias latency.
			time.Sleep(time.Duration(rand.Int64N(int64(rendersession.FrameDuration))))
			feed(ctx, s.buffer, speech)
		}()
		// Spread the streams' frame clocks over the frame period, as
		// sessions started at random times would be.
		time.Sleep(time.Duration(rand.Int64N(int64(rendersession.FrameDuration))))
	}

	observed := make([]observed, n)
	for i, s := range streams {
		observed[i] = s.pipeline
	}
	r, err := measureWindow(observed, aspect, warmup, duration, rssBase, 0, cpuProfile)
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		return result{}, err
	}
	for _, s := range streams {
		s.video.Close()
		s.audio.Close()
	}
	return r, err
}

// observed is what a measurement reads from a stream; pipelines and room
// sessions both provide it.
type observed interface {
	Stats() rendersession.Stats
	Latencies() []time.Duration
}

// measureWindow lets the streams run through warmup, then measures them for
// duration: frames, lateness, CPU and memory of this process (and of the
// livekit-server with pid lkPid, when not 0), latencies and A/V skew.
func measureWindow(streams []observed, aspect string, warmup, duration time.Duration, rssBase float64, lkPid int, cpuProfile string) (result, error) {
	n := len(streams)
	time.Sleep(warmup)
	before := make([]rendersession.Stats, n)
	latStart := make([]int, n)
	for i, s := range streams {
		before[i] = s.Stats()
		latStart[i] = len(s.Latencies())
	}
	if cpuProfile != "" {
		f, err := os.Create(cpuProfile)
		if err != nil {
			return result{}, err
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
	}
	lk0 := procCPU(lkPid)
	cpu0, wall0 := cpuTime(), time.Now()
	time.Sleep(duration)
	cpu1, wall1 := cpuTime(), time.Now()
	lk1 := procCPU(lkPid)
	if cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	rss := rssMB()

	var frames, late, speaking, resyncs uint64
	var maxLate, maxSkew time.Duration
	var lats []time.Duration
	for i, s := range streams {
		st := s.Stats()
		frames += st.Frames - before[i].Frames
		late += st.LateFrames - before[i].LateFrames
		speaking += st.SpeakingFrames - before[i].SpeakingFrames
		resyncs += st.Resyncs - before[i].Resyncs
		maxLate = max(maxLate, st.MaxLateness)
		maxSkew = max(maxSkew, st.MaxAVSkew)
		if all := s.Latencies(); latStart[i] < len(all) {
			lats = append(lats, all[latStart[i]:]...)
		}
	}
	wall := wall1.Sub(wall0)
	slices.Sort(lats)
	return result{
		Aspect:       aspect,
		Streams:      n,
		FPS:          float64(frames) / float64(n) / wall.Seconds(),
		LatePct:      100 * float64(late) / float64(max(frames, 1)),
		MaxLateMS:    ms(maxLate),
		Resyncs:      resyncs,
		CPUPerStream: (cpu1 - cpu0).Seconds() / wall.Seconds() / float64(n),
		RSSPerStream: (rss - rssBase) / float64(n),
		LatP50MS:     ms(percentile(lats, 0.50)),
		LatP99MS:     ms(percentile(lats, 0.99)),
		AVSkewMaxMS:  ms(maxSkew),
		SpeakingPct:  100 * float64(speaking) / float64(max(frames, 1)),
		LiveKitCPU:   (lk1 - lk0).Seconds() / wall.Seconds(),
	}, nil
}

// feed streams speech into buffer in real time: 40 ms chunks, each
// utterance the whole clip, then a second of silence.
func feed(ctx context.Context, buffer *playout.Buffer, speech []int16) {
	tick := time.NewTicker(playout.FrameDuration)
	defer tick.Stop()
	for {
		for i := 0; i < len(speech); i += playout.FrameSamples {
			buffer.Push(speech[i:min(i+playout.FrameSamples, len(speech))], time.Now())
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
		buffer.End()
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(p*float64(len(sorted))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssMB reads the process's resident set from /proc.
func rssMB() float64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

func numCPU() int {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return 0
	}
	return strings.Count(string(data), "\nprocessor") + 1
}

// loadInputs reads the speech clip and prepares the avatar at aspect's size.
func loadInputs(aspect, imagePath, wavPath string) ([]int16, *avatarimage.Prepared, error) {
	speech, err := loadSpeech(wavPath)
	if err != nil {
		return nil, nil, err
	}
	w, h, err := render.Dimensions(render.AspectRatio(aspect))
	if err != nil {
		return nil, nil, err
	}
	av, err := loadAvatar(imagePath, w, h)
	return speech, av, err
}

func loadSpeech(path string) ([]int16, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	pcm, rate, err := audio.ReadWAV(f)
	if err != nil {
		return nil, err
	}
	if rate != playout.SampleRate {
		pcm = audio.Resample(pcm, rate, playout.SampleRate)
	}
	return pcm, nil
}

func loadAvatar(path string, w, h int) (*avatarimage.Prepared, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, err := avatarimage.Decode(f, 0)
	if err != nil {
		return nil, err
	}
	return avatarimage.Prepare(img, w, h)
}
