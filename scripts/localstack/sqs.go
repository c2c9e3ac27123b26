package localstack

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
)

// SQS is a running local SQS server (scripts/sqs-server.mjs on the
// local-aws-sqs npm package). It speaks the JSON protocol aws-sdk-go-v2 uses
// and honours RedrivePolicy dead-letter queues.
type SQS struct {
	// Endpoint is http://127.0.0.1:PORT, for AWSConfig. Queue URLs it hands
	// out start with it.
	Endpoint string
	Port     int
	proc     *Process
}

// StartSQS starts the SQS server on 127.0.0.1. Queues live in memory.
func StartSQS(ctx context.Context, opts Options) (*SQS, error) {
	return retryPortRace(func() (*SQS, error) { return startSQSOnce(ctx, opts) })
}

func startSQSOnce(ctx context.Context, opts Options) (*SQS, error) {
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	scripts := filepath.Join(root, "scripts")
	script := filepath.Join(scripts, "sqs-server.mjs")
	if err := requireFile("local-aws-sqs npm package", filepath.Join(scripts, "node_modules", "local-aws-sqs", "package.json")); err != nil {
		return nil, err
	}
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, fmt.Errorf("localstack: node not found: %w", ErrNotInstalled)
	}
	logDir, err := opts.logDir()
	if err != nil {
		return nil, err
	}
	port, err := opts.port()
	if err != nil {
		return nil, err
	}
	proc, err := StartProcess(Command{
		Name:    "SQS server",
		Path:    node,
		Args:    []string{script, "--port", strconv.Itoa(port), "--host", "127.0.0.1"},
		Dir:     scripts,
		LogPath: filepath.Join(logDir, logFileName("sqs", port)),
	})
	if err != nil {
		return nil, err
	}
	if err := proc.WaitTCP(ctx, "127.0.0.1:"+strconv.Itoa(port), opts.startTimeout()); err != nil {
		proc.Stop()
		return nil, err
	}
	return &SQS{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), Port: port, proc: proc}, nil
}

// LogPath is the file holding the server's output.
func (q *SQS) LogPath() string { return q.proc.LogPath() }

// Stop ends the server and waits for it.
func (q *SQS) Stop() error { return q.proc.Stop() }
