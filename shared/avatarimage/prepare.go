package avatarimage

import (
	"embed"
	"fmt"
	"image"
	"image/draw"
	"math"
	"sort"
	"sync"

	pigo "github.com/esimov/pigo/core"
	xdraw "golang.org/x/image/draw"
)

// The cascades are embedded so the binary does not depend on the module
// cache at run time. They come unchanged from github.com/esimov/pigo v1.4.6
// (MIT, see cascade/LICENSE-pigo).
//
//go:embed cascade/facefinder cascade/puploc cascade/lp81 cascade/lp82 cascade/lp84 cascade/lp93
var cascadeFS embed.FS

// Prepared is an avatar ready to animate: the picture at the session's frame
// size and where its features are, in that picture's pixel coordinates.
// "Left" and "right" are as seen in the picture.
type Prepared struct {
	Image *image.RGBA
	// Face is pigo's square face box.
	Face image.Rectangle
	// Mouth bounds the lips.
	Mouth image.Rectangle
	// LeftEye and RightEye are the pupil centres.
	LeftEye, RightEye image.Point
	// MouthLeft and MouthRight are the corners of the mouth, MouthCenter the
	// middle of the line where the lips meet, UpperLip and LowerLip the top
	// of the upper lip and the bottom of the lower lip, Nose the nose tip.
	MouthLeft, MouthRight, MouthCenter, UpperLip, LowerLip, Nose image.Point
}

// Detection tuning. Scores are pigo's cascade sums; the thresholds were
// chosen on the test photos (a real portrait scores well above, textured
// backgrounds well below).
const (
	minFaceScore = 6.0
	// A second face counts when its box is at least this fraction of the
	// largest one and it scores like a face; small background faces do not.
	prominentFaceRatio = 0.5
	// MinFaceSize is the smallest face box, in source pixels, that survives
	// being scaled up to the frame without turning to mush.
	MinFaceSize = 80
	// minDetectSize is the smallest face pigo looks for, well under
	// MinFaceSize so that a small face is reported as such, not as none.
	minDetectSize = 32
	// detectMaxSide bounds the image pigo scans, for speed on large uploads.
	detectMaxSide = 1024
	// Framing: the face box is this fraction of the frame's shorter side and
	// the eyes sit this far down the frame.
	faceFraction    = 0.44
	maxFaceFraction = 0.62
	eyeLine         = 0.40
	// maxUpscale bounds how far a small face is enlarged.
	maxUpscale = 4.0
)

type detector struct {
	face  *pigo.Pigo
	pupil *pigo.PuplocCascade
	lps   map[string]*pigo.PuplocCascade
}

var (
	loadOnce    sync.Once
	loaded      *detector
	errLoadCasc error
)

func cascades() (*detector, error) {
	loadOnce.Do(func() {
		read := func(name string) []byte {
			b, err := cascadeFS.ReadFile("cascade/" + name)
			if err != nil && errLoadCasc == nil {
				errLoadCasc = fmt.Errorf("avatarimage: embedded cascade %s: %w", name, err)
			}
			return b
		}
		d := &detector{lps: map[string]*pigo.PuplocCascade{}}
		var err error
		if d.face, err = pigo.NewPigo().Unpack(read("facefinder")); err != nil {
			errLoadCasc = fmt.Errorf("avatarimage: facefinder cascade: %w", err)
			return
		}
		if d.pupil, err = pigo.NewPuplocCascade().UnpackCascade(read("puploc")); err != nil {
			errLoadCasc = fmt.Errorf("avatarimage: puploc cascade: %w", err)
			return
		}
		for _, name := range []string{"lp81", "lp82", "lp84", "lp93"} {
			c, err := pigo.NewPuplocCascade().UnpackCascade(read(name))
			if err != nil {
				errLoadCasc = fmt.Errorf("avatarimage: %s cascade: %w", name, err)
				return
			}
			d.lps[name] = c
		}
		loaded = d
	})
	return loaded, errLoadCasc
}

