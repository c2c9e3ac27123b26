// Command render-file renders an avatar photo speaking a WAV file into a VP8
// IVF video, optionally with the 48 kHz audio beside it and a PNG contact
// sheet of frames across the clip. It is the offline view of what a live
// session publishes, for eyeballing the animation and for benchmarks.
//
//	render-file -image face.png -wav speech.wav -aspect 1:1 -out talk.ivf -sheet sheet.png
package main

import (
	"errors"
	"flag"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	xdraw "golang.org/x/image/draw"
	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/encode/vp8"
	"avatarsvc/gpu-fleet/render"
	"avatarsvc/shared/avatarimage"
)

type options struct {
	image, wav, aspect, out, audioOut, sheet string
	seed                                     uint64
	bitrate                                  int
	sheetCols, sheetRows, sheetCell          int
	sheetFace                                bool
}

func main() {
	var o options
	flag.StringVar(&o.image, "image", "", "avatar photo (PNG, JPEG, GIF, WebP)")
	flag.StringVar(&o.wav, "wav", "", "speech, PCM16 WAV at any rate")
	flag.StringVar(&o.aspect, "aspect", "1:1", "aspect ratio: 1:1 (512x512), 4:3 (640x480), 3:4 (480x640)")
	flag.StringVar(&o.out, "out", "", "output VP8 IVF file (optional)")
	flag.StringVar(&o.audioOut, "audio-out", "", "also write the audio as 48 kHz WAV here (default: -out with .wav when -out is set; \"-\" for none)")
	flag.StringVar(&o.sheet, "sheet", "", "write a PNG contact sheet of decoded frames here (optional)")
	flag.Uint64Var(&o.seed, "seed", 1, "seed of the idle motion (blinks, sway)")
	flag.IntVar(&o.bitrate, "bitrate", 800, "VP8 target bitrate, kbps")
	flag.IntVar(&o.sheetCols, "sheet-cols", 4, "contact sheet columns")
	flag.IntVar(&o.sheetRows, "sheet-rows", 4, "contact sheet rows")
	flag.IntVar(&o.sheetCell, "sheet-cell", 256, "contact sheet cell width in pixels")
	flag.BoolVar(&o.sheetFace, "sheet-face", false, "crop contact sheet cells to the face, so the mouth shows at small sizes")
	flag.Parse()
	if err := run(o, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "render-file:", err)
		os.Exit(1)
	}
}

