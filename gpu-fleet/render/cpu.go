package render

import (
	"fmt"
	"math"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/shared/avatarimage"
)

// CPURenderer is the model-free lip-sync backend: it animates the prepared
// still photo by warping the jaw, lips and eyelids from audio features, with
// blinks, sway and breathing when silent. Per frame it redraws only the
// mouth and eye regions and then resamples the whole picture once for the
// head motion, all in I420, so there is no colour conversion per frame.
type CPURenderer struct {
	w, h   int
	base   *Frame // the prepared photo
	work   *Frame // base with this frame's mouth and eyes
	planes struct{ base, work [3]plane }

	mouth      *mouthRig
	eyes       [2]*eyeRig
	pivotY     float64
	analyzer   *audio.Analyzer
	idle       *idleMotion
	frameNo    int64
	pose       mouthPose // smoothed, as drawn
	level      levelTracker
	mouthDirty bool
	rowScratch []byte // warpRows' row buffer, kept across frames
	eyesDirty  bool
}

// NewCPURenderer returns the CPU backend for a prepared avatar, with the
// default seed for its idle motion.
func NewCPURenderer(av *avatarimage.Prepared) *CPURenderer {
	return NewCPURendererSeeded(av, 1)
}

// NewCPURendererSeeded returns the CPU backend whose idle motion (blinks,
// sway) follows seed; the same seed and audio give the same frames.
func NewCPURendererSeeded(av *avatarimage.Prepared, seed uint64) *CPURenderer {
	b := av.Image.Bounds()
	r := &CPURenderer{w: b.Dx(), h: b.Dy(), analyzer: audio.NewAnalyzer(), idle: newIdleMotion(seed)}
	r.base = NewFrame(r.w, r.h)
	RGBAToI420(av.Image, r.base)
	r.work = NewFrame(r.w, r.h)
	r.work.CopyFrom(r.base)
	r.planes.base, r.planes.work = planesOf(r.base), planesOf(r.work)
	r.mouth = newMouthRig(av, r.base)
	r.eyes[0] = newEyeRig(av.LeftEye, r.mouth.eyeDist, r.w, r.h)
	r.eyes[1] = newEyeRig(av.RightEye, r.mouth.eyeDist, r.w, r.h)
	// The head turns about the neck, below the chin.
	r.pivotY = float64(r.mouth.chinY + 0.5*r.mouth.eyeDist)
	r.level = levelTracker{peak: -30}
	return r
}

// Size returns the frame size.
func (r *CPURenderer) Size() (width, height int) { return r.w, r.h }

// ResetMouth snaps the mouth to rest for the next frame, skipping the
// smoothed close, so an interrupt shows a closed mouth within one frame.
func (r *CPURenderer) ResetMouth() {
	// The analyzer keeps no state between frames (window, twiddles and
	// scratch only), so only the smoothed pose needs resetting.
	r.pose = mouthPose{}
}

// MouthOpenness returns how far the mouth was open in the last frame, from
// 0 (closed) to 1 (wide open).
func (r *CPURenderer) MouthOpenness() float64 { return float64(r.pose.open) }

// Render draws the next frame.
func (r *CPURenderer) Render(pcm []int16, dst *Frame) error {
	if dst.Width != r.w || dst.Height != r.h {
		return fmt.Errorf("render: frame is %dx%d, renderer is %dx%d", dst.Width, dst.Height, r.w, r.h)
	}
	target, energy := r.targetPose(pcm)
	r.pose = smoothPose(r.pose, target)
	n := r.frameNo
	r.frameNo++

	r.drawMouth()
	r.drawEyes(r.idle.blink(n))

	m := r.idle.pose(n, r.w, r.h, r.pivotY, float64(energy))
	dp := planesOf(dst)
	warpRows(dp[0], r.planes.work[0], m, &r.rowScratch)
	mh := m.half()
	warpRows(dp[1], r.planes.work[1], mh, &r.rowScratch)
	warpRows(dp[2], r.planes.work[2], mh, &r.rowScratch)
	return nil
}

func (r *CPURenderer) drawMouth() {
	reg := r.mouth.region
	if r.pose.still() {
		if r.mouthDirty {
			restore(r.planes.work, r.planes.base, reg)
			r.mouthDirty = false
		}
		return
	}
	w := r.mouth.at(r.pose)
	w.draw(r.planes.work, r.planes.base)
	r.mouthDirty = true
}

func (r *CPURenderer) drawEyes(closed float32) {
	if closed < 0.02 {
		if r.eyesDirty {
			for _, e := range r.eyes {
				restore(r.planes.work, r.planes.base, e.region)
			}
			r.eyesDirty = false
		}
		return
	}
	for _, e := range r.eyes {
		warpRegion(r.planes.work, r.planes.base, e.region, e.sampler(closed))
	}
	r.eyesDirty = true
}

// restore copies a luma region and its chroma back from the base picture.
func restore(dst, src [3]plane, reg rect) {
	copyRect(dst[0], src[0], reg)
	c := reg.half().clip(dst[1].w, dst[1].h)
	copyRect(dst[1], src[1], c)
	copyRect(dst[2], src[2], c)
}

// levelTracker follows the speaker's loudness so quiet and loud voices both
// move the mouth through its whole range.
type levelTracker struct {
	peak float64 // dBFS, decays slowly towards quiet
}

// Speech-to-mouth tuning.
const (
	silenceGate = -52.0 // dBFS below which the mouth rests
	dynamicDB   = 26.0  // range below the running peak mapped onto 0..1 openness
)

// targetPose turns one frame of audio into the mouth shape it asks for and
// a 0..1 emphasis.
func (r *CPURenderer) targetPose(pcm []int16) (mouthPose, float32) {
	if len(pcm) == 0 {
		r.level.peak = max(r.level.peak-0.05, -30)
		return mouthPose{}, 0
	}
	f := r.analyzer.Analyze(pcm)
	if f.Level < silenceGate {
		r.level.peak = max(r.level.peak-0.05, -30)
		return mouthPose{}, 0
	}
	// Peak follows loud frames at once and relaxes by 1.25 dB/s.
	r.level.peak = max(f.Level, r.level.peak-0.05, -40)
	loud := (f.Level - (r.level.peak - dynamicDB)) / dynamicDB
	loud = math.Max(0, math.Min(1, loud))
	// Open vowels carry energy around the first formant (700-1800 Hz);
	// fricatives (s, f, sh) are loud but made with nearly closed lips.
	shape := 0.7 + 0.6*f.Mid - 0.75*f.Sibilance
	open := math.Max(0, math.Min(1, 0.9*(loud*loud*0.4+loud*0.6*shape)))
	// Front vowels (ee) show a strong second formant: spread lips. Back,
	// rounded vowels (oo) keep almost everything low: rounded lips.
	spread := math.Max(-1, math.Min(1, (f.High*3.5+f.Mid*0.8-f.Low*0.6)*1.2)) * loud
	return mouthPose{open: float32(open), spread: float32(spread)}, float32(loud)
}

// smoothPose moves the drawn mouth towards the target: fast when opening
// (jaw attack), a little slower when closing, as real jaws do at speech rate.
func smoothPose(cur, target mouthPose) mouthPose {
	k := float32(0.7)
	if target.open < cur.open {
		k = 0.65
	}
	cur.open += k * (target.open - cur.open)
	cur.spread += 0.5 * (target.spread - cur.spread)
	if cur.open < 0.02 && target.open == 0 {
		cur.open = 0
	}
	if abs32(cur.spread) < 0.01 {
		cur.spread = 0
	}
	return cur
}
