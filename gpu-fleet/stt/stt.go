// Package stt recognises speech in a stream of 16 kHz mono PCM with
// Debian's pocketsphinx (0.8+5prealpha, with sphinxbase) through a small cgo
// wrapper, giving interim and final transcripts per utterance as the audio
// arrives. Utterances are cut by pocketsphinx's voice activity detector.
package stt

/*
#cgo pkg-config: pocketsphinx
#include <stdarg.h>
#include <stdlib.h>
#include <malloc.h>
#include <stdio.h>
#include <pocketsphinx.h>
#include <sphinxbase/err.h>

// last_err keeps the last error sphinxbase logged on this thread, so that a
// failed ps_init can say why while logging stays off.
static __thread char last_err[512];

static void log_cb(void *user_data, err_lvl_t lvl, const char *fmt, ...) {
	(void)user_data;
	if (lvl < ERR_ERROR) return;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(last_err, sizeof last_err, fmt, ap);
	va_end(ap);
}

// quiet replaces sphinxbase's logger, which writes hundreds of lines to
// stderr per decoder, and turns off its log file, which cmd_ln_init prints
// the whole configuration to. Both are process-wide; -logfn would instead
// reopen a shared log file on every ps_init, racing with decoders in use.
static void quiet(void) {
	err_set_logfp(NULL);
	err_set_callback(log_cb, NULL);
}

// decoder_new wraps cmd_ln_init, which is variadic and so out of cgo's
// reach, and ps_init. On failure errbuf gets the library's last error.
static ps_decoder_t *decoder_new(const char *hmm, const char *lm, const char *dict,
		char *errbuf, size_t errlen) {
	last_err[0] = '\0';
	cmd_ln_t *cfg = cmd_ln_init(NULL, ps_args(), TRUE,
		"-hmm", hmm, "-lm", lm, "-dict", dict, NULL);
	ps_decoder_t *ps = NULL;
	if (cfg != NULL) {
		ps = ps_init(cfg);
		cmd_ln_free_r(cfg); // ps_init keeps its own reference
	}
	if (ps == NULL) {
		snprintf(errbuf, errlen, "%s", last_err);
		return NULL;
	}
	// Segment times count from the start of the stream, not the utterance.
	ps_start_stream(ps);
	if (ps_start_utt(ps) < 0) {
		snprintf(errbuf, errlen, "starting an utterance: %s", last_err);
		ps_free(ps);
		return NULL;
	}
	return ps;
}

// feed decodes n samples and returns whether the voice activity detector is
// in speech after them, or -1 on error.
static int feed(ps_decoder_t *ps, const int16 *pcm, int n) {
	if (ps_process_raw(ps, pcm, n, FALSE, FALSE) < 0) return -1;
	return ps_get_in_speech(ps);
}

// span finds the first and last frame (in the stream) of the real words of
// the current hypothesis, leaving out <s>, </s>, <sil> and fillers such as
// [NOISE]. It returns 0 when there are none.
static int span(ps_decoder_t *ps, int *sf, int *ef) {
	int found = 0;
	for (ps_seg_t *s = ps_seg_iter(ps); s != NULL; s = ps_seg_next(s)) {
		const char *w = ps_seg_word(s);
		if (w == NULL || w[0] == '<' || w[0] == '[') continue;
		int a, b;
		ps_seg_frames(s, &a, &b);
		if (!found) *sf = a;
		*ef = b;
		found = 1;
	}
	return found;
}

static size_t heap_in_use(void) {
	struct mallinfo2 m = mallinfo2();
	return m.uordblks + m.hblkhd;
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"
)

// SampleRate is the rate of the PCM Write takes (the renderer's internal rate
// and the en-us model's).
const SampleRate = 16000

// Debian's pocketsphinx-en-us model: the generic US English acoustic
// model, language model and CMU dictionary.
const (
	DefaultHMM  = "/usr/share/pocketsphinx/model/en-us/en-us"
	DefaultLM   = "/usr/share/pocketsphinx/model/en-us/en-us.lm.bin"
	DefaultDict = "/usr/share/pocketsphinx/model/en-us/cmudict-en-us.dict"
)

const (
	// blockSamples is what the decoder is fed at a time: one 10 ms frame
	// shift. Feeding whole blocks at fixed stream positions, and looking at
	// the voice activity detector after each, makes results independent of
	// how the caller chunks its audio, and notices speech ending within
	// 10 ms (one large ps_process_raw could span a pause and run two
	// utterances together).
	blockSamples = SampleRate / 100
	// frameDuration is the length of a pocketsphinx frame (-frate 100).
	frameDuration = 10 * time.Millisecond
	// interimEvery is how much speech passes between interim hypotheses.
	interimEvery = 300 * time.Millisecond
)

// ErrClosed reports use of a closed Recognizer.
var ErrClosed = errors.New("stt: recognizer is closed")

// Config names the model files. Empty fields take the Debian defaults.
type Config struct {
	HMM  string // acoustic model directory
	LM   string // n-gram language model (ARPA or binary)
	Dict string // pronunciation dictionary
}

// Result is a transcript of one utterance.
type Result struct {
	// Text is the best hypothesis, lower case words separated by spaces.
	Text string
	// Final is false for an interim hypothesis, which a later Result with
	// the same SegmentID replaces; the final one ends the utterance.
	Final bool
	// Start and End are the offsets in the audio written since New of the
	// first and last word of Text (10 ms resolution).
	Start, End time.Duration
	// SegmentID numbers the utterances of a Recognizer that gave a
	// Result, from 0.
	SegmentID int
}

var quietOnce sync.Once

// Recognizer is one stream's decoder. It is not safe for concurrent use:
// use one per session. Each holds its own copy of the models, about 100 MB
// of C heap with the defaults, and loading them takes most of a second
// (BenchmarkRecognize measures both), so create it before the session needs
// it. pocketsphinx's language model keeps scratch state while scoring,
// which is why decoders cannot share one.
type Recognizer struct {
	ps       *C.ps_decoder_t
	pending  []int16 // the start of the next block
	fed      int64   // samples given to the decoder
	inSpeech bool
	segment  int
	// sinceInterim counts the speech samples since the last interim check.
	sinceInterim int
	lastInterim  string
}

// New loads the models and starts a stream at offset 0.
func New(cfg Config) (*Recognizer, error) {
	if cfg.HMM == "" {
		cfg.HMM = DefaultHMM
	}
	if cfg.LM == "" {
		cfg.LM = DefaultLM
	}
	if cfg.Dict == "" {
		cfg.Dict = DefaultDict
	}
	// pocketsphinx reports a missing file from deep in its loaders, and the
	// defaults are Debian's paths: name the package that provides them.
	for _, p := range []string{cfg.HMM + "/mdef", cfg.LM, cfg.Dict} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("stt: model file missing (the defaults come with Debian's pocketsphinx-en-us): %w", err)
		}
	}
	quietOnce.Do(func() { C.quiet() })
	hmm, lm, dict := C.CString(cfg.HMM), C.CString(cfg.LM), C.CString(cfg.Dict)
	defer C.free(unsafe.Pointer(hmm))
	defer C.free(unsafe.Pointer(lm))
	defer C.free(unsafe.Pointer(dict))
	errbuf := make([]byte, 512)
	ps := C.decoder_new(hmm, lm, dict, (*C.char)(unsafe.Pointer(&errbuf[0])), C.size_t(len(errbuf)))
	if ps == nil {
		return nil, fmt.Errorf("stt: loading pocketsphinx models: %s", C.GoString((*C.char)(unsafe.Pointer(&errbuf[0]))))
	}
	return &Recognizer{ps: ps, pending: make([]int16, 0, blockSamples)}, nil
}

// Write decodes the next stretch of 16 kHz mono PCM, of any length, and
// returns the results it completed, in order: interim hypotheses at most
// every 300 ms of speech (only when changed and not empty), and a final one
// when the utterance ends, which the detector decides after 0.5 s of
// silence. An utterance whose hypothesis stays empty (a cough) gives no
// Result unless an interim one was given.
func (r *Recognizer) Write(pcm []int16) ([]Result, error) {
	if r.ps == nil {
		return nil, ErrClosed
	}
	var out []Result
	for len(pcm) > 0 {
		var block []int16
		if len(r.pending) == 0 && len(pcm) >= blockSamples {
			block, pcm = pcm[:blockSamples], pcm[blockSamples:]
		} else {
			n := min(blockSamples-len(r.pending), len(pcm))
			r.pending = append(r.pending, pcm[:n]...)
			pcm = pcm[n:]
			if len(r.pending) < blockSamples {
				break
			}
			block = r.pending
		}
		var err error
		if out, err = r.feed(block, out); err != nil {
			return out, err
		}
		r.pending = r.pending[:0]
	}
	return out, nil
}

// Flush ends the utterance in progress, as if silence had followed, and
// returns its final Result (or nothing, when no speech is pending). The
// stream goes on: a later Write continues at the same offset.
func (r *Recognizer) Flush() ([]Result, error) {
	if r.ps == nil {
		return nil, ErrClosed
	}
	var out []Result
	if len(r.pending) > 0 {
		var err error
		if out, err = r.feed(r.pending, out); err != nil {
			return out, err
		}
		r.pending = r.pending[:0]
	}
	if r.inSpeech {
		return r.endUtterance(out)
	}
	return out, nil
}

// InSpeech reports whether the voice activity detector considered the
// audio written so far (to the last whole 10 ms) speech. It turns true
// about 100 ms into speech, which is the signal to stop the avatar talking
// over the user: check it after each Write. The detector learns the noise
// floor as it goes, taking about a second, so the start of a stream or a
// jump in background noise (a microphone unmuted) can set it off for up to
// a second; such an utterance gives no Result unless words are recognised.
func (r *Recognizer) InSpeech() bool { return r.inSpeech }

// Offset is the duration of the audio written so far.
func (r *Recognizer) Offset() time.Duration {
	return samplesToDuration(r.fed + int64(len(r.pending)))
}

// Close frees the decoder. It is safe to call twice.
func (r *Recognizer) Close() {
	if r.ps != nil {
		C.ps_free(r.ps)
		r.ps = nil
	}
}

func (r *Recognizer) feed(block []int16, out []Result) ([]Result, error) {
	rv := C.feed(r.ps, (*C.int16)(unsafe.Pointer(&block[0])), C.int(len(block)))
	if rv < 0 {
		return out, fmt.Errorf("stt: decoding at %v failed", r.Offset())
	}
	r.fed += int64(len(block))
	speech := rv != 0
	switch {
	case speech && !r.inSpeech:
		r.inSpeech = true
		r.sinceInterim = 0
	case speech:
		r.sinceInterim += len(block)
		if samplesToDuration(int64(r.sinceInterim)) >= interimEvery {
			r.sinceInterim = 0
			if res, ok := r.hypothesis(false); ok && res.Text != r.lastInterim {
				r.lastInterim = res.Text
				out = append(out, res)
			}
		}
	case r.inSpeech:
		return r.endUtterance(out)
	}
	return out, nil
}

// endUtterance finishes the decoder's utterance, appends its final Result
// and starts the next one.
func (r *Recognizer) endUtterance(out []Result) ([]Result, error) {
	if C.ps_end_utt(r.ps) < 0 {
		return out, fmt.Errorf("stt: ending utterance %d failed", r.segment)
	}
	res, ok := r.hypothesis(true)
	if ok || r.lastInterim != "" {
		out = append(out, res)
		r.segment++
	}
	r.inSpeech = false
	r.lastInterim = ""
	if C.ps_start_utt(r.ps) < 0 {
		return out, fmt.Errorf("stt: starting utterance %d failed", r.segment)
	}
	return out, nil
}

// hypothesis reads the current best hypothesis; ok is false when it is
// empty.
func (r *Recognizer) hypothesis(final bool) (Result, bool) {
	res := Result{Final: final, SegmentID: r.segment, Start: r.Offset(), End: r.Offset()}
	hyp := C.ps_get_hyp(r.ps, nil)
	if hyp == nil {
		return res, false
	}
	res.Text = C.GoString(hyp)
	var sf, ef C.int
	if C.span(r.ps, &sf, &ef) != 0 {
		res.Start = time.Duration(sf) * frameDuration
		res.End = time.Duration(ef+1) * frameDuration
	}
	return res, res.Text != ""
}

// cHeapInUse is the C heap allocated, for BenchmarkRecognize: Go's memory
// statistics do not see the decoder's.
func cHeapInUse() int64 { return int64(C.heap_in_use()) }

func samplesToDuration(n int64) time.Duration {
	return time.Duration(n) * time.Second / SampleRate
}
