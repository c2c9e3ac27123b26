package audio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// MaxWAVBytes bounds the data chunk ReadWAV accepts (about 50 minutes of 48 kHz
// stereo) so a hostile header cannot make it allocate without limit.
const MaxWAVBytes = 512 << 20

// ErrNotWAV reports input that is not a PCM16 RIFF/WAVE file.
var ErrNotWAV = errors.New("audio: not a PCM16 RIFF/WAVE file")

// ReadWAV reads a 16-bit PCM RIFF/WAVE stream. Stereo and wider files are
// downmixed to mono by averaging the channels.
func ReadWAV(r io.Reader) (pcm []int16, sampleRate int, err error) {
	var riff [12]byte
	if _, err := io.ReadFull(r, riff[:]); err != nil {
		return nil, 0, fmt.Errorf("%w: reading RIFF header: %v", ErrNotWAV, err)
	}
	if string(riff[0:4]) != "RIFF" || string(riff[8:12]) != "WAVE" {
		return nil, 0, ErrNotWAV
	}
	var channels int
	var haveFormat bool
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return nil, 0, fmt.Errorf("%w: no data chunk: %v", ErrNotWAV, err)
		}
		id := string(hdr[0:4])
		size := int64(binary.LittleEndian.Uint32(hdr[4:8]))
		switch id {
		case "fmt ":
			if size < 16 || size > 1024 {
				return nil, 0, fmt.Errorf("%w: fmt chunk of %d bytes", ErrNotWAV, size)
			}
			buf := make([]byte, size+size%2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return nil, 0, fmt.Errorf("%w: reading fmt chunk: %v", ErrNotWAV, err)
			}
			format := binary.LittleEndian.Uint16(buf[0:2])
			channels = int(binary.LittleEndian.Uint16(buf[2:4]))
			sampleRate = int(binary.LittleEndian.Uint32(buf[4:8]))
			bits := binary.LittleEndian.Uint16(buf[14:16])
			// 0xFFFE is WAVE_FORMAT_EXTENSIBLE, which sox writes for some files.
			if (format != 1 && format != 0xFFFE) || bits != 16 {
				return nil, 0, fmt.Errorf("%w: format %d with %d bits per sample", ErrNotWAV, format, bits)
			}
			if channels < 1 || channels > 8 || sampleRate < 1000 || sampleRate > 192000 {
				return nil, 0, fmt.Errorf("%w: %d channels at %d Hz", ErrNotWAV, channels, sampleRate)
			}
			haveFormat = true
		case "data":
			if !haveFormat {
				return nil, 0, fmt.Errorf("%w: data chunk before fmt chunk", ErrNotWAV)
			}
			if size > MaxWAVBytes {
				return nil, 0, fmt.Errorf("%w: data chunk of %d bytes is over the %d byte limit", ErrNotWAV, size, MaxWAVBytes)
			}
			// Streams written before their length was known declare 0 or
			// 0xFFFFFFFF; LimitReader keeps the read bounded either way.
			data, err := io.ReadAll(io.LimitReader(r, size))
			if err != nil {
				return nil, 0, fmt.Errorf("%w: reading data: %v", ErrNotWAV, err)
			}
			return DecodePCM16(data, channels), sampleRate, nil
		default:
			if _, err := io.CopyN(io.Discard, r, size+size%2); err != nil {
				return nil, 0, fmt.Errorf("%w: skipping %q chunk: %v", ErrNotWAV, id, err)
			}
		}
	}
}

// WriteWAV writes mono 16-bit PCM as a RIFF/WAVE stream.
func WriteWAV(w io.Writer, pcm []int16, sampleRate int) error {
	dataBytes := len(pcm) * 2
	buf := make([]byte, 44+dataBytes)
	copy(buf[0:], "RIFF")
	binary.LittleEndian.PutUint32(buf[4:], uint32(36+dataBytes))
	copy(buf[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(buf[16:], 16)
	binary.LittleEndian.PutUint16(buf[20:], 1) // PCM
	binary.LittleEndian.PutUint16(buf[22:], 1) // mono
	binary.LittleEndian.PutUint32(buf[24:], uint32(sampleRate))
	binary.LittleEndian.PutUint32(buf[28:], uint32(sampleRate*2))
	binary.LittleEndian.PutUint16(buf[32:], 2)
	binary.LittleEndian.PutUint16(buf[34:], 16)
	copy(buf[36:], "data")
	binary.LittleEndian.PutUint32(buf[40:], uint32(dataBytes))
	for i, s := range pcm {
		binary.LittleEndian.PutUint16(buf[44+2*i:], uint16(s))
	}
	_, err := w.Write(buf)
	return err
}