func run(o options, log io.Writer) error {
	if o.image == "" || o.wav == "" {
		return errors.New("-image and -wav are required")
	}
	if o.out == "" && o.sheet == "" {
		return errors.New("nothing to write: give -out and/or -sheet")
	}
	w, h, err := render.Dimensions(render.AspectRatio(o.aspect))
	if err != nil {
		return err
	}
	img, err := decodeFile(o.image)
	if err != nil {
		return err
	}
	started := time.Now()
	av, err := avatarimage.Prepare(img, w, h)
	if err != nil {
		return fmt.Errorf("preparing %s: %w", o.image, err)
	}
	fmt.Fprintf(log, "prepared %s at %dx%d in %v: face %v, mouth %v\n", o.image, w, h, time.Since(started).Round(time.Millisecond), av.Face, av.Mouth)

	pcm, rate, err := readWAV(o.wav)
	if err != nil {
		return err
	}
	speech := audio.Resample(pcm, rate, audio.SampleRate)
	frames := (len(speech) + audio.FrameSamples - 1) / audio.FrameSamples
	fmt.Fprintf(log, "audio %s: %d Hz, %.2f s, %d frames at %d fps\n", o.wav, rate, float64(len(pcm))/float64(rate), frames, audio.FPS)

	enc, err := vp8.NewEncoder(vp8.Config{Width: w, Height: h, BitrateKbps: o.bitrate})
	if err != nil {
		return err
	}
	defer enc.Close()
	dec, err := vp8.NewDecoder()
	if err != nil {
		return err
	}
	defer dec.Close()

	var ivf *vp8.IVFWriter
	if o.out != "" {
		f, err := os.Create(o.out)
		if err != nil {
			return err
		}
		defer f.Close()
		if ivf, err = vp8.NewIVFWriter(f, w, h, audio.FPS); err != nil {
			return err
		}
		defer ivf.Close()
	}

	crop := image.Rect(0, 0, w, h)
	if o.sheetFace {
		// A square around the face box, half again its size.
		c := av.Face.Min.Add(av.Face.Max).Div(2)
		half := av.Face.Dx() * 3 / 4
		crop = image.Rect(c.X-half, c.Y-half, c.X+half, c.Y+half).Intersect(crop)
	}
	sheet := newContactSheet(o.sheetCols, o.sheetRows, o.sheetCell, crop, frames)
	rend := render.NewCPURendererSeeded(av, o.seed)
	frame := render.NewFrame(w, h)
	chunk := make([]int16, audio.FrameSamples)
	var renderTime, encodeTime time.Duration
	var bytes int
	lastReport := time.Now()
	for i := 0; i < frames; i++ {
		clear(chunk)
		copy(chunk, speech[i*audio.FrameSamples:min(len(speech), (i+1)*audio.FrameSamples)])
		t0 := time.Now()
		if err := rend.Render(chunk, frame); err != nil {
			return err
		}
		t1 := time.Now()
		packet, _, err := enc.Encode(frame, false)
		if err != nil {
			return err
		}
		encodeTime += time.Since(t1)
		renderTime += t1.Sub(t0)
		bytes += len(packet)
		if ivf != nil {
			if err := ivf.WritePacket(packet, int64(i)); err != nil {
				return err
			}
		}
		// Decode every frame: VP8 frames depend on the ones before.
		if sheet.wants(i) {
			decoded, err := dec.Decode(packet)
			if err != nil {
				return err
			}
			sheet.add(i, decoded.ToRGBA(), rend.MouthOpenness())
		} else if _, err := dec.Decode(packet); err != nil {
			return err
		}
		if time.Since(lastReport) > 2*time.Second {
			fmt.Fprintf(log, "frame %d/%d\n", i+1, frames)
			lastReport = time.Now()
		}
	}
	fmt.Fprintf(log, "rendered %d frames: render %.2f ms/frame, vp8 %.2f ms/frame, %.0f kbps\n",
		frames, ms(renderTime)/float64(frames), ms(encodeTime)/float64(frames),
		float64(bytes)*8/1000/(float64(frames)/audio.FPS))

	if o.out != "" {
		fmt.Fprintf(log, "wrote %s\n", o.out)
		audioOut := o.audioOut
		if audioOut == "" {
			audioOut = strings.TrimSuffix(o.out, filepath.Ext(o.out)) + ".wav"
		}
		if audioOut != "-" {
			if err := writeWAV(audioOut, audio.Resample(pcm, rate, 48000), 48000); err != nil {
				return err
			}
			fmt.Fprintf(log, "wrote %s\n", audioOut)
		}
	}
	if o.sheet != "" {
		if err := writePNG(o.sheet, sheet.img); err != nil {
			return err
		}
		fmt.Fprintf(log, "wrote %s\n", o.sheet)
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func decodeFile(path string) (image.Image, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	img, err := avatarimage.Decode(f, avatarimage.MaxImageBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return img, nil
}

func readWAV(path string) ([]int16, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	pcm, rate, err := audio.ReadWAV(f)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", path, err)
	}
	return pcm, rate, nil
}

func writeWAV(path string, pcm []int16, rate int) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := audio.WriteWAV(f, pcm, rate); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writePNG(path string, img image.Image) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// contactSheet lays frames sampled evenly across the clip out in a grid,
// each labelled with its time and the mouth openness the renderer used.
type contactSheet struct {
	img         *image.RGBA
	cols, cellW int
	cellH       int
	picks       map[int]int     // frame number -> cell
	crop        image.Rectangle // the part of each frame shown
}

func newContactSheet(cols, rows, cellW int, crop image.Rectangle, frames int) *contactSheet {
	cellH := cellW * crop.Dy() / crop.Dx()
	s := &contactSheet{
		crop:  crop,
		img:   image.NewRGBA(image.Rect(0, 0, cols*cellW, rows*cellH)),
		cols:  cols,
		cellW: cellW,
		cellH: cellH,
		picks: map[int]int{},
	}
	draw.Draw(s.img, s.img.Bounds(), image.NewUniform(color.Black), image.Point{}, draw.Src)
	n := cols * rows
	for c := 0; c < n; c++ {
		// Centre of each of n equal spans of the clip.
		s.picks[(2*c+1)*frames/(2*n)] = c
	}
	return s
}

func (s *contactSheet) wants(frame int) bool {
	_, ok := s.picks[frame]
	return ok
}

func (s *contactSheet) add(frame int, img *image.RGBA, openness float64) {
	c := s.picks[frame]
	cell := image.Rect(0, 0, s.cellW, s.cellH).Add(image.Pt((c%s.cols)*s.cellW, (c/s.cols)*s.cellH))
	xdraw.CatmullRom.Scale(s.img, cell, img, s.crop, draw.Src, nil)
	label := fmt.Sprintf("%5.2fs open %.2f", float64(frame)/audio.FPS, openness)
	// A dark band under the label keeps it readable on any picture.
	band := image.Rect(cell.Min.X, cell.Max.Y-16, cell.Max.X, cell.Max.Y)
	draw.Draw(s.img, band, image.NewUniform(color.RGBA{0, 0, 0, 160}), image.Point{}, draw.Over)
	d := font.Drawer{
		Dst:  s.img,
		Src:  image.NewUniform(color.White),
		Face: basicfont.Face7x13,
		Dot:  fixed.P(cell.Min.X+4, cell.Max.Y-4),
	}
	d.DrawString(label)
}
