// Package localstack starts the real local stand-ins for the services the
// avatar service talks to: DynamoDB Local, an SQS server, an in-process S3
// and livekit-server. Tests use them through the *T helpers; `make run` uses
// the Start functions with fixed ports and a data directory.
//
// Every external piece is installed by scripts/setup.sh; when one is missing
// the error says so.
package localstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultStartTimeout bounds how long a stand-in may take to answer on its
// port. It is generous because several test binaries share two cores.
const DefaultStartTimeout = 60 * time.Second

// stopGrace is how long a child gets after SIGTERM before SIGKILL.
const stopGrace = 5 * time.Second

// ErrNotInstalled is wrapped into the error returned when a jar, node module
// or binary that scripts/setup.sh installs is missing, so callers can tell a
// missing install from a failed start.
var ErrNotInstalled = errors.New("run `bash scripts/setup.sh` to install the local stand-ins")

// Options configures a stand-in. The zero value picks free ports, keeps data in
// memory and logs under <repo>/.local/logs.
type Options struct {
	// Port is the main listening port; 0 picks a free one on 127.0.0.1.
	Port int
	// LogDir receives the child's combined stdout and stderr; empty means
	// <repo>/.local/logs.
	LogDir string
	// DataDir makes DynamoDB Local (-sharedDb) and S3 (StartS3With: a bbolt
	// file) keep their data on disk so a restarted `make run` finds it
	// again; empty keeps it in memory. Give each its own directory.
	DataDir string
	// APIKey and APISecret set livekit-server's single key pair; empty picks
	// "devkey" and a random secret. Only StartLiveKit uses them.
	APIKey    string
	APISecret string
	// WebhookURLs receive livekit-server's signed webhooks (StartLiveKit only).
	WebhookURLs []string
	// StartTimeout bounds the wait for the port to answer; 0 means
	// DefaultStartTimeout.
	StartTimeout time.Duration
}

func (o Options) startTimeout() time.Duration {
	if o.StartTimeout > 0 {
		return o.StartTimeout
	}
	return DefaultStartTimeout
}

func (o Options) logDir() (string, error) {
	if o.LogDir != "" {
		return o.LogDir, os.MkdirAll(o.LogDir, 0o755)
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, ".local", "logs")
	return dir, os.MkdirAll(dir, 0o755)
}

func (o Options) port() (int, error) {
	if o.Port > 0 {
		return o.Port, nil
	}
	return FreePort()
}

// RepoRoot walks up from the working directory to the directory holding go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("localstack: no go.mod above the working directory")
		}
		dir = parent
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localstack: pick free tcp port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeUDPPort returns a UDP port on 127.0.0.1 that was free a moment ago.
func FreeUDPPort() (int, error) {
	c, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("localstack: pick free udp port: %w", err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).Port, nil
}

// Command describes a child process to start.
type Command struct {
	// Name labels the process in errors and names its log file.
	Name string
	Path string
	Args []string
	// Env is added to the parent's environment.
	Env []string
	Dir string
	// LogPath receives stdout and stderr.
	LogPath string
}

// Process is a running child started in its own process group, so Stop also
// ends anything it spawned (java and node both fork helpers).
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	logFile *os.File
	exited  chan struct{}
	waitErr error
	once    sync.Once
}

// StartProcess starts c and returns at once; use WaitTCP to know it is ready.
func StartProcess(c Command) (*Process, error) {
	if err := os.MkdirAll(filepath.Dir(c.LogPath), 0o755); err != nil {
		return nil, err
	}
	logFile, err := os.Create(c.LogPath)
	if err != nil {
		return nil, fmt.Errorf("localstack: %s log: %w", c.Name, err)
	}
	cmd := exec.Command(c.Path, c.Args...)
	cmd.Dir = c.Dir
	cmd.Env = append(os.Environ(), c.Env...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("localstack: start %s: %w", c.Name, err)
	}
	p := &Process{name: c.Name, logPath: c.LogPath, cmd: cmd, logFile: logFile, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// LogPath is the file holding the child's output.
func (p *Process) LogPath() string { return p.logPath }

// Exited is closed once the child has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// LogTail returns up to the last n lines of the child's output.
func (p *Process) LogTail(n int) string {
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", p.logPath, err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WaitTCP polls addr until it accepts a connection, the child exits, or
// timeout passes. Errors carry the tail of the child's log.
func (p *Process) WaitTCP(ctx context.Context, addr string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var dialer net.Dialer
	for {
		conn, err := dialer.DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-p.exited:
			tail := p.LogTail(30)
			err := fmt.Errorf("localstack: %s exited before listening on %s (%v); log %s:\n%s",
				p.name, addr, p.waitErr, p.logPath, tail)
			if strings.Contains(strings.ToLower(tail), "address already in use") {
				return fmt.Errorf("%w: %w", errPortTaken, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("localstack: %s did not listen on %s within %s; log %s:\n%s",
				p.name, addr, timeout, p.logPath, p.LogTail(30))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop ends the child's whole process group (SIGTERM, then SIGKILL after a
// grace period) and waits for it. It is safe to call more than once.
func (p *Process) Stop() error {
	p.once.Do(func() {
		pgid := p.cmd.Process.Pid
		// SIGTERM is repeated because livekit-server treats the first as
		// "drain gracefully" (which can wait on rooms) and only a later one
		// as "exit now"; java and node exit on the first.
		resend := time.NewTicker(100 * time.Millisecond)
		defer resend.Stop()
		grace := time.After(stopGrace)
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
	wait:
		for {
			select {
			case <-p.exited:
				break wait
			case <-resend.C:
				_ = syscall.Kill(-pgid, syscall.SIGTERM)
			case <-grace:
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-p.exited
				break wait
			}
		}
		// Helpers the child forked may outlive it in the group.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		p.logFile.Close()
	})
	return nil
}

// errPortTaken marks a child that exited because a port picked for it was
// bound by someone else first.
var errPortTaken = errors.New("a picked port was taken before the server bound it")

// retryPortRace runs start again, a few times, while it loses a port race:
// a free-picked port is only free when picked, and parallel test processes
// pick from the same range.
func retryPortRace[T any](start func() (T, error)) (T, error) {
	const attempts = 4
	var (
		v   T
		err error
	)
	for i := 0; i < attempts; i++ {
		v, err = start()
		if !errors.Is(err, errPortTaken) {
			return v, err
		}
	}
	return v, err
}

// logFileName names a log so parallel instances never share one.
func logFileName(name string, port int) string {
	return name + "-" + strconv.Itoa(port) + "-" + strconv.Itoa(os.Getpid()) + ".log"
}

// requireFile returns an ErrNotInstalled error when path does not exist.
func requireFile(what, path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("localstack: %s not found at %s: %w", what, path, ErrNotInstalled)
	}
	return nil
}
