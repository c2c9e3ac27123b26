package localstack_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"avatarsvc/scripts/localstack"
)

func TestWaitTCPReportsEarlyExitWithLogTail(t *testing.T) {
	port, err := localstack.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p, err := localstack.StartProcess(localstack.Command{
		Name:    "failing",
		Path:    "/bin/sh",
		Args:    []string{"-c", "echo cannot bind port; exit 3"},
		LogPath: filepath.Join(t.TempDir(), "failing.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	err = p.WaitTCP(context.Background(), "127.0.0.1:"+strconv.Itoa(port), 30*time.Second)
	if err == nil {
		t.Fatal("WaitTCP on a process that exited: got no error, want one")
	}
	for _, want := range []string{"failing exited", "cannot bind port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestStopEndsTheWholeProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "grandchild.pid")
	p, err := localstack.StartProcess(localstack.Command{
		Name: "parent",
		Path: "/bin/sh",
		// The backgrounded sleep would outlive a kill of the shell alone.
		Args:    []string{"-c", "sleep 300 & echo $! > " + pidFile + "; wait"},
		LogPath: filepath.Join(t.TempDir(), "parent.log"),
	})
	if err != nil {
		t.Fatal(err)
	}
	var grandchild int
	deadline := time.Now().Add(10 * time.Second)
	for grandchild == 0 && time.Now().Before(deadline) {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			grandchild, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if grandchild == 0 {
		t.Fatal("grandchild never started")
	}
	if err := p.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-p.Exited():
	default:
		t.Error("Stop returned before the process exited")
	}
	// The grandchild is re-parented when its parent dies; whether the new
	// parent reaps it quickly depends on the machine, so a zombie counts as
	// ended.
	deadline = time.Now().Add(10 * time.Second)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(grandchild) + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d still runs after Stop: %s", grandchild, stat)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestStartersReportMissingInstall(t *testing.T) {
	// A module root with nothing installed: every external stand-in must say
	// so with ErrNotInstalled, which the *T helpers turn into a failure
	// naming scripts/setup.sh.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module empty\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	opts := localstack.Options{LogDir: t.TempDir(), StartTimeout: time.Second}
	ctx := context.Background()
	starters := map[string]func() error{
		"StartLiveKit":  func() error { _, err := localstack.StartLiveKit(ctx, opts); return err },
		"StartDynamoDB": func() error { _, err := localstack.StartDynamoDB(ctx, opts); return err },
		"StartSQS":      func() error { _, err := localstack.StartSQS(ctx, opts); return err },
	}
	for name, start := range starters {
		t.Run(name, func(t *testing.T) {
			if err := start(); !errors.Is(err, localstack.ErrNotInstalled) {
				t.Errorf("got %v, want ErrNotInstalled", err)
			}
		})
	}
}