// face is one detection in some image's pixel coordinates.
type face struct {
	row, col, size float64
	score          float32
}

// Prepare finds the one face in img, crops and scales the picture to
// width x height with the face centred, the eyes 40% down and the face box
// about 44% of the shorter side, and locates eyes and mouth in the result.
func Prepare(img image.Image, width, height int) (*Prepared, error) {
	if width <= 0 || height <= 0 || width%2 != 0 || height%2 != 0 {
		return nil, fmt.Errorf("avatarimage: frame size %dx%d must be positive and even", width, height)
	}
	det, err := cascades()
	if err != nil {
		return nil, err
	}
	b := img.Bounds()
	if b.Dx() < 16 || b.Dy() < 16 {
		return nil, ErrNoFace
	}

	// Find the face on a bounded copy of the picture.
	scan, scanScale := grayForDetection(img)
	faces := det.findFaces(scan, 0, 0)
	if len(faces) == 0 {
		return nil, ErrNoFace
	}
	main := faces[0]
	for _, f := range faces[1:] {
		if f.size >= prominentFaceRatio*main.size {
			return nil, ErrManyFaces
		}
	}
	// Back to source pixels.
	main.row /= scanScale
	main.col /= scanScale
	main.size /= scanScale
	if main.size < MinFaceSize {
		return nil, fmt.Errorf("%w (found one of %.0f pixels)", ErrFaceTooSmall, main.size)
	}

	// The eye line gives a steadier vertical anchor than the face box.
	eyeRow := main.row - 0.085*main.size
	if l, r, ok := det.pupils(scan, face{row: main.row * scanScale, col: main.col * scanScale, size: main.size * scanScale}); ok {
		eyeRow = float64(l.Y+r.Y) / 2 / scanScale
	}

	short := float64(min(width, height))
	scale := min(faceFraction*short/main.size, maxUpscale)
	// Zoom in (up to maxFaceFraction) rather than let the crop run off the
	// picture: a tighter portrait beats a padded or off-centre one.
	room := []struct{ need, have float64 }{
		{eyeLine * float64(height), eyeRow - float64(b.Min.Y)},
		{(1 - eyeLine) * float64(height), float64(b.Max.Y) - eyeRow},
		{float64(width) / 2, main.col - float64(b.Min.X)},
		{float64(width) / 2, float64(b.Max.X) - main.col},
	}
	for _, r := range room {
		if r.have > 0 {
			scale = max(scale, r.need/r.have)
		}
	}
	scale = min(scale, maxFaceFraction*short/main.size)
	srcW, srcH := float64(width)/scale, float64(height)/scale
	x0 := main.col - srcW/2
	y0 := eyeRow - eyeLine*srcH
	// What still runs off: slide the crop in by up to 4% of the frame
	// (moving the face a little off its mark), and pad beyond that with the
	// picture's edge.
	x0 = slideLimited(x0, srcW, float64(b.Min.X), float64(b.Max.X), 0.04*srcW)
	y0 = slideLimited(y0, srcH, float64(b.Min.Y), float64(b.Max.Y), 0.04*srcH)

	out := image.NewRGBA(image.Rect(0, 0, width, height))
	src := padded(img, image.Rect(int(math.Floor(x0))-2, int(math.Floor(y0))-2, int(math.Ceil(x0+srcW))+2, int(math.Ceil(y0+srcH))+2))
	s2d := xdraw.Transformer(xdraw.CatmullRom)
	if scale < 1 {
		// CatmullRom in x/image/draw filters properly when shrinking too.
		s2d = xdraw.CatmullRom
	}
	m := [6]float64{scale, 0, -x0 * scale, 0, scale, -y0 * scale}
	s2d.Transform(out, m, src, src.Bounds(), draw.Src, nil)

	p := &Prepared{Image: out}
	if err := det.locate(p, face{row: (main.row - y0) * scale, col: (main.col - x0) * scale, size: main.size * scale}); err != nil {
		return nil, err
	}
	return p, nil
}

