package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/go-logr/logr"
	protologger "github.com/livekit/protocol/logger"
	lksdk "github.com/livekit/server-sdk-go/v2"

	"avatarsvc/gpu-fleet/audiows"
	"avatarsvc/gpu-fleet/avatarsource"
	"avatarsvc/gpu-fleet/rendersession"
	"avatarsvc/shared/backend"
	"avatarsvc/shared/emf"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/netguard"
)

// Settings is a worker process's configuration, read from the environment
// (infra/renderer-host-user-data.sh writes it from SSM; `make run` and the
// tests set it locally). The service's own variables (tables, queue, bucket,
// AWS_ENDPOINT_URL_*) are read by backend.ConfigFromEnv.
type Settings struct {
	Backend backend.Config
	Worker  Config
	// Listen is the ws_uri listener's address (WS_LISTEN, 127.0.0.1:8765).
	Listen string
	// TLSCertFile and TLSKeyFile make the listener serve wss:// (TLS_CERT_FILE,
	// TLS_KEY_FILE). In production a certificate for the host's public name;
	// alternatively a TLS-terminating load balancer in front and plain ws here.
	TLSCertFile, TLSKeyFile string
	QueueWait               time.Duration // QUEUE_WAIT, 20s
	RoomPolicy              netguard.Policy
	AvatarPolicy            netguard.Policy
	GracePeriod             time.Duration // ROOM_GRACE_PERIOD
	JoinTimeout             time.Duration // ROOM_JOIN_TIMEOUT
	MaxConnections          int           // WS_MAX_CONNECTIONS
	// TrustedProxies: load balancers in front of the ws_uri listener whose
	// X-Forwarded-For names the client (WS_TRUSTED_PROXIES, none).
	TrustedProxies []netip.Prefix
	// GroupName and HookName: in an autoscaling group, the worker watches
	// the instance's target lifecycle state and completes HookName when
	// empty (ASG_NAME, ASG_LIFECYCLE_HOOK).
	GroupName, HookName string
	MetricsNamespace    string // METRICS_NAMESPACE, avatarsvc/renderer
	// ElevenLabsBaseURL and ElevenLabsKeySecret configure the elevenlabs
	// provider (ELEVENLABS_BASE_URL, ELEVENLABS_API_KEY_SECRET); see
	// ElevenLabsAgents.
	ElevenLabsBaseURL, ElevenLabsKeySecret string
	// ExpiryWarning: how long before its expiration a session warns its
	// ws_uri client and room (EXPIRY_WARNING, a duration; 60s).
	ExpiryWarning time.Duration
}

