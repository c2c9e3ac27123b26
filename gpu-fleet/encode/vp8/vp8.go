// Package vp8 encodes and decodes VP8 with Debian's libvpx through a small
// cgo wrapper, tuned for one low-latency real-time stream per encoder.
package vp8

/*
#cgo pkg-config: vpx
#include <stdlib.h>
#include <string.h>
#include <vpx/vpx_encoder.h>
#include <vpx/vpx_decoder.h>
#include <vpx/vp8cx.h>
#include <vpx/vp8dx.h>

typedef struct {
	vpx_codec_ctx_t codec;
	vpx_image_t     img;
	int             width, height;
	unsigned char  *out;
	size_t          out_cap;
} enc_t;

static int enc_open(enc_t *e, int w, int h, int fps, int kbps, int cpu_used, int threads, int kf_max) {
	vpx_codec_enc_cfg_t cfg;
	vpx_codec_err_t err = vpx_codec_enc_config_default(vpx_codec_vp8_cx(), &cfg, 0);
	if (err) return err;
	cfg.g_w = w;
	cfg.g_h = h;
	cfg.g_timebase.num = 1;
	cfg.g_timebase.den = fps;
	cfg.g_threads = threads;
	// VP8 has a single usage; realtime comes from VPX_DL_REALTIME per frame
	// and the negative cpu-used below.
	cfg.g_usage = 0;
	cfg.g_lag_in_frames = 0;
	cfg.g_error_resilient = VPX_ERROR_RESILIENT_DEFAULT;
	cfg.g_pass = VPX_RC_ONE_PASS;
	cfg.rc_end_usage = VPX_CBR;
	cfg.rc_target_bitrate = kbps;
	cfg.rc_min_quantizer = 4;
	cfg.rc_max_quantizer = 56;
	cfg.rc_undershoot_pct = 95;
	cfg.rc_overshoot_pct = 15;
	cfg.rc_buf_sz = 1000;
	cfg.rc_buf_initial_sz = 500;
	cfg.rc_buf_optimal_sz = 600;
	cfg.rc_dropframe_thresh = 0; // one packet per frame, always
	cfg.kf_mode = VPX_KF_AUTO;
	cfg.kf_min_dist = 0;
	cfg.kf_max_dist = kf_max;
	err = vpx_codec_enc_init(&e->codec, vpx_codec_vp8_cx(), &cfg, 0);
	if (err) return err;
	vpx_codec_control(&e->codec, VP8E_SET_CPUUSED, cpu_used);
	vpx_codec_control(&e->codec, VP8E_SET_STATIC_THRESHOLD, 1);
	vpx_codec_control(&e->codec, VP8E_SET_NOISE_SENSITIVITY, 0);
	vpx_codec_control(&e->codec, VP8E_SET_MAX_INTRA_BITRATE_PCT, 300);
	e->width = w;
	e->height = h;
	e->out = NULL;
	e->out_cap = 0;
	return 0;
}

// enc_frame encodes one I420 picture and concatenates its packets into e->out.
static int enc_frame(enc_t *e, unsigned char *y, unsigned char *u, unsigned char *v,
                     long pts, int force_kf, size_t *size, int *keyframe) {
	vpx_img_wrap(&e->img, VPX_IMG_FMT_I420, e->width, e->height, 1, y);
	e->img.planes[VPX_PLANE_Y] = y;
	e->img.planes[VPX_PLANE_U] = u;
	e->img.planes[VPX_PLANE_V] = v;
	e->img.stride[VPX_PLANE_Y] = e->width;
	e->img.stride[VPX_PLANE_U] = e->width / 2;
	e->img.stride[VPX_PLANE_V] = e->width / 2;
	vpx_codec_err_t err = vpx_codec_encode(&e->codec, &e->img, pts, 1,
		force_kf ? VPX_EFLAG_FORCE_KF : 0, VPX_DL_REALTIME);
	if (err) return err;
	*size = 0;
	*keyframe = 0;
	vpx_codec_iter_t iter = NULL;
	const vpx_codec_cx_pkt_t *pkt;
	while ((pkt = vpx_codec_get_cx_data(&e->codec, &iter)) != NULL) {
		if (pkt->kind != VPX_CODEC_CX_FRAME_PKT) continue;
		size_t need = *size + pkt->data.frame.sz;
		if (need > e->out_cap) {
			size_t cap = need * 2;
			unsigned char *n = realloc(e->out, cap);
			if (!n) return VPX_CODEC_MEM_ERROR;
			e->out = n;
			e->out_cap = cap;
		}
		memcpy(e->out + *size, pkt->data.frame.buf, pkt->data.frame.sz);
		*size = need;
		if (pkt->data.frame.flags & VPX_FRAME_IS_KEY) *keyframe = 1;
	}
	return 0;
}

static void enc_close(enc_t *e) {
	vpx_codec_destroy(&e->codec);
	free(e->out);
	e->out = NULL;
}

static int enc_set_bitrate(enc_t *e, int kbps) {
	vpx_codec_enc_cfg_t cfg = *e->codec.config.enc;
	cfg.rc_target_bitrate = kbps;
	return vpx_codec_enc_config_set(&e->codec, &cfg);
}

static int dec_open(vpx_codec_ctx_t *c) {
	vpx_codec_dec_cfg_t cfg = {0};
	cfg.threads = 1;
	return vpx_codec_dec_init(c, vpx_codec_vp8_dx(), &cfg, 0);
}

static int dec_frame(vpx_codec_ctx_t *c, const unsigned char *data, unsigned int size, vpx_image_t **out) {
	vpx_codec_err_t err = vpx_codec_decode(c, data, size, NULL, 0);
	if (err) return err;
	vpx_codec_iter_t iter = NULL;
	*out = vpx_codec_get_frame(c, &iter);
	return 0;
}

static unsigned char *plane(vpx_image_t *img, int i) { return img->planes[i]; }
static int stride(vpx_image_t *img, int i) { return img->stride[i]; }
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"

	"avatarsvc/gpu-fleet/render"
)

// Config sets up an encoder. Zero fields take the defaults in NewEncoder.
type Config struct {
	Width, Height    int
	FPS              int // default 25
	BitrateKbps      int // default 800
	CPUUsed          int // libvpx speed, -16..16: a larger magnitude is faster; negative adapts to the realtime deadline. Default -16
	Threads          int // default 1
	KeyframeInterval int // frames between forced keyframes at most; default 2 s of frames
}

// Encoder is one VP8 stream. It is not safe for concurrent use.
type Encoder struct {
	c      *C.enc_t
	cfg    Config
	pts    int64
	packet []byte // the last packet, reused
	// Out-parameters of the C call, kept here so taking their address does
	// not allocate on every frame.
	size C.size_t
	key  C.int
}

// NewEncoder opens a realtime CBR encoder with no lag and error resilience,
// so each Encode returns the packet for its own frame.
func NewEncoder(c Config) (*Encoder, error) {
	if c.Width <= 0 || c.Height <= 0 || c.Width%2 != 0 || c.Height%2 != 0 {
		return nil, fmt.Errorf("vp8: frame size %dx%d must be positive and even", c.Width, c.Height)
	}
	if c.FPS <= 0 {
		c.FPS = 25
	}
	if c.BitrateKbps <= 0 {
		c.BitrateKbps = 800
	}
	if c.CPUUsed == 0 {
		c.CPUUsed = -16
	}
	if c.Threads <= 0 {
		c.Threads = 1
	}
	if c.KeyframeInterval <= 0 {
		c.KeyframeInterval = 2 * c.FPS
	}
	e := &Encoder{c: (*C.enc_t)(C.calloc(1, C.sizeof_enc_t)), cfg: c}
	if e.c == nil {
		return nil, errors.New("vp8: out of memory")
	}
	if rc := C.enc_open(e.c, C.int(c.Width), C.int(c.Height), C.int(c.FPS), C.int(c.BitrateKbps),
		C.int(c.CPUUsed), C.int(c.Threads), C.int(c.KeyframeInterval)); rc != 0 {
		C.free(unsafe.Pointer(e.c))
		return nil, fmt.Errorf("vp8: encoder init: %s", C.GoString(C.vpx_codec_err_to_string(C.vpx_codec_err_t(rc))))
	}
	return e, nil
}

// Config returns the encoder's settings after defaults.
func (e *Encoder) Config() Config { return e.cfg }

// Encode compresses one frame within the realtime deadline and returns its
// packet in the encoder's own buffer, valid until the next Encode: the
// per-frame path allocates nothing (the room track's payloader copies).
func (e *Encoder) Encode(f *render.Frame, forceKeyframe bool) (packet []byte, keyframe bool, err error) {
	if e.c == nil {
		return nil, false, errors.New("vp8: encoder is closed")
	}
	if f.Width != e.cfg.Width || f.Height != e.cfg.Height {
		return nil, false, fmt.Errorf("vp8: frame is %dx%d, encoder is %dx%d", f.Width, f.Height, e.cfg.Width, e.cfg.Height)
	}
	force := C.int(0)
	if forceKeyframe {
		force = 1
	}
	// The planes are only read during the call, so Go memory may be passed.
	rc := C.enc_frame(e.c, (*C.uchar)(unsafe.Pointer(&f.Y[0])), (*C.uchar)(unsafe.Pointer(&f.U[0])),
		(*C.uchar)(unsafe.Pointer(&f.V[0])), C.long(e.pts), force, &e.size, &e.key)
	if rc != 0 {
		return nil, false, fmt.Errorf("vp8: encode: %s", C.GoString(C.vpx_codec_err_to_string(C.vpx_codec_err_t(rc))))
	}
	e.pts++
	e.packet = append(e.packet[:0], unsafe.Slice((*byte)(unsafe.Pointer(e.c.out)), int(e.size))...)
	return e.packet, e.key != 0, nil
}

// SetBitrate changes the target bitrate, for congestion feedback.
func (e *Encoder) SetBitrate(kbps int) error {
	if rc := C.enc_set_bitrate(e.c, C.int(kbps)); rc != 0 {
		return fmt.Errorf("vp8: set bitrate: %s", C.GoString(C.vpx_codec_err_to_string(C.vpx_codec_err_t(rc))))
	}
	e.cfg.BitrateKbps = kbps
	return nil
}

// Close frees the encoder. It is safe to call twice.
func (e *Encoder) Close() {
	if e.c == nil {
		return
	}
	C.enc_close(e.c)
	C.free(unsafe.Pointer(e.c))
	e.c = nil
}

// Decoder turns VP8 packets back into frames, for tests and tools that check
// what a viewer sees.
type Decoder struct {
	c *C.vpx_codec_ctx_t
}

// NewDecoder opens a VP8 decoder.
func NewDecoder() (*Decoder, error) {
	d := &Decoder{c: (*C.vpx_codec_ctx_t)(C.calloc(1, C.sizeof_vpx_codec_ctx_t))}
	if d.c == nil {
		return nil, errors.New("vp8: out of memory")
	}
	if rc := C.dec_open(d.c); rc != 0 {
		C.free(unsafe.Pointer(d.c))
		return nil, fmt.Errorf("vp8: decoder init: %s", C.GoString(C.vpx_codec_err_to_string(C.vpx_codec_err_t(rc))))
	}
	return d, nil
}

// Decode decodes one packet into a new frame.
func (d *Decoder) Decode(packet []byte) (*render.Frame, error) {
	if d.c == nil {
		return nil, errors.New("vp8: decoder is closed")
	}
	if len(packet) == 0 {
		return nil, errors.New("vp8: empty packet")
	}
	var img *C.vpx_image_t
	if rc := C.dec_frame(d.c, (*C.uchar)(unsafe.Pointer(&packet[0])), C.uint(len(packet)), &img); rc != 0 {
		return nil, fmt.Errorf("vp8: decode: %s", C.GoString(C.vpx_codec_err_to_string(C.vpx_codec_err_t(rc))))
	}
	if img == nil {
		return nil, errors.New("vp8: packet held no frame")
	}
	w, h := int(img.d_w), int(img.d_h)
	f := render.NewFrame(w+w%2, h+h%2)
	copyPlane(f.Y, f.Width, C.plane(img, 0), int(C.stride(img, 0)), w, h)
	copyPlane(f.U, f.Width/2, C.plane(img, 1), int(C.stride(img, 1)), (w+1)/2, (h+1)/2)
	copyPlane(f.V, f.Width/2, C.plane(img, 2), int(C.stride(img, 2)), (w+1)/2, (h+1)/2)
	return f, nil
}

func copyPlane(dst []byte, dstStride int, src *C.uchar, srcStride, w, h int) {
	all := unsafe.Slice((*byte)(unsafe.Pointer(src)), srcStride*(h-1)+w)
	for y := 0; y < h; y++ {
		copy(dst[y*dstStride:y*dstStride+w], all[y*srcStride:y*srcStride+w])
	}
}

// Close frees the decoder. It is safe to call twice.
func (d *Decoder) Close() {
	if d.c == nil {
		return
	}
	C.vpx_codec_destroy(d.c)
	C.free(unsafe.Pointer(d.c))
	d.c = nil
}
