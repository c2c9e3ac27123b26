// Package stttest is test support for speech recognition: the LibriVox
// clips with their reference transcripts, and word error rate. Tests and
// benchmarks of every audio path use it; no product code does.
package stttest

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"avatarsvc/gpu-fleet/audio"
)

// TestDataDir holds the LibriVox clips of Debian's pocketsphinx-testdata:
// five sentences of Jane Austen's "Sense and Sensibility" read by one
// speaker, 16 kHz mono WAV, 25 s in all.
const TestDataDir = "/usr/share/pocketsphinx/test/data/librivox"

// sampleRate is the recognizer's (stt.SampleRate; this package cannot
// import stt, whose own tests use it).
const sampleRate = 16000

// Clip is a recording with its reference transcript.
type Clip struct {
	Name      string
	PCM       []int16 // 16 kHz mono
	Reference string  // lower case words
}

// Clips loads the LibriVox clips of pocketsphinx-testdata, for tests and
// benchmarks of recognition accuracy (here and through other audio paths:
// compare a transcript with Reference using WER). pocketsphinx 0.8 with the
// default models gets about 30% of their words wrong (TestStreamingClips).
func Clips() ([]Clip, error) {
	f, err := os.Open(filepath.Join(TestDataDir, "transcription"))
	if err != nil {
		return nil, fmt.Errorf("stttest: test clips missing (install Debian's pocketsphinx-testdata): %w", err)
	}
	defer f.Close()
	var clips []Clip
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		// "<s> he was not an ill disposed young man </s> (name)"
		open := strings.LastIndexByte(line, '(')
		if open < 0 || !strings.HasSuffix(line, ")") {
			return nil, fmt.Errorf("stt: %s: unexpected transcription line %q", TestDataDir, line)
		}
		name := line[open+1 : len(line)-1]
		var words []string
		for _, w := range strings.Fields(line[:open]) {
			if w != "<s>" && w != "</s>" {
				words = append(words, w)
			}
		}
		pcm, err := readClip(filepath.Join(TestDataDir, name+".wav"))
		if err != nil {
			return nil, err
		}
		clips = append(clips, Clip{Name: name, PCM: pcm, Reference: strings.Join(words, " ")})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("stt: reading %s: %w", TestDataDir, err)
	}
	if len(clips) == 0 {
		return nil, errors.New("stt: " + TestDataDir + "/transcription lists no clips")
	}
	return clips, nil
}

func readClip(path string) ([]int16, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("stttest: test clip missing (install Debian's pocketsphinx-testdata): %w", err)
	}
	defer f.Close()
	pcm, rate, err := audio.ReadWAV(bufio.NewReader(f))
	if err != nil {
		return nil, fmt.Errorf("stttest: %s: %w", path, err)
	}
	if rate != sampleRate {
		pcm = audio.Resample(pcm, rate, sampleRate)
	}
	return pcm, nil
}
