package avatarimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Video bytes come from strangers (uploads, avatar URLs), and ffmpeg is a
// large attack surface: it follows playlists and references to other files
// and URLs, and a crafted header can ask for huge frames. So ffmpeg only
// ever runs as a separate process in this box:
//   - the container is sniffed here and pinned (-f mov or -f matroska): a
//     playlist, concat script or image sequence is refused before ffmpeg runs;
//   - -protocol_whitelist file: the one input file, nothing else is opened;
//   - -max_pixels: no frame larger than maxVideoPixels is decoded;
//   - bounded probing, one frame, one thread, a wall-clock deadline;
//   - rlimits on the child (prlimit): address space, CPU seconds, file size,
//     open files, no core dumps;
//   - its output is read up to maxFrameBytes, its stderr up to 4 KiB.
const (
	// maxVideoPixels matches the image bound (MaxDimension squared).
	maxVideoPixels = MaxDimension * MaxDimension
	// maxProbeBytes and maxProbeMicros bound how much ffmpeg reads to find
	// the streams (a crafted file can otherwise make it scan all 50 MB).
	maxProbeBytes  = 5 << 20
	maxProbeMicros = 5_000_000
	// maxFrameBytes bounds the PNG still ffmpeg writes.
	maxFrameBytes = 64 << 20
	// videoDeadline is the wall-clock budget for taking the still.
	videoDeadline = 20 * time.Second
)

// VideoLimits are the rlimits the ffmpeg child runs under.
type VideoLimits struct {
	AddressSpace int64 // bytes of virtual memory
	CPUSeconds   int64
	FileSize     int64 // bytes any file it writes may reach (it writes none)
	OpenFiles    int64
}

// DefaultVideoLimits fit one decode of a maxVideoPixels frame with one
// thread (measured peak well under 200 MB), with room to spare.
var DefaultVideoLimits = VideoLimits{AddressSpace: 1 << 30, CPUSeconds: 10, FileSize: 1 << 20, OpenFiles: 32}

// ErrVideoUnsupported means this deployment has no ffmpeg (or no prlimit to
// box it in) to read videos.
var ErrVideoUnsupported = errors.New("video avatars need ffmpeg and prlimit, which are not installed on this deployment")

// ErrNotVideo answers bytes that are neither MP4 nor WebM, or that ffmpeg
// cannot take a frame from.
var ErrNotVideo = errors.New("the file is not a playable MP4 or WebM video")

// videoDemuxer names ffmpeg's demuxer for data's container, by its first
// bytes: ISO base media (MP4, MOV) has an ftyp box first, WebM and Matroska
// start with the EBML magic. Anything else is refused.
func videoDemuxer(data []byte) (string, error) {
	switch {
	case len(data) >= 12 && string(data[4:8]) == "ftyp":
		return "mov", nil
	case len(data) >= 4 && bytes.Equal(data[:4], []byte{0x1a, 0x45, 0xdf, 0xa3}):
		return "matroska", nil
	}
	return "", ErrNotVideo
}

// VideoFrame takes one frame of a video as PNG with ffmpeg: half a second
// in, or the first frame of a shorter clip. Video avatars are animated from
// this still, like photos.
func VideoFrame(ctx context.Context, ffmpeg string, data []byte) ([]byte, error) {
	return videoFrame(ctx, ffmpeg, data, DefaultVideoLimits)
}

