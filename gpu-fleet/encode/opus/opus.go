// Package opus encodes and decodes Opus with Debian's libopus through a small
// cgo wrapper. It builds with plain `go test ./...`, unlike
// gopkg.in/hraban/opus.v2, which needs libopusfile or a build tag.
package opus

/*
#cgo pkg-config: opus
#include <opus.h>

static int enc_setup(OpusEncoder *e, int bitrate) {
	int err = opus_encoder_ctl(e, OPUS_SET_BITRATE(bitrate));
	if (err != OPUS_OK) return err;
	err = opus_encoder_ctl(e, OPUS_SET_SIGNAL(OPUS_SIGNAL_VOICE));
	if (err != OPUS_OK) return err;
	// Complexity 5 halves the encoder's CPU against the default 10 at a
	// barely audible cost for speech; it is what WebRTC uses on mobiles.
	err = opus_encoder_ctl(e, OPUS_SET_COMPLEXITY(5));
	if (err != OPUS_OK) return err;
	err = opus_encoder_ctl(e, OPUS_SET_INBAND_FEC(1));
	if (err != OPUS_OK) return err;
	return opus_encoder_ctl(e, OPUS_SET_PACKET_LOSS_PERC(5));
}
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// FrameDuration is the packet duration the encoder expects, in milliseconds.
const FrameDuration = 20

// maxPacket is the largest Opus packet a 20 ms frame can produce.
const maxPacket = 1500

// DefaultBitrate suits speech in a WebRTC room.
const DefaultBitrate = 32000

// Encoder compresses 20 ms PCM frames. It is not safe for concurrent use.
type Encoder struct {
	e          *C.OpusEncoder
	sampleRate int
	channels   int
	out        []byte
}

// NewEncoder opens a VOIP (low-delay speech) encoder. sampleRate is one of
// 8000, 12000, 16000, 24000, 48000; WebRTC uses 48000 with 1 channel here.
func NewEncoder(sampleRate, channels int) (*Encoder, error) {
	var rc C.int
	e := C.opus_encoder_create(C.opus_int32(sampleRate), C.int(channels), C.OPUS_APPLICATION_VOIP, &rc)
	if rc != C.OPUS_OK || e == nil {
		return nil, fmt.Errorf("opus: encoder at %d Hz x %d: %s", sampleRate, channels, C.GoString(C.opus_strerror(rc)))
	}
	if rc := C.enc_setup(e, DefaultBitrate); rc != C.OPUS_OK {
		C.opus_encoder_destroy(e)
		return nil, fmt.Errorf("opus: configuring encoder: %s", C.GoString(C.opus_strerror(rc)))
	}
	return &Encoder{e: e, sampleRate: sampleRate, channels: channels, out: make([]byte, maxPacket)}, nil
}

// FrameSamples is the number of samples per channel in one 20 ms frame.
func (e *Encoder) FrameSamples() int { return e.sampleRate * FrameDuration / 1000 }

// Encode compresses one 20 ms frame (interleaved when stereo) and returns
// the packet in the encoder's own buffer, valid until the next Encode: the
// per-frame path allocates nothing (the room track's payloader copies).
func (e *Encoder) Encode(pcm []int16) ([]byte, error) {
	if e.e == nil {
		return nil, errors.New("opus: encoder is closed")
	}
	if want := e.FrameSamples() * e.channels; len(pcm) != want {
		return nil, fmt.Errorf("opus: frame has %d samples, want %d (20 ms)", len(pcm), want)
	}
	n := C.opus_encode(e.e, (*C.opus_int16)(unsafe.Pointer(&pcm[0])), C.int(e.FrameSamples()),
		(*C.uchar)(unsafe.Pointer(&e.out[0])), C.opus_int32(len(e.out)))
	if n < 0 {
		return nil, fmt.Errorf("opus: encode: %s", C.GoString(C.opus_strerror(n)))
	}
	return e.out[:n:n], nil
}

// Close frees the encoder. It is safe to call twice.
func (e *Encoder) Close() {
	if e.e != nil {
		C.opus_encoder_destroy(e.e)
		e.e = nil
	}
}

// Decoder turns Opus packets back into PCM, for tests.
type Decoder struct {
	d          *C.OpusDecoder
	sampleRate int
	channels   int
	pcm        []int16
}

// NewDecoder opens a decoder producing sampleRate PCM with the given channels.
func NewDecoder(sampleRate, channels int) (*Decoder, error) {
	var rc C.int
	d := C.opus_decoder_create(C.opus_int32(sampleRate), C.int(channels), &rc)
	if rc != C.OPUS_OK || d == nil {
		return nil, fmt.Errorf("opus: decoder at %d Hz x %d: %s", sampleRate, channels, C.GoString(C.opus_strerror(rc)))
	}
	// 120 ms is the longest packet Opus allows.
	return &Decoder{d: d, sampleRate: sampleRate, channels: channels, pcm: make([]int16, sampleRate*120/1000*channels)}, nil
}

// Decode decodes one packet into fresh PCM (interleaved when stereo).
func (d *Decoder) Decode(packet []byte) ([]int16, error) {
	if d.d == nil {
		return nil, errors.New("opus: decoder is closed")
	}
	if len(packet) == 0 {
		return nil, errors.New("opus: empty packet")
	}
	n := C.opus_decode(d.d, (*C.uchar)(unsafe.Pointer(&packet[0])), C.opus_int32(len(packet)),
		(*C.opus_int16)(unsafe.Pointer(&d.pcm[0])), C.int(len(d.pcm)/d.channels), 0)
	if n < 0 {
		return nil, fmt.Errorf("opus: decode: %s", C.GoString(C.opus_strerror(n)))
	}
	return append([]int16(nil), d.pcm[:int(n)*d.channels]...), nil
}

// Close frees the decoder. It is safe to call twice.
func (d *Decoder) Close() {
	if d.d != nil {
		C.opus_decoder_destroy(d.d)
		d.d = nil
	}
}
