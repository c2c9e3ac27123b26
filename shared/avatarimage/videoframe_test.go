package avatarimage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/testfiles"
)

func needBox(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"ffmpeg", "prlimit"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed (scripts/setup.sh installs it)", bin)
		}
	}
}

func TestVideoFrameReadsRealVideos(t *testing.T) {
	needBox(t)
	for _, f := range []string{testfiles.FaceMP4, testfiles.FaceWebM} {
		t.Run(filepath.Ext(f), func(t *testing.T) {
			out, err := VideoFrame(context.Background(), "ffmpeg", testfiles.Read(t, f))
			if err != nil {
				t.Fatalf("VideoFrame: %v", err)
			}
			img, err := png.Decode(bytes.NewReader(out))
			if err != nil {
				t.Fatalf("the still is not a PNG: %v", err)
			}
			if b := img.Bounds(); b.Dx() != 512 || b.Dy() != 512 {
				t.Errorf("still: got %dx%d, want 512x512", b.Dx(), b.Dy())
			}
		})
	}
}

// TestVideoFrameOpensOnlyItsInput: an HLS playlist can make ffmpeg read any
// local file (or URL) as a segment and hand back its picture. Given as a
// "video", it must be refused, disguised as MP4 too, and the other file's
// frame never comes back.
func TestVideoFrameOpensOnlyItsInput(t *testing.T) {
	needBox(t)
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret.ts")
	conv := exec.Command("ffmpeg", "-v", "error", "-y", "-i", testfiles.Path(testfiles.FaceMP4),
		"-c", "copy", "-bsf:v", "h264_mp4toannexb", "-f", "mpegts", secret)
	if out, err := conv.CombinedOutput(); err != nil {
		t.Fatalf("make the local segment: %v %s", err, out)
	}
	playlist := fmt.Sprintf("#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\n%s\n#EXT-X-ENDLIST\n", secret)
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	remote := fmt.Sprintf("#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\n%s/x.ts\n#EXT-X-ENDLIST\n", srv.URL)
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"playlist", []byte(playlist)},
		{"playlist behind an ftyp box", append([]byte("\x00\x00\x00\x18ftypisom\x00\x00\x02\x00isomiso2"), playlist...)},
		{"playlist behind the EBML magic", append([]byte{0x1a, 0x45, 0xdf, 0xa3}, playlist...)},
		{"playlist of a loopback URL", []byte(remote)},
		{"concat script", []byte("ffconcat version 1.0\nfile " + secret + "\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := VideoFrame(context.Background(), "ffmpeg", tc.data)
			if err == nil || len(out) > 0 {
				t.Fatalf("got a %d-byte still (err %v), want a refusal and no picture of another file", len(out), err)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("requests that reached the loopback server: got %d, want 0", n)
	}
}

// TestVideoFrameRefusesHugeFrames: a frame over the pixel bound is not
// decoded at all (a crafted header could ask for gigabytes).
func TestVideoFrameRefusesHugeFrames(t *testing.T) {
	needBox(t)
	big := filepath.Join(t.TempDir(), "big.mp4")
	gen := exec.Command("ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "color=c=gray:s=4200x4100:d=0.2:r=5",
		"-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", big)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("make the video: %v %s", err, out)
	}
	data, err := os.ReadFile(big)
	if err != nil {
		t.Fatal(err)
	}
	out, err := VideoFrame(context.Background(), "ffmpeg", data)
	if err == nil || len(out) > 0 {
		t.Fatalf("4200x4100 video: got a %d-byte still (err %v), want a refusal", len(out), err)
	}
	if !errors.Is(err, ErrTooLarge) {
		t.Errorf("err: got %v, want ErrTooLarge (the upload's answer to a 4200x4100 image)", err)
	}
	if err := (Moderation{}).CheckVideo(context.Background(), data); !errors.Is(err, ErrTooLarge) {
		t.Errorf("moderation: got %v, want ErrTooLarge", err)
	}
}