func videoFrame(ctx context.Context, ffmpeg string, data []byte, lim VideoLimits) ([]byte, error) {
	demuxer, err := videoDemuxer(data)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "video-*")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	f.Close()
	ctx, cancel := context.WithTimeout(ctx, videoDeadline)
	defer cancel()
	var lastErr error
	for _, at := range []string{"0.5", "0"} {
		args := []string{"-nostdin", "-hide_banner", "-loglevel", "error", "-threads", "1", "-filter_threads", "1",
			"-f", demuxer, "-protocol_whitelist", "file",
			"-probesize", strconv.Itoa(maxProbeBytes), "-analyzeduration", strconv.Itoa(maxProbeMicros),
			"-max_pixels", strconv.Itoa(maxVideoPixels),
			"-ss", at, "-t", "1", "-i", "file:" + f.Name(),
			"-map", "0:v:0", "-frames:v", "1", "-an", "-sn", "-dn",
			"-f", "image2pipe", "-vcodec", "png", "-"}
		out, stderr, err := runBoxed(ctx, lim, ffmpeg, args, maxFrameBytes)
		switch {
		case err == nil && len(out) > 0:
			return out, nil
		case errors.Is(err, ErrVideoUnsupported), errors.Is(err, ErrTooLarge):
			return nil, err
		case bytes.Contains(stderr, []byte("max pixel count")):
			// The decoder refused the frame's declared size before
			// allocating it; another seek point would meet the same.
			return nil, fmt.Errorf("%w (a video frame is over %d pixels)", ErrTooLarge, maxVideoPixels)
		case ctx.Err() != nil:
			return nil, fmt.Errorf("%w: the video took too long to read", ErrCorruptImage)
		case killedAtLimit(err):
			return nil, fmt.Errorf("%w: reading the video went over its CPU or memory limit (%v)", ErrCorruptImage, err)
		}
		lastErr = err
	}
	if lastErr != nil {
		return nil, fmt.Errorf("%w (%v)", ErrNotVideo, lastErr)
	}
	return nil, ErrNotVideo
}

// runBoxed runs bin with args under prlimit's rlimits in its own process
// group, killed with the group when ctx ends, and returns its stdout, read
// up to maxOut bytes (more is an error), and the start of its stderr.
func runBoxed(ctx context.Context, lim VideoLimits, bin string, args []string, maxOut int) (stdout, stderr []byte, err error) {
	binPath, err := exec.LookPath(bin)
	if err != nil {
		return nil, nil, ErrVideoUnsupported
	}
	prlimit, err := prlimitPath(binPath)
	if err != nil {
		return nil, nil, ErrVideoUnsupported
	}
	boxed := append([]string{
		"--as=" + strconv.FormatInt(lim.AddressSpace, 10),
		"--cpu=" + strconv.FormatInt(lim.CPUSeconds, 10),
		"--fsize=" + strconv.FormatInt(lim.FileSize, 10),
		"--nofile=" + strconv.FormatInt(lim.OpenFiles, 10),
		"--core=0",
		"--", binPath}, args...)
	cmd := exec.CommandContext(ctx, prlimit, boxed...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"} // nothing of ours leaks into the child
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	out := &cappedBuffer{max: maxOut}
	errOut := &cappedBuffer{max: 4 << 10, truncate: true}
	cmd.Stdout, cmd.Stderr = out, errOut
	if err := cmd.Run(); err != nil {
		if out.overflow {
			return nil, errOut.buf.Bytes(), fmt.Errorf("%w: the video's frame is too large", ErrTooLarge)
		}
		return out.buf.Bytes(), errOut.buf.Bytes(), fmt.Errorf("%s: %w: %s", bin, err, bytes.TrimSpace(errOut.buf.Bytes()))
	}
	return out.buf.Bytes(), errOut.buf.Bytes(), nil
}

// killedAtLimit reports a child the kernel killed at an rlimit: SIGKILL at
// the CPU limit (prlimit sets soft = hard), SIGXCPU, SIGXFSZ or SIGSEGV
// when the address space ran out.
func killedAtLimit(err error) bool {
	var exit *exec.ExitError
	if !errors.As(err, &exit) {
		return false
	}
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() {
		return false
	}
	switch ws.Signal() {
	case syscall.SIGKILL, syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGSEGV:
		return true
	}
	return false
}

// prlimitPath finds prlimit beside bin (a Lambda layer ships both in
// /opt/bin), else on PATH (util-linux).
func prlimitPath(bin string) (string, error) {
	if p := filepath.Join(filepath.Dir(bin), "prlimit"); p != bin {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath("prlimit")
}

// cappedBuffer keeps at most max bytes: past that it fails the write (so
// the child gets EPIPE and stops), or with truncate drops the rest.
type cappedBuffer struct {
	buf      bytes.Buffer
	max      int
	truncate bool
	overflow bool
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	room := c.max - c.buf.Len()
	if len(p) <= room {
		return c.buf.Write(p)
	}
	c.overflow = true
	c.buf.Write(p[:max(room, 0)])
	if c.truncate {
		return len(p), nil
	}
	return 0, errors.New("output over its limit")
}
