package tts

// The //export lives in its own file: cgo copies the preamble of a file with
// an export into two C files, so it must hold declarations only.

/*
#include <stddef.h>
*/
import "C"

import "unsafe"

// goSynthChunk receives one buffer from espeak-ng (wav is NULL and n 0 on
// the last call of a synthesis) and returns 1 to abort the synthesis.
//
//export goSynthChunk
func goSynthChunk(wav *C.short, n C.int) C.int {
	j := active
	if j == nil {
		return 1
	}
	var pcm []int16
	if wav != nil && n > 0 {
		// Process copies, so the slice does not outlive espeak's buffer.
		pcm = unsafe.Slice((*int16)(unsafe.Pointer(wav)), int(n))
	}
	if !j.chunk(pcm) {
		return 1
	}
	return 0
}