// TestVideoFrameRunsInTheBox: the limits reach the ffmpeg that reads the
// video. A clip that reads fine with the defaults is refused when the box
// leaves no room for ffmpeg itself (16 MiB address space), and a "decoder"
// that spins is killed at a 1 s CPU limit (the same path a crafted file that
// makes ffmpeg spin would take).
func TestVideoFrameRunsInTheBox(t *testing.T) {
	needBox(t)
	clip := testfiles.Read(t, testfiles.FaceMP4)
	spinner := filepath.Join(t.TempDir(), "ffmpeg")
	if err := os.WriteFile(spinner, []byte("#!/bin/sh\nwhile :; do :; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, ffmpeg string
		lim          VideoLimits
		want         string
	}{
		{"16 MiB address space", "ffmpeg", VideoLimits{AddressSpace: 16 << 20, CPUSeconds: 10, FileSize: 1 << 20, OpenFiles: 32}, "not a playable"},
		{"1 CPU second, spinning", spinner, VideoLimits{AddressSpace: 1 << 30, CPUSeconds: 1, FileSize: 1 << 20, OpenFiles: 32}, "over its CPU or memory limit"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, err := videoFrame(context.Background(), tc.ffmpeg, clip, tc.lim)
			if err == nil || len(out) > 0 {
				t.Fatalf("got a %d-byte still (err %v), want a refusal", len(out), err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err: got %v, want it to say %q", err, tc.want)
			}
		})
	}
}

// TestBoxedGroupDiesAtTheDeadline: when the deadline passes, the whole
// process group goes, not just the direct child: a grandchild left behind
// would keep decoding outside anyone's watch.
func TestBoxedGroupDiesAtTheDeadline(t *testing.T) {
	needBox(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	out, _, err := runBoxed(ctx, DefaultVideoLimits, "sh", []string{"-c", "sleep 60 & echo $!; wait"}, 1<<10)
	if err == nil {
		t.Fatal("got no error, want the run cut at its deadline")
	}
	pid, perr := strconv.Atoi(strings.TrimSpace(string(out)))
	if perr != nil {
		t.Fatalf("grandchild pid: got %q (%v)", out, err)
	}
	// Killed processes are reaped by init shortly after; wait for that
	// rather than for time.
	for range 100 {
		if !alive(pid) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	t.Errorf("grandchild %d: got still running after the deadline, want it killed with its group", pid)
}

// alive reports a process that exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] != 'Z'
}

// TestBoxedChildRunsUnderLimits reads the limits the child actually has,
// and checks that the CPU limit stops a child that spins.
func TestBoxedChildRunsUnderLimits(t *testing.T) {
	needBox(t)
	lim := VideoLimits{AddressSpace: 512 << 20, CPUSeconds: 1, FileSize: 1 << 20, OpenFiles: 16}
	out, _, err := runBoxed(context.Background(), lim, "cat", []string{"/proc/self/limits"}, 1<<16)
	if err != nil {
		t.Fatalf("cat /proc/self/limits: %v", err)
	}
	for _, want := range []struct{ name, value string }{
		{"Max address space", "536870912"},
		{"Max cpu time", "1"},
		{"Max file size", "1048576"},
		{"Max open files", "16"},
		{"Max core file size", "0"},
	} {
		line := ""
		for _, l := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(l, want.name) {
				line = l
			}
		}
		if f := strings.Fields(strings.TrimPrefix(line, want.name)); len(f) < 2 || f[0] != want.value || f[1] != want.value {
			t.Errorf("%s: got %q, want soft and hard %s", want.name, line, want.value)
		}
	}
	_, _, err = runBoxed(context.Background(), lim, "sh", []string{"-c", "while :; do :; done"}, 1<<10)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Exited() {
		t.Errorf("spinning child: got %v, want it killed by a signal at its CPU limit", err)
	}
}

func FuzzVideoDemuxer(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x18ftypisom"))
	f.Add([]byte{0x1a, 0x45, 0xdf, 0xa3, 0x01})
	f.Add([]byte("#EXTM3U\n#EXTINF:1,\nfile:///etc/passwd\n"))
	f.Add([]byte("ffconcat version 1.0\nfile /etc/passwd\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := videoDemuxer(data)
		switch {
		case err != nil && d != "":
			t.Fatalf("refused with a demuxer %q", d)
		case d == "mov" && string(data[4:8]) != "ftyp":
			t.Fatalf("mov without an ftyp box: %q", data)
		case d == "matroska" && !bytes.HasPrefix(data, []byte{0x1a, 0x45, 0xdf, 0xa3}):
			t.Fatalf("matroska without the EBML magic: %q", data)
		case err == nil && d != "mov" && d != "matroska":
			t.Fatalf("unexpected demuxer %q", d)
		}
	})
}
