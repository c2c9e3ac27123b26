package render

import (
	"math"
	"math/rand/v2"
)

// idleMotion is the life the avatar shows whether or not it speaks: blinks
// at natural, irregular intervals, a slow sway of the head and breathing.
// Everything follows from the seed, so a replay gives the same frames.
type idleMotion struct {
	rng       *rand.Rand
	nextBlink int64 // frame number of the next blink's start
	blinkAt   int64 // start of the current blink, or -1
	double    bool  // this blink is followed quickly by another
	phases    [8]float64
	freqs     [8]float64
}

// blinkCurve is the lid closure per 40 ms frame: a quick close, a short
// hold and a slower opening, about 200 ms in all.
var blinkCurve = []float32{0.55, 1, 0.9, 0.5, 0.2}

func newIdleMotion(seed uint64) *idleMotion {
	m := &idleMotion{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), blinkAt: -1}
	for i := range m.phases {
		m.phases[i] = m.rng.Float64() * 2 * math.Pi
		// Slow, incommensurate frequencies (0.07-0.35 Hz) so the sway never
		// visibly repeats.
		m.freqs[i] = 0.07 + 0.28*m.rng.Float64()
	}
	// The first blink comes soon so a new viewer sees the avatar is alive.
	m.nextBlink = 12 + int64(m.rng.IntN(25))
	return m
}

// blink returns the lid closure for frame n. Frames must come in order.
func (m *idleMotion) blink(n int64) float32 {
	if m.blinkAt < 0 && n >= m.nextBlink {
		m.blinkAt = n
	}
	if m.blinkAt < 0 {
		return 0
	}
	i := n - m.blinkAt
	if i < int64(len(blinkCurve)) {
		return blinkCurve[i]
	}
	m.blinkAt = -1
	switch {
	case !m.double && m.rng.Float64() < 0.12:
		// Now and then a second blink follows straight away.
		m.double = true
		m.nextBlink = n + 2
	default:
		m.double = false
		// 2.4-6 s between blinks, as in relaxed conversation.
		m.nextBlink = n + 60 + int64(m.rng.IntN(90))
	}
	return 0
}

// pose returns the head's small global motion at frame n for a w x h
// frame; pivotY is the neck (the tilt's centre) and energy (0..1) the
// current speech emphasis, which adds a slight nod.
func (m *idleMotion) pose(n int64, w, h int, pivotY, energy float64) headMotion {
	t := float64(n) / 25
	scale := float64(min(w, h)) / 512
	wave := func(i int) float64 { return math.Sin(2*math.Pi*m.freqs[i]*t + m.phases[i]) }
	tx := scale * (1.1*wave(0) + 0.5*wave(1))
	ty := scale * (0.6*wave(2) + 0.3*wave(3) + 1.2*energy)
	tilt := 0.0045*wave(4) + 0.0025*wave(5) // radians, about a quarter of a degree
	// Breathing: a 4.2 s cycle of a fraction of a percent of height,
	// anchored at the bottom edge so the shoulders rise and fall.
	breath := 1 + 0.0035*math.Sin(2*math.Pi*t/4.2+m.phases[6])

	// Forward: y' = bottom + (y-bottom)*breath + ty; x' = x + tx + tilt*(pivotY-y).
	bottom := float64(h)
	return headMotion{
		scaleY: 1 / breath,
		offY:   bottom - (ty+bottom)/breath,
		shiftX: -tx - tilt*pivotY,
		tilt:   tilt,
	}
}
