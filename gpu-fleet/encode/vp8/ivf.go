package vp8

import (
	"errors"
	"fmt"
	"io"

	"github.com/pion/rtp"
	"github.com/pion/rtp/codecs"
	"github.com/pion/webrtc/v4"
	"github.com/pion/webrtc/v4/pkg/media/ivfreader"
	"github.com/pion/webrtc/v4/pkg/media/ivfwriter"
)

// IVFWriter writes VP8 frames into an IVF file, the plain container that
// ffmpeg, ffplay and libvpx's tools read. pion's ivfwriter does the
// container; it takes RTP, so each frame goes in as the packets a track
// would send.
type IVFWriter struct {
	w   *ivfwriter.IVFWriter
	pay codecs.VP8Payloader
	seq uint16
}

// ivfMTU is the payload size frames are split into on the way to the
// writer, which joins them again; any size works.
const ivfMTU = 1200

// NewIVFWriter writes the IVF file header for a VP8 stream whose
// presentation times count frames at fps.
func NewIVFWriter(w io.Writer, width, height, fps int) (*IVFWriter, error) {
	iw, err := ivfwriter.NewWith(w, ivfwriter.WithCodec(webrtc.MimeTypeVP8),
		ivfwriter.WithWidthAndHeight(uint16(width), uint16(height)),
		ivfwriter.WithFrameRate(1, uint32(fps)), ivfwriter.WithDirectPTS())
	if err != nil {
		return nil, fmt.Errorf("vp8: IVF writer: %w", err)
	}
	return &IVFWriter{w: iw}, nil
}

// WritePacket appends one frame's packet with its presentation time in
// frames (counted from the first frame written).
func (iw *IVFWriter) WritePacket(packet []byte, pts int64) error {
	parts := iw.pay.Payload(ivfMTU, packet)
	for i, p := range parts {
		err := iw.w.WriteRTP(&rtp.Packet{
			Header:  rtp.Header{Version: 2, Marker: i == len(parts)-1, SequenceNumber: iw.seq, Timestamp: uint32(pts)},
			Payload: p,
		})
		iw.seq++
		if err != nil {
			return fmt.Errorf("vp8: writing IVF frame: %w", err)
		}
	}
	return nil
}

// Close records the frame count in the header when the writer can seek,
// and closes the underlying writer when it is an io.Closer.
func (iw *IVFWriter) Close() error { return iw.w.Close() }

// IVFReader reads the frames of a VP8 IVF file (pion's ivfreader). It is
// for files we wrote (tests, scripts/render-file): the reader allocates
// what a frame header declares, so it is not for strangers' files.
type IVFReader struct {
	r             *ivfreader.IVFReader
	h             *ivfreader.IVFFileHeader
	Width, Height int
	FPS           int
}

// NewIVFReader reads and checks the IVF header.
func NewIVFReader(r io.Reader) (*IVFReader, error) {
	ir, h, err := ivfreader.NewWith(r)
	if err != nil {
		return nil, fmt.Errorf("vp8: reading IVF header: %w", err)
	}
	if h.FourCC != "VP80" || h.TimebaseNumerator == 0 || h.TimebaseDenominator == 0 {
		return nil, errors.New("vp8: not a VP8 IVF file")
	}
	return &IVFReader{r: ir, h: h, Width: int(h.Width), Height: int(h.Height), FPS: int(h.TimebaseDenominator)}, nil
}

// Next returns the next frame and its presentation time in frames, or
// io.EOF.
func (ir *IVFReader) Next() (packet []byte, pts int64, err error) {
	frame, h, err := ir.r.ParseNextFrame()
	if err != nil {
		return nil, 0, err
	}
	// The reader scales the stored pts to ticks of the timebase's
	// numerator; scale back to the stored pts.
	return frame, int64(h.Timestamp * uint64(ir.h.TimebaseNumerator) / uint64(ir.h.TimebaseDenominator)), nil
}
