package main

import (
	"avatarsvc/gpu-fleet/testfiles"
	"bytes"
	"errors"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"testing"

	"avatarsvc/gpu-fleet/audio"
	"avatarsvc/gpu-fleet/encode/vp8"
)

func TestRenderFile(t *testing.T) {
	dir := t.TempDir()
	// The first 1.2 s of the 48 kHz speech: 30 frames.
	f, err := os.Open(testfiles.Path("audio/speech-48k.wav"))
	if err != nil {
		t.Fatal(err)
	}
	pcm, rate, err := audio.ReadWAV(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	wav := filepath.Join(dir, "short.wav")
	if err := writeWAV(wav, pcm[:rate*6/5], rate); err != nil {
		t.Fatal(err)
	}

	o := options{
		image: testfiles.Path("images/face-astronaut.png"), wav: wav, aspect: "4:3",
		out: filepath.Join(dir, "talk.ivf"), sheet: filepath.Join(dir, "sheet.png"),
		seed: 1, bitrate: 600, sheetCols: 2, sheetRows: 2, sheetCell: 160,
	}
	var log bytes.Buffer
	if err := run(o, &log); err != nil {
		t.Fatalf("run: %v\n%s", err, log.String())
	}

	ivf, err := os.Open(o.out)
	if err != nil {
		t.Fatal(err)
	}
	defer ivf.Close()
	r, err := vp8.NewIVFReader(ivf)
	if err != nil {
		t.Fatal(err)
	}
	if r.Width != 640 || r.Height != 480 {
		t.Errorf("video: got %dx%d, want 640x480", r.Width, r.Height)
	}
	frames := 0
	for {
		if _, _, err := r.Next(); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		frames++
	}
	if frames != 30 {
		t.Errorf("video frames: got %d, want 30", frames)
	}

	af, err := os.Open(filepath.Join(dir, "talk.wav"))
	if err != nil {
		t.Fatalf("audio beside the video: %v", err)
	}
	defer af.Close()
	if _, gotRate, err := audio.ReadWAV(af); err != nil || gotRate != 48000 {
		t.Errorf("audio: got rate %d and error %v, want 48000 and none", gotRate, err)
	}

	sf, err := os.Open(o.sheet)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	sheet, err := png.Decode(sf)
	if err != nil {
		t.Fatal(err)
	}
	if got := sheet.Bounds().Size(); got.X != 320 || got.Y != 240 {
		t.Errorf("sheet: got %v, want 320x240", got)
	}
}

func TestRenderFileRejectsBadFlags(t *testing.T) {
	tests := []struct {
		name string
		o    options
	}{
		{"no image", options{wav: "x.wav", out: "x.ivf", aspect: "1:1"}},
		{"no output", options{image: "x.png", wav: "x.wav", aspect: "1:1"}},
		{"bad aspect", options{image: "x.png", wav: "x.wav", out: "x.ivf", aspect: "2:1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := run(tt.o, io.Discard); err == nil {
				t.Fatal("run: got nil error, want one")
			}
		})
	}
}