// slideLimited moves a span [x0, x0+n) towards lying inside [lo, hi), by
// at most limit.
func slideLimited(x0, n, lo, hi, limit float64) float64 {
	want := x0
	switch {
	case n >= hi-lo:
		want = lo - (n-(hi-lo))/2
	case x0 < lo:
		want = lo
	case x0+n > hi:
		want = hi - n
	}
	return x0 + math.Max(-limit, math.Min(want-x0, limit))
}

// padded returns img extended to cover r by repeating its edge pixels, so
// that a crop running off the picture shows a plausible background.
func padded(img image.Image, r image.Rectangle) image.Image {
	b := img.Bounds()
	if r.In(b) {
		return img
	}
	u := r.Union(b)
	out := image.NewRGBA(u)
	draw.Draw(out, b, img, b.Min, draw.Src)
	for y := u.Min.Y; y < u.Max.Y; y++ {
		sy := min(max(y, b.Min.Y), b.Max.Y-1)
		for x := u.Min.X; x < u.Max.X; x++ {
			if image.Pt(x, y).In(b) {
				continue
			}
			sx := min(max(x, b.Min.X), b.Max.X-1)
			out.Set(x, y, out.At(sx, sy))
		}
	}
	return out
}

// grayForDetection returns the picture as 8-bit luma, shrunk so its longer
// side is at most detectMaxSide, and the scale applied.
func grayForDetection(img image.Image) (*image.Gray, float64) {
	b := img.Bounds()
	scale := 1.0
	if side := max(b.Dx(), b.Dy()); side > detectMaxSide {
		scale = float64(detectMaxSide) / float64(side)
	}
	w := max(1, int(math.Round(float64(b.Dx())*scale)))
	h := max(1, int(math.Round(float64(b.Dy())*scale)))
	gray := image.NewGray(image.Rect(0, 0, w, h))
	if scale == 1 {
		draw.Draw(gray, gray.Bounds(), img, b.Min, draw.Src)
	} else {
		xdraw.ApproxBiLinear.Scale(gray, gray.Bounds(), img, b, draw.Src, nil)
	}
	return gray, scale
}

func params(g *image.Gray) pigo.ImageParams {
	b := g.Bounds()
	return pigo.ImageParams{Pixels: g.Pix, Rows: b.Dy(), Cols: b.Dx(), Dim: g.Stride}
}

// findFaces returns the faces from minSize to maxSize pixels (0: any) that
// score as faces, largest first.
func (d *detector) findFaces(g *image.Gray, minSize, maxSize int) []face {
	b := g.Bounds()
	if maxSize <= 0 || maxSize > min(b.Dx(), b.Dy()) {
		maxSize = min(b.Dx(), b.Dy())
	}
	cp := pigo.CascadeParams{
		MinSize:     max(minSize, minDetectSize),
		MaxSize:     maxSize,
		ShiftFactor: 0.1,
		ScaleFactor: 1.1,
		ImageParams: params(g),
	}
	dets := d.face.ClusterDetections(d.face.RunCascade(cp, 0), 0.2)
	var faces []face
	for _, det := range dets {
		if det.Q < minFaceScore {
			continue
		}
		faces = append(faces, face{row: float64(det.Row), col: float64(det.Col), size: float64(det.Scale), score: det.Q})
	}
	sort.Slice(faces, func(i, j int) bool { return faces[i].size > faces[j].size })
	return faces
}

// pupils locates both pupils of a face, left one (in the picture) first.
func (d *detector) pupils(g *image.Gray, f face) (left, right image.Point, ok bool) {
	ip := params(g)
	find := func(dx float64) *pigo.Puploc {
		return d.pupil.RunDetector(pigo.Puploc{
			Row:      int(f.row - 0.085*f.size),
			Col:      int(f.col + dx*f.size),
			Scale:    float32(f.size) * 0.4,
			Perturbs: 63,
		}, ip, 0, false)
	}
	l, r := find(-0.185), find(0.185)
	if l == nil || r == nil || l.Row <= 0 || l.Col <= 0 || r.Row <= 0 || r.Col <= 0 {
		return image.Point{}, image.Point{}, false
	}
	return image.Pt(l.Col, l.Row), image.Pt(r.Col, r.Row), true
}

