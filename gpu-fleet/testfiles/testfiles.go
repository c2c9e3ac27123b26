// Package testfiles finds the project's real test inputs: a face photo, a
// photo with no face, and speech WAVs (README.md beside this file says where
// each comes from). Tests, benchmarks and the README's walkthrough all use
// these copies, so a plain clone builds and tests on its own.
package testfiles

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// The inputs, relative to Dir.
const (
	FacePNG    = "images/face-astronaut.png"  // 512x512, one frontal face
	NoFaceJPEG = "images/noface-hubble.jpg"   // no face at all
	FaceWebP   = "images/face-astronaut.webp" // the face at 512x512, WebP
	FaceMP4    = "images/face-astronaut.mp4"  // 1 s still video of the face (512x512), H.264 MP4
	FaceWebM   = "images/face-astronaut.webm" // the same, VP8 WebM
	Speech16k  = "audio/speech-16k.wav"       // 8.8 s of English speech, PCM16 mono 16 kHz
	Speech48k  = "audio/speech-48k.wav"       // the same at 48 kHz
)

// Dir is the folder holding the inputs, found from this source file's
// location so it works from any package's test directory.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "gpu-fleet/testfiles"
	}
	return filepath.Dir(file)
}

// Path returns the absolute path of rel (one of the constants above).
func Path(rel string) string { return filepath.Join(Dir(), filepath.FromSlash(rel)) }

// Read returns the bytes of rel, failing t when it cannot.
func Read(t testing.TB, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(Path(rel))
	if err != nil {
		t.Fatalf("test input %s: %v", rel, err)
	}
	return b
}