// SettingsFromEnv reads Settings; unset values take the defaults.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	backendCfg, err := backend.ConfigFromEnv(getenv)
	if err != nil {
		return Settings{}, err
	}
	s := Settings{Backend: backendCfg, Listen: or(getenv("WS_LISTEN"), "127.0.0.1:8765"),
		TLSCertFile: getenv("TLS_CERT_FILE"), TLSKeyFile: getenv("TLS_KEY_FILE"),
		GroupName: getenv("ASG_NAME"), HookName: getenv("ASG_LIFECYCLE_HOOK"),
		MetricsNamespace:  or(getenv("METRICS_NAMESPACE"), emf.RendererNamespace),
		ElevenLabsBaseURL: getenv("ELEVENLABS_BASE_URL"), ElevenLabsKeySecret: getenv("ELEVENLABS_API_KEY_SECRET"),
	}
	var errs []error
	dur := func(name string, into *time.Duration, def time.Duration) {
		*into = def
		if v := getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Errorf("%s=%q is not a duration", name, v))
			}
			*into = d
		}
	}
	num := func(name string, into *int, def int) {
		*into = def
		if v := getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				errs = append(errs, fmt.Errorf("%s=%q is not a positive number", name, v))
			}
			*into = n
		}
	}
	w := &s.Worker
	w.ID = or(getenv("WORKER_ID"), defaultWorkerID())
	// The CPU renderer costs about 0.15 core per stream; a GPU backend
	// would size this from the GPU instead.
	num("WORKER_SLOTS", &w.Slots, max(1, runtime.NumCPU()*5))
	num("WS_MAX_CONNECTIONS", &s.MaxConnections, 512)
	dur("LEASE_TTL", &w.LeaseTTL, 15*time.Second)
	dur("HEARTBEAT_EVERY", &w.HeartbeatEvery, time.Second)
	dur("DRAIN_TIMEOUT", &w.DrainTimeout, 15*time.Minute)
	dur("LAUNCH_TIMEOUT", &w.LaunchTimeout, 30*time.Second)
	dur("METRICS_EVERY", &w.MetricsEvery, 10*time.Second)
	dur("QUEUE_WAIT", &s.QueueWait, 20*time.Second)
	dur("ROOM_GRACE_PERIOD", &s.GracePeriod, 0)
	dur("ROOM_JOIN_TIMEOUT", &s.JoinTimeout, 0)
	dur("EXPIRY_WARNING", &s.ExpiryWarning, rendersession.DefaultExpiryWarning)
	if w.HeartbeatEvery*3 > w.LeaseTTL {
		errs = append(errs, fmt.Errorf("LEASE_TTL (%v) must be at least 3 x HEARTBEAT_EVERY (%v)", w.LeaseTTL, w.HeartbeatEvery))
	}
	var err1, err2 error
	s.RoomPolicy.AllowPrefixes, err1 = netguard.ParsePrefixes(getenv("ROOM_ALLOW_PREFIXES"))
	s.AvatarPolicy.AllowPrefixes, err2 = netguard.ParsePrefixes(getenv("AVATAR_ALLOW_PREFIXES"))
	if v := getenv("ROOM_ALLOWED_HOSTS"); v != "" {
		for _, h := range strings.Split(v, ",") {
			s.RoomPolicy.AllowHosts = append(s.RoomPolicy.AllowHosts, strings.TrimSpace(h))
		}
	}
	var err3 error
	s.TrustedProxies, err3 = netguard.ParsePrefixes(getenv("WS_TRUSTED_PROXIES"))
	errs = append(errs, err1, err2, err3)
	if (s.TLSCertFile == "") != (s.TLSKeyFile == "") {
		errs = append(errs, errors.New("TLS_CERT_FILE and TLS_KEY_FILE go together"))
	}
	// Empty: Start derives it from the bound listener (ws:// or wss://).
	w.AdvertiseURL = strings.TrimSuffix(getenv("WS_ADVERTISE_URL"), "/")
	return s, errors.Join(errs...)
}

func or(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func defaultWorkerID() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	rand.Read(b)
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b))
}

// Process is a wired worker with its ws_uri listener.
type Process struct {
	Settings Settings
	Worker   *Worker
	Backend  *backend.Backend
	listener net.Listener
	http     *http.Server
}

