package vp8

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// IVFWriter writes VP8 packets into an IVF file, the plain container that
// ffmpeg, ffplay and libvpx's tools read.
type IVFWriter struct {
	w      io.Writer
	frames uint32
}

// NewIVFWriter writes the IVF file header for a VP8 stream.
func NewIVFWriter(w io.Writer, width, height, fps int) (*IVFWriter, error) {
	var h [32]byte
	copy(h[0:], "DKIF")
	binary.LittleEndian.PutUint16(h[4:], 0)  // version
	binary.LittleEndian.PutUint16(h[6:], 32) // header size
	copy(h[8:], "VP80")
	binary.LittleEndian.PutUint16(h[12:], uint16(width))
	binary.LittleEndian.PutUint16(h[14:], uint16(height))
	binary.LittleEndian.PutUint32(h[16:], uint32(fps)) // timebase denominator
	binary.LittleEndian.PutUint32(h[20:], 1)           // timebase numerator
	binary.LittleEndian.PutUint32(h[24:], 0)           // frame count, fixed in Close when seekable
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("vp8: writing IVF header: %w", err)
	}
	return &IVFWriter{w: w}, nil
}

// WritePacket appends one frame's packet with its presentation time in frames.
func (iw *IVFWriter) WritePacket(packet []byte, pts int64) error {
	var h [12]byte
	binary.LittleEndian.PutUint32(h[0:], uint32(len(packet)))
	binary.LittleEndian.PutUint64(h[4:], uint64(pts))
	if _, err := iw.w.Write(h[:]); err != nil {
		return fmt.Errorf("vp8: writing IVF frame header: %w", err)
	}
	if _, err := iw.w.Write(packet); err != nil {
		return fmt.Errorf("vp8: writing IVF frame: %w", err)
	}
	iw.frames++
	return nil
}

// Close records the frame count in the header when the writer can seek.
// It does not close the underlying writer.
func (iw *IVFWriter) Close() error {
	ws, ok := iw.w.(io.WriteSeeker)
	if !ok {
		return nil
	}
	end, err := ws.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], iw.frames)
	if _, err := ws.Seek(24, io.SeekStart); err != nil {
		return err
	}
	if _, err := ws.Write(n[:]); err != nil {
		return err
	}
	_, err = ws.Seek(end, io.SeekStart)
	return err
}

// IVFReader reads the packets of an IVF file.
type IVFReader struct {
	r             io.Reader
	Width, Height int
	FPS           int
}

// maxIVFFrame bounds one frame's declared size, so a bad file cannot make
// the reader allocate without limit.
const maxIVFFrame = 16 << 20

// NewIVFReader reads and checks the IVF header.
func NewIVFReader(r io.Reader) (*IVFReader, error) {
	var h [32]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, fmt.Errorf("vp8: reading IVF header: %w", err)
	}
	if string(h[0:4]) != "DKIF" || string(h[8:12]) != "VP80" {
		return nil, errors.New("vp8: not a VP8 IVF file")
	}
	return &IVFReader{
		r:      r,
		Width:  int(binary.LittleEndian.Uint16(h[12:])),
		Height: int(binary.LittleEndian.Uint16(h[14:])),
		FPS:    int(binary.LittleEndian.Uint32(h[16:])),
	}, nil
}

// Next returns the next packet and its presentation time, or io.EOF.
func (ir *IVFReader) Next() (packet []byte, pts int64, err error) {
	var h [12]byte
	if _, err := io.ReadFull(ir.r, h[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, 0, fmt.Errorf("vp8: truncated IVF frame header: %w", err)
		}
		return nil, 0, err
	}
	size := binary.LittleEndian.Uint32(h[0:])
	if size > maxIVFFrame {
		return nil, 0, fmt.Errorf("vp8: IVF frame of %d bytes is over the limit", size)
	}
	packet = make([]byte, size)
	if _, err := io.ReadFull(ir.r, packet); err != nil {
		return nil, 0, fmt.Errorf("vp8: truncated IVF frame: %w", err)
	}
	return packet, int64(binary.LittleEndian.Uint64(h[4:])), nil
}