// locate finds the eyes and mouth of a face in the prepared picture. The
// cascades can miss on unusual faces, so each landmark falls back to where
// it sits on an average face.
func (d *detector) locate(p *Prepared, hint face) error {
	g, _ := grayForDetection(p.Image) // prepared frames are below detectMaxSide
	f := hint
	// Re-detect at the final scale: the landmark cascades are sharper on
	// the face box found in the picture they run on.
	for _, c := range d.findFaces(g, int(hint.size*0.7), int(hint.size*1.4)) {
		if math.Abs(c.col-hint.col) < hint.size/3 && math.Abs(c.row-hint.row) < hint.size/3 {
			f = c
			break
		}
	}
	half := int(f.size / 2)
	p.Face = image.Rect(int(f.col)-half, int(f.row)-half, int(f.col)+half, int(f.row)+half)

	left, right, ok := d.pupils(g, f)
	if !ok {
		left = image.Pt(int(f.col-0.185*f.size), int(f.row-0.085*f.size))
		right = image.Pt(int(f.col+0.185*f.size), int(f.row-0.085*f.size))
	}
	p.LeftEye, p.RightEye = left, right

	// Average-face fallbacks, from the eye positions.
	eyeDist := math.Hypot(float64(right.X-left.X), float64(right.Y-left.Y))
	midX := float64(left.X+right.X) / 2
	midY := float64(left.Y+right.Y) / 2
	at := func(dx, dy float64) image.Point {
		return image.Pt(int(math.Round(midX+dx*eyeDist)), int(math.Round(midY+dy*eyeDist)))
	}
	p.MouthLeft, p.MouthRight = at(-0.45, 0.86), at(0.45, 0.86)
	p.MouthCenter, p.LowerLip, p.Nose = at(0, 0.86), at(0, 1.2), at(0, 0.62)

	ip := params(g)
	lp := &pigo.Puploc{Row: left.Y, Col: left.X, Scale: 1, Perturbs: 63}
	rp := &pigo.Puploc{Row: right.Y, Col: right.X, Scale: 1, Perturbs: 63}
	point := func(name string, flip bool, fallback image.Point) image.Point {
		q := d.lps[name].GetLandmarkPoint(lp, rp, ip, 63, flip)
		got := image.Pt(q.Col, q.Row)
		// Reject a landmark far from where it sits on a face.
		if q.Row <= 0 || q.Col <= 0 || math.Hypot(float64(got.X-fallback.X), float64(got.Y-fallback.Y)) > 0.35*eyeDist {
			return fallback
		}
		return got
	}
	// lp84 finds a mouth corner (flipped: the other one), lp81 the middle of
	// the lip line, lp82 the bottom of the lower lip, lp93 the nose tip.
	p.MouthRight = point("lp84", true, p.MouthRight)
	p.MouthLeft = point("lp84", false, p.MouthLeft)
	p.MouthCenter = point("lp81", false, p.MouthCenter)
	p.LowerLip = point("lp82", false, p.LowerLip)
	p.Nose = point("lp93", false, p.Nose)
	if p.MouthLeft.X > p.MouthRight.X {
		p.MouthLeft, p.MouthRight = p.MouthRight, p.MouthLeft
	}
	// No cascade finds the top of the upper lip; it sits between the lip
	// line and the nose, nearer the lip line.
	lowerH := max(2, p.LowerLip.Y-p.MouthCenter.Y)
	upperY := max(p.MouthCenter.Y-lowerH*3/4, (p.Nose.Y+2*p.MouthCenter.Y)/3)
	p.UpperLip = image.Pt(p.MouthCenter.X, upperY)
	p.Mouth = image.Rect(p.MouthLeft.X, p.UpperLip.Y, p.MouthRight.X, p.LowerLip.Y).Canon()
	return nil
}
