package stttest

import (
	"strings"
	"unicode"
)

// WER is the word error rate of hypothesis against reference: the
// word-level edit distance (substitutions, deletions and insertions)
// divided by the number of reference words. Both are normalised by words:
// case is ignored, apostrophes are dropped ("don't" = "dont") and any other
// character that is not a letter or digit separates words ("cold-hearted" =
// "cold hearted", "Mr." = "mr"). An empty reference gives 0 against an
// empty hypothesis and 1 otherwise.
func WER(reference, hypothesis string) float64 {
	edits, words := WordErrors(reference, hypothesis)
	if words == 0 {
		if edits == 0 {
			return 0
		}
		return 1
	}
	return float64(edits) / float64(words)
}

// WordErrors returns the word-level edit distance between reference and
// hypothesis, normalised as for WER, and the number of reference words. Sum
// both over a test set for its overall WER: averaging per-utterance rates
// would overweight short utterances.
func WordErrors(reference, hypothesis string) (edits, words int) {
	ref, hyp := Words(reference), Words(hypothesis)
	// One row of the Levenshtein table at a time.
	prev := make([]int, len(hyp)+1)
	cur := make([]int, len(hyp)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ref); i++ {
		cur[0] = i
		for j := 1; j <= len(hyp); j++ {
			sub := prev[j-1]
			if ref[i-1] != hyp[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(hyp)], len(ref)
}

// Words splits text into the normalised words WER compares.
func Words(text string) []string {
	text = strings.Map(func(r rune) rune {
		switch {
		case r == '\'' || r == '’':
			return -1
		case unicode.IsLetter(r) || unicode.IsDigit(r):
			return unicode.ToLower(r)
		default:
			return ' '
		}
	}, text)
	return strings.Fields(text)
}
