package localstack

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
)

// DynamoDB is a running DynamoDB Local (the jar shipped inside the
// amplify-dynamodb-simulator npm package).
type DynamoDB struct {
	// Endpoint is http://127.0.0.1:PORT, for AWSConfig.
	Endpoint string
	Port     int
	proc     *Process
}

// DynamoDBEmulatorDir returns where scripts/setup.sh leaves the DynamoDB Local
// jar and its native libraries.
func DynamoDBEmulatorDir() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "scripts", "node_modules", "amplify-dynamodb-simulator", "emulator"), nil
}

// StartDynamoDB starts DynamoDB Local on 127.0.0.1: in memory, or on disk in
// opts.DataDir with one shared database for every credential and region.
func StartDynamoDB(ctx context.Context, opts Options) (*DynamoDB, error) {
	return retryPortRace(func() (*DynamoDB, error) { return startDynamoDBOnce(ctx, opts) })
}

func startDynamoDBOnce(ctx context.Context, opts Options) (*DynamoDB, error) {
	emulator, err := DynamoDBEmulatorDir()
	if err != nil {
		return nil, err
	}
	jar := filepath.Join(emulator, "DynamoDBLocal.jar")
	if err := requireFile("DynamoDB Local jar", jar); err != nil {
		return nil, err
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("localstack: java not found: %w", ErrNotInstalled)
	}
	logDir, err := opts.logDir()
	if err != nil {
		return nil, err
	}
	port, err := opts.port()
	if err != nil {
		return nil, err
	}
	args := []string{
		// Short-lived test servers: a small heap, one GC thread and the
		// quick C1 compiler keep start-up and CPU use low on shared cores.
		"-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
		"-Djava.library.path=" + filepath.Join(emulator, "DynamoDBLocal_lib"),
		"-jar", jar,
		"-port", strconv.Itoa(port),
		// Telemetry would try to reach the internet.
		"-disableTelemetry",
	}
	if opts.DataDir != "" {
		if err := os.MkdirAll(opts.DataDir, 0o755); err != nil {
			return nil, err
		}
		args = append(args, "-dbPath", opts.DataDir)
	} else {
		args = append(args, "-inMemory")
	}
	// One database whatever credentials or region a client signs with.
	args = append(args, "-sharedDb")
	proc, err := StartProcess(Command{
		Name:    "DynamoDB Local",
		Path:    java,
		Args:    args,
		Dir:     emulator,
		LogPath: filepath.Join(logDir, logFileName("dynamodb", port)),
	})
	if err != nil {
		return nil, err
	}
	if err := proc.WaitTCP(ctx, "127.0.0.1:"+strconv.Itoa(port), opts.startTimeout()); err != nil {
		proc.Stop()
		return nil, err
	}
	return &DynamoDB{Endpoint: "http://127.0.0.1:" + strconv.Itoa(port), Port: port, proc: proc}, nil
}

// LogPath is the file holding the server's output.
func (d *DynamoDB) LogPath() string { return d.proc.LogPath() }

// Stop ends DynamoDB Local and waits for it.
func (d *DynamoDB) Stop() error { return d.proc.Stop() }
