// Package tts speaks text with Debian's libespeak-ng through a small cgo
// wrapper, streaming 16 kHz mono PCM (the renderer's internal format) as it
// is synthesised.
//
// espeak-ng keeps all its state in globals and is not thread safe, so the
// package drives one process-wide engine, one synthesis at a time. The
// engine runs far faster than real time (see BenchmarkSynthesize) and a
// synthesis never waits on its caller: chunks queue up while the caller
// plays them out, so a caller that paces its audio to real time does not
// hold the engine for the length of the speech.
package tts

/*
#cgo pkg-config: espeak-ng
#include <stdlib.h>
#include <string.h>
#include <espeak-ng/espeak_ng.h>
#include <espeak-ng/speak_lib.h>

extern int goSynthChunk(short *wav, int n);

// synth_cb hands each buffer espeak-ng fills to Go. It is called on the
// thread of espeak_ng_Synthesize, in synchronous mode; returning 1 aborts.
static int synth_cb(short *wav, int n, espeak_EVENT *events) {
	(void)events;
	return goSynthChunk(n > 0 ? wav : NULL, n > 0 ? n : 0);
}

// engine_init sets espeak-ng up for synchronous synthesis into synth_cb
// (no audio device). The espeak_Initialize shortcut would exit() the
// process when its data is missing; these calls return the status instead.
static espeak_ng_STATUS engine_init(int buf_ms, int *rate) {
	espeak_ng_InitializePath(NULL);
	espeak_ng_STATUS st = espeak_ng_Initialize(NULL);
	if (st != ENS_OK) return st;
	st = espeak_ng_InitializeOutput(ENOUTPUT_MODE_SYNCHRONOUS, buf_ms, NULL);
	if (st != ENS_OK) return st;
	espeak_SetSynthCallback(synth_cb);
	*rate = espeak_ng_GetSampleRate();
	return ENS_OK;
}

// current_voice is the identifier of the loaded voice ("gmw/en-US+f3"),
// which shows whether espeak-ng found the variant asked for.
static const char *current_voice(void) {
	espeak_VOICE *v = espeak_GetCurrentVoice();
	return v != NULL && v->identifier != NULL ? v->identifier : "";
}

static espeak_ng_STATUS synth(const char *text) {
	return espeak_ng_Synthesize(text, strlen(text) + 1, 0, POS_CHARACTER, 0,
		espeakCHARS_UTF8, NULL, NULL);
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/shared/voices"
)

// SampleRate is the rate of the PCM the package produces.
const SampleRate = audio.SampleRate

// bufferMillis is the length of the buffers espeak-ng hands over, and so
// the longest a chunk waits before it is emitted (the first one included).
const bufferMillis = 50

// ErrUnknownVoice reports a voice ID that is not in shared/voices or that
// the installed espeak-ng cannot load.
var ErrUnknownVoice = errors.New("tts: unknown voice")

var (
	// engine is held (a token in it) by the one synthesis running; a
	// channel rather than a mutex so that waiting for it honours ctx.
	engine = make(chan struct{}, 1)
	// loadedVoice is the voice espeak-ng has loaded, guarded by engine:
	// loading one reads its files and dictionary, so it is skipped when the
	// voice does not change.
	loadedVoice string
	// active is the job espeak-ng's callback feeds, guarded by engine.
	active *job
	// testChunkHook, when set by a test, runs in the callback after each
	// chunk is queued.
	testChunkHook func()
)

// nativeRate initialises espeak-ng on first use and returns its sample
// rate (22050 Hz for every Debian voice).
var nativeRate = sync.OnceValues(func() (int, error) {
	var rate C.int
	if st := C.engine_init(bufferMillis, &rate); st != C.ENS_OK {
		return 0, fmt.Errorf("tts: initialising espeak-ng (is Debian's espeak-ng-data installed?): %s", statusText(st))
	}
	if rate <= 0 {
		return 0, fmt.Errorf("tts: espeak-ng reports a sample rate of %d", rate)
	}
	return int(rate), nil
})

func statusText(st C.espeak_ng_STATUS) string {
	buf := make([]byte, 256)
	C.espeak_ng_GetStatusCodeMessage(st, (*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)))
	return C.GoString((*C.char)(unsafe.Pointer(&buf[0])))
}

// job is one synthesis: the callback resamples and queues chunks, the
// caller's goroutine takes them and emits them.
type job struct {
	rs     *audio.Resampler // used by the callback only
	native int              // samples espeak-ng produced, at its own rate

	mu     sync.Mutex
	chunks [][]int16
	ready  chan struct{} // signalled (capacity 1) when chunks grows
	stop   atomic.Bool   // set by the caller to make the callback abort
}

func (j *job) push(pcm []int16) {
	if len(pcm) == 0 {
		return
	}
	j.mu.Lock()
	j.chunks = append(j.chunks, pcm)
	j.mu.Unlock()
	select {
	case j.ready <- struct{}{}:
	default:
	}
}

func (j *job) take() [][]int16 {
	j.mu.Lock()
	defer j.mu.Unlock()
	c := j.chunks
	j.chunks = nil
	return c
}

// chunk is called by goSynthChunk for every buffer espeak-ng fills; it
// reports whether synthesis should go on.
func (j *job) chunk(pcm []int16) bool {
	if j.stop.Load() {
		return false
	}
	if len(pcm) == 0 {
		return true
	}
	j.native += len(pcm)
	j.push(j.rs.Process(pcm))
	if testChunkHook != nil {
		testChunkHook()
	}
	return !j.stop.Load()
}

// Synthesize speaks text with the voice voiceID (a shared/voices ID; ""
// means voices.Default) and calls emit with consecutive chunks of 16 kHz
// mono PCM, each at most about 50 ms long, as espeak-ng produces them. emit
// runs on the caller's goroutine and may keep its chunk. Synthesize returns
// when all the audio was emitted, when emit returns an error (which it
// returns) or when ctx is done (ctx.Err()). Text that is empty or only
// white space gives no audio and no error.
func Synthesize(ctx context.Context, text, voiceID string, emit func(pcm []int16) error) error {
	_, err := synthesize(ctx, text, voiceID, emit)
	return err
}

// SynthesizeAll is Synthesize collecting all the audio.
func SynthesizeAll(ctx context.Context, text, voiceID string) ([]int16, error) {
	var out []int16
	err := Synthesize(ctx, text, voiceID, func(pcm []int16) error {
		out = append(out, pcm...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// synthesize is Synthesize, also returning the job for tests.
func synthesize(ctx context.Context, text, voiceID string, emit func(pcm []int16) error) (*job, error) {
	if voiceID == "" {
		voiceID = voices.Default
	}
	if _, ok := voices.Lookup(voiceID); !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownVoice, voiceID)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// espeak-ng reads C strings: a NUL would end the text early, and it
	// wants UTF-8.
	text = strings.ToValidUTF8(strings.ReplaceAll(text, "\x00", " "), " ")
	if strings.TrimSpace(text) == "" {
		return nil, nil
	}
	rate, err := nativeRate()
	if err != nil {
		return nil, err
	}

	j := &job{rs: audio.NewResampler(rate, SampleRate), ready: make(chan struct{}, 1)}
	done := make(chan error, 1)
	go func() { done <- j.run(ctx, text, voiceID) }()

	var synthErr error
	finished := false
	for {
		for _, c := range j.take() {
			if err := ctx.Err(); err != nil {
				return j, j.abort(done, finished, err)
			}
			if err := emit(c); err != nil {
				return j, j.abort(done, finished, err)
			}
		}
		if finished {
			return j, synthErr
		}
		select {
		case <-j.ready:
		case synthErr = <-done:
			// Emit what the last callbacks queued, then stop.
			finished = true
		case <-ctx.Done():
			return j, j.abort(done, finished, ctx.Err())
		}
	}
}

// abort makes the synthesis stop and waits for it to let go of the engine,
// then returns err.
func (j *job) abort(done <-chan error, finished bool, err error) error {
	j.stop.Store(true)
	if !finished {
		<-done
	}
	return err
}

// run takes the engine, loads the voice and synthesises text into j.
func (j *job) run(ctx context.Context, text, voiceID string) error {
	select {
	case engine <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-engine }()
	if j.stop.Load() {
		return nil
	}
	if err := loadVoice(voiceID); err != nil {
		return err
	}
	active = j
	defer func() { active = nil }()

	ctext := C.CString(text)
	defer C.free(unsafe.Pointer(ctext))
	if st := C.synth(ctext); st != C.ENS_OK && !j.stop.Load() {
		return fmt.Errorf("tts: synthesising with voice %q: %s", voiceID, statusText(st))
	}
	if !j.stop.Load() {
		j.push(j.rs.Flush())
	}
	return nil
}

// loadVoice makes espeak-ng speak with voiceID. The caller holds engine.
func loadVoice(voiceID string) error {
	if voiceID == loadedVoice {
		return nil
	}
	loadedVoice = ""
	cid := C.CString(voiceID)
	defer C.free(unsafe.Pointer(cid))
	if st := C.espeak_ng_SetVoiceByName(cid); st != C.ENS_OK {
		return fmt.Errorf("%w %q: espeak-ng: %s", ErrUnknownVoice, voiceID, statusText(st))
	}
	// espeak-ng ignores a variant it cannot find and speaks the base voice.
	if _, variant, ok := strings.Cut(voiceID, "+"); ok {
		if got := C.GoString(C.current_voice()); !strings.HasSuffix(got, "+"+variant) {
			return fmt.Errorf("%w %q: espeak-ng loaded %q without the variant", ErrUnknownVoice, voiceID, got)
		}
	}
	loadedVoice = voiceID
	return nil
}
