package localstack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// LiveKitVersion is the livekit-server release scripts/setup.sh builds.
const LiveKitVersion = "1.13.5"

// LiveKit is a running livekit-server bound to loopback.
type LiveKit struct {
	// URL is the signalling address clients and the server SDK dial,
	// ws://127.0.0.1:PORT (server SDK clients accept it as is).
	URL       string
	APIKey    string
	APISecret string
	// Port is the signalling port; UDPPort and TCPPort carry media.
	Port    int
	UDPPort int
	TCPPort int
	// ConfigPath is the YAML file the server was started with.
	ConfigPath string
	proc       *Process
	webhooks   []string
}

// LiveKitBinary returns where scripts/setup.sh installs livekit-server.
func LiveKitBinary() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".local", "bin", "livekit-server"), nil
}

// StartLiveKit starts livekit-server with every port free-picked (or
// opts.Port for signalling), ICE restricted to the loopback interface, and a
// single API key. Several instances may run at once.
func StartLiveKit(ctx context.Context, opts Options) (*LiveKit, error) {
	return retryPortRace(func() (*LiveKit, error) { return startLiveKitOnce(ctx, opts) })
}

func startLiveKitOnce(ctx context.Context, opts Options) (*LiveKit, error) {
	bin, err := LiveKitBinary()
	if err != nil {
		return nil, err
	}
	if err := requireFile("livekit-server", bin); err != nil {
		return nil, err
	}
	logDir, err := opts.logDir()
	if err != nil {
		return nil, err
	}
	port, err := opts.port()
	if err != nil {
		return nil, err
	}
	udpPort, err := FreeUDPPort()
	if err != nil {
		return nil, err
	}
	tcpPort, err := FreePort()
	if err != nil {
		return nil, err
	}
	lk := &LiveKit{
		URL:       "ws://127.0.0.1:" + strconv.Itoa(port),
		APIKey:    opts.APIKey,
		APISecret: opts.APISecret,
		Port:      port,
		UDPPort:   udpPort,
		TCPPort:   tcpPort,
		webhooks:  opts.WebhookURLs,
	}
	if lk.APIKey == "" {
		lk.APIKey = "devkey"
	}
	if lk.APISecret == "" {
		// livekit-server rejects secrets shorter than 32 characters.
		secret := make([]byte, 24)
		if _, err := rand.Read(secret); err != nil {
			return nil, err
		}
		lk.APISecret = hex.EncodeToString(secret)
	}
	if len(lk.APISecret) < 32 {
		return nil, fmt.Errorf("localstack: livekit api secret must be at least 32 characters")
	}

	lk.ConfigPath = filepath.Join(logDir, logFileName("livekit", port)+".yaml")
	if err := os.WriteFile(lk.ConfigPath, []byte(lk.config()), 0o600); err != nil {
		return nil, err
	}
	proc, err := StartProcess(Command{
		Name:    "livekit-server",
		Path:    bin,
		Args:    []string{"--config", lk.ConfigPath},
		LogPath: filepath.Join(logDir, logFileName("livekit", port)),
	})
	if err != nil {
		return nil, err
	}
	lk.proc = proc
	if err := proc.WaitTCP(ctx, "127.0.0.1:"+strconv.Itoa(port), opts.startTimeout()); err != nil {
		proc.Stop()
		return nil, err
	}
	return lk, nil
}

// config renders the server's YAML. Keys and values are plain tokens, so
// building it by hand avoids a YAML encoder round trip without quoting risk.
func (lk *LiveKit) config() string {
	var b strings.Builder
	fmt.Fprintf(&b, "port: %d\n", lk.Port)
	b.WriteString("bind_addresses: [\"127.0.0.1\"]\n")
	b.WriteString("rtc:\n")
	fmt.Fprintf(&b, "  udp_port: %d\n", lk.UDPPort)
	fmt.Fprintf(&b, "  tcp_port: %d\n", lk.TCPPort)
	b.WriteString("  use_external_ip: false\n")
	b.WriteString("  node_ip: 127.0.0.1\n")
	b.WriteString("  enable_loopback_candidate: true\n")
	b.WriteString("  interfaces:\n    includes: [\"lo\"]\n")
	b.WriteString("keys:\n")
	fmt.Fprintf(&b, "  %s: %s\n", lk.APIKey, lk.APISecret)
	if len(lk.webhooks) > 0 {
		fmt.Fprintf(&b, "webhook:\n  api_key: %s\n  urls:\n", lk.APIKey)
		for _, u := range lk.webhooks {
			fmt.Fprintf(&b, "    - %q\n", u)
		}
	}
	b.WriteString("logging:\n  level: info\n  json: true\n  pion_level: warn\n")
	return b.String()
}

// LogPath is the file holding the server's output.
func (lk *LiveKit) LogPath() string { return lk.proc.LogPath() }

// Stop ends the server and waits for it.
func (lk *LiveKit) Stop() error { return lk.proc.Stop() }

// Pid is the livekit-server process id (benchmarks read its CPU time).
func (lk *LiveKit) Pid() int { return lk.proc.cmd.Process.Pid }
