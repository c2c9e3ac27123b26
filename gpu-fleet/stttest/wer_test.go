package stttest

import (
	"math"
	"slices"
	"testing"
)

func TestWER(t *testing.T) {
	tests := []struct {
		name     string
		ref, hyp string
		edits    int
		words    int
		wer      float64
	}{
		{"identical", "he was not an ill disposed young man", "he was not an ill disposed young man", 0, 8, 0},
		{"case and punctuation", "Hello, World!", "hello world", 0, 2, 0},
		{"apostrophe dropped", "don't stop", "dont stop", 0, 2, 0},
		{"curly apostrophe", "it’s fine", "its fine", 0, 2, 0},
		{"hyphen splits", "cold-hearted man", "cold hearted man", 0, 3, 0},
		{"substitution", "the cat sat", "the hat sat", 1, 3, 1.0 / 3},
		{"deletion", "the cat sat down", "the cat down", 1, 4, 0.25},
		{"insertion", "the cat", "the fat cat", 1, 2, 0.5},
		{"all wrong and longer", "a b", "c d e", 3, 2, 1.5},
		{"empty hypothesis", "one two three", "", 3, 3, 1},
		{"extra spaces", "  one   two ", "one two", 0, 2, 0},
		{"empty both", "", "", 0, 0, 0},
		{"empty reference", "", "noise", 1, 0, 1},
		{"only punctuation", "...", "", 0, 0, 0},
		{"mixed edits", "and mister john dashwood had then leisure", "and mr john guess what and then at leisure", 5, 7, 5.0 / 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			edits, words := WordErrors(tc.ref, tc.hyp)
			if edits != tc.edits || words != tc.words {
				t.Errorf("WordErrors(%q, %q): got %d edits in %d words, want %d in %d", tc.ref, tc.hyp, edits, words, tc.edits, tc.words)
			}
			if got := WER(tc.ref, tc.hyp); math.Abs(got-tc.wer) > 1e-9 {
				t.Errorf("WER(%q, %q): got %.4f, want %.4f", tc.ref, tc.hyp, got, tc.wer)
			}
		})
	}
}

func TestWords(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"Mr. Dashwood's house", []string{"mr", "dashwoods", "house"}},
		{"ÉTÉ à Paris", []string{"été", "à", "paris"}},
		{"route 66, exit 3b", []string{"route", "66", "exit", "3b"}},
		{"", nil},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := Words(tc.in); !slices.Equal(got, tc.want) {
				t.Errorf("Words(%q): got %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