// Start wires a worker from s and starts its ws_uri listener; Run then
// takes jobs. log gets the JSON logs; metrics the EMF lines (stdout in
// production).
func Start(ctx context.Context, s Settings, log *slog.Logger, metrics io.Writer) (*Process, error) {
	a, err := backend.New(ctx, s.Backend, time.Now, log)
	if err != nil {
		return nil, err
	}
	// The LiveKit SDK and pion log through the SDK's package logger; send it
	// to the worker's JSON log instead of stderr.
	lksdk.SetLogger(protologger.LogRLogger(logr.FromSlogHandler(log.Handler())))
	audio := audiows.NewServer(log, audiows.Limits{MaxConnections: s.MaxConnections, TrustedProxies: s.TrustedProxies})
	ln, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return nil, fmt.Errorf("ws_uri listener: %w", err)
	}
	if s.Worker.AdvertiseURL == "" {
		scheme := "ws"
		if s.TLSCertFile != "" {
			scheme = "wss"
		}
		s.Worker.AdvertiseURL = scheme + "://" + ln.Addr().String()
	}
	srv := audio.HTTPServer(slog.NewLogLogger(log.Handler(), slog.LevelWarn))
	go func() {
		var err error
		if s.TLSCertFile != "" {
			err = srv.ServeTLS(ln, s.TLSCertFile, s.TLSKeyFile)
		} else {
			err = srv.Serve(ln)
		}
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ws_uri listener stopped", "err", err)
		}
	}()
	launcher := &RoomLauncher{
		Avatars:       avatarsource.New(avatarsource.Config{S3: a.S3, Policy: s.AvatarPolicy}),
		AvatarReason:  avatarsource.EndReason,
		Rooms:         s.RoomPolicy,
		Audio:         audio,
		GracePeriod:   s.GracePeriod,
		JoinTimeout:   s.JoinTimeout,
		ExpiryWarning: s.ExpiryWarning,
		Events:        a.Events,
		Agents:        a.Store,
		Progress:      a.Store,
		Remote: &ElevenLabsAgents{BaseURL: s.ElevenLabsBaseURL, SecretID: s.ElevenLabsKeySecret,
			Secrets: secretsmanager.NewFromConfig(a.AWS), Log: log},
		Log: log,
	}
	if a.Rooms != nil { // a nil *livekit.Client in the interface would not read as nil
		launcher.Dispatcher = a.Rooms
	}
	cfg := s.Worker
	cfg.Log = log
	cfg.Events = a.Events
	if metrics != nil {
		cfg.Metrics = NewMetrics(metrics, s.MetricsNamespace, s.GroupName)
	}
	queue := jobs.NewConsumer(a.SQS, s.Backend.QueueURL, s.QueueWait)
	return &Process{Settings: s, Backend: a, listener: ln, http: srv,
		Worker: New(cfg, queue, a.Store, a.Sessions, launcher)}, nil
}

// Addr is the ws_uri listener's address.
func (p *Process) Addr() string { return p.listener.Addr().String() }

// Run takes jobs until ctx is done, drains, and closes the listener. In an
// autoscaling group (ASG_NAME and ASG_LIFECYCLE_HOOK set) it also drains when
// the instance is marked for termination, and completes the hook once empty.
func (p *Process) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if p.Settings.GroupName != "" && p.Settings.HookName != "" {
		hook, err := p.lifecycleHook(ctx)
		if err != nil {
			return err
		}
		p.Worker.cfg.Lifecycle = hook
		go watchTermination(ctx, imds.NewFromConfig(p.Backend.AWS), cancel, p.Worker.log)
	}
	err := p.Worker.Run(ctx)
	shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	return errors.Join(err, p.http.Shutdown(shutdown))
}

func (p *Process) lifecycleHook(ctx context.Context) (*ASGHook, error) {
	id, err := imds.NewFromConfig(p.Backend.AWS).GetMetadata(ctx, &imds.GetMetadataInput{Path: "instance-id"})
	if err != nil {
		return nil, fmt.Errorf("instance id from IMDS: %w", err)
	}
	defer id.Content.Close()
	b, err := io.ReadAll(id.Content)
	if err != nil {
		return nil, err
	}
	return &ASGHook{Client: autoscaling.NewFromConfig(p.Backend.AWS), GroupName: p.Settings.GroupName,
		HookName: p.Settings.HookName, InstanceID: strings.TrimSpace(string(b))}, nil
}

// watchTermination polls the instance's target lifecycle state (IMDS) and
// starts the drain when the group moves it towards termination.
func watchTermination(ctx context.Context, md *imds.Client, drain func(), log *slog.Logger) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		out, err := md.GetMetadata(ctx, &imds.GetMetadataInput{Path: "autoscaling/target-lifecycle-state"})
		if err != nil {
			continue
		}
		b, _ := io.ReadAll(out.Content)
		out.Content.Close()
		if state := strings.TrimSpace(string(b)); state == "Terminated" {
			log.Info("instance marked for termination: draining")
			drain()
			return
		}
	}
}
