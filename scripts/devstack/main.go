// Command devstack is `make run`: it starts the real local stand-ins
// (DynamoDB Local, an SQS server, S3, livekit-server), creates the tables,
// queue and bucket that template.yaml declares, seeds a demo account on the
// Pro plan, serves the API on 127.0.0.1:8080 and stops everything on Ctrl-C.
// DynamoDB's items and S3's objects are kept under .local/data, so a second
// run finds the avatars, agents and links of the first.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"avatarsvc/gpu-fleet/worker"
	"avatarsvc/scripts/localstack"
	"avatarsvc/scripts/viewer"
	"avatarsvc/shared/app"
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

const (
	demoUserID   = "user_demo"
	liveKitKeyID = "devkey"
)

// config is where the stack keeps its files and listens. `make run` uses
// defaultConfig: fixed loopback ports, so URLs stay the same from one run
// to the next; tests pick free ones and a temporary directory.
type config struct {
	local       string // .local: data/, logs/, web/, dev.json
	reset       bool   // delete local/data first
	apiAddr     string
	wsAddr      string // the renderer worker's ws_uri listener
	webAddr     string // the viewer and link pages
	dynamoPort  int
	sqsPort     int
	s3Port      int
	livekitPort int
	// ready, when set, is called once everything serves.
	ready func(dev devFile)
}

func defaultConfig(root string) config {
	return config{
		local:   filepath.Join(root, ".local"),
		apiAddr: "127.0.0.1:8080", wsAddr: "127.0.0.1:8765", webAddr: "127.0.0.1:8090",
		dynamoPort: 8000, sqsPort: 9324, s3Port: 9000, livekitPort: 7880,
	}
}

// devFile is .local/dev.json: what a person or a script needs to call the stack.
type devFile struct {
	APIURL        string            `json:"api_url"`
	LiveKey       string            `json:"live_key"`
	TestKey       string            `json:"test_key"`
	UserID        string            `json:"user_id"`
	LiveKitURL    string            `json:"livekit_url"`
	LiveKitKey    string            `json:"livekit_api_key"`
	LiveKitSecret string            `json:"livekit_api_secret"`
	Env           map[string]string `json:"env"`
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("devstack", flag.ContinueOnError)
	reset := fs.Bool("reset", false, "delete the local data first")
	if err := fs.Parse(args); err != nil {
		return err
	}
	root, err := localstack.RepoRoot()
	if err != nil {
		return err
	}
	c := defaultConfig(root)
	c.reset = *reset
	return runStack(ctx, root, c, out)
}

// runStack runs the stack c describes until ctx is done.
func runStack(ctx context.Context, root string, c config, out io.Writer) error {
	say := func(format string, a ...any) { fmt.Fprintf(out, "devstack: "+format+"\n", a...) }
	apiAddr, wsAddr, webAddr := c.apiAddr, c.wsAddr, c.webAddr
	local := c.local
	dataDir := filepath.Join(local, "data")
	logDir := filepath.Join(local, "logs")
	if c.reset {
		say("removing %s (reset)", dataDir)
		if err := os.RemoveAll(dataDir); err != nil {
			return err
		}
	}
	for _, d := range []string{dataDir, logDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, a := range []string{apiAddr, wsAddr, webAddr, port(c.dynamoPort), port(c.sqsPort), port(c.s3Port), port(c.livekitPort)} {
		if l, err := net.Listen("tcp", a); err != nil {
			return fmt.Errorf("%s is busy (another `make run`?): %w", a, err)
		} else {
			l.Close()
		}
	}

	var stops []func() error
	defer func() {
		say("stopping")
		for i := len(stops) - 1; i >= 0; i-- {
			_ = stops[i]()
		}
	}()

	say("starting DynamoDB Local on 127.0.0.1:%d (data in %s)", c.dynamoPort, filepath.Join(dataDir, "dynamodb"))
	_, statErr := os.Stat(filepath.Join(dataDir, "dynamodb"))
	hadItems := statErr == nil
	db, err := localstack.StartDynamoDB(ctx, localstack.Options{Port: c.dynamoPort, LogDir: logDir, DataDir: filepath.Join(dataDir, "dynamodb")})
	if err != nil {
		return err
	}
	stops = append(stops, db.Stop)
	say("starting the SQS server on 127.0.0.1:%d", c.sqsPort)
	q, err := localstack.StartSQS(ctx, localstack.Options{Port: c.sqsPort, LogDir: logDir})
	if err != nil {
		return err
	}
	stops = append(stops, q.Stop)
	// S3's objects sit beside the DynamoDB items that point to them: an
	// avatar item whose image is gone ends every session as
	// avatar_unavailable.
	s3Dir := filepath.Join(dataDir, "s3")
	_, statErr = os.Stat(s3Dir)
	hadObjects := statErr == nil
	say("starting S3 on 127.0.0.1:%d (data in %s)", c.s3Port, s3Dir)
	s3, err := localstack.StartS3With(ctx, localstack.Options{Port: c.s3Port, DataDir: s3Dir})
	if err != nil {
		return err
	}
	stops = append(stops, s3.Stop)
	if hadItems && !hadObjects {
		say("warning: %s holds items from a run that kept S3 in memory: their uploaded images are gone; `make run RESET=1` starts clean", dataDir)
	}
	secret, err := liveKitSecret(filepath.Join(dataDir, "livekit-secret"))
	if err != nil {
		return err
	}
	say("starting livekit-server %s on 127.0.0.1:%d", localstack.LiveKitVersion, c.livekitPort)
	lk, err := localstack.StartLiveKit(ctx, localstack.Options{Port: c.livekitPort, LogDir: logDir, APIKey: liveKitKeyID, APISecret: secret,
		WebhookURLs: []string{"http://" + apiAddr + "/v1/livekit/webhook"}})
	if err != nil {
		return err
	}
	stops = append(stops, lk.Stop)

	say("creating the tables, queue and bucket from template.yaml")
	env, err := localstack.CreateStack(ctx, filepath.Join(root, "template.yaml"), localstack.Endpoints{
		DynamoDB: db.Endpoint, SQS: q.Endpoint, S3: s3.Endpoint,
	}, "local", localstack.LocalEnv(s3.Endpoint, "http://"+webAddr+"/link/", lk))
	if err != nil {
		return err
	}
	env["MEDIA_BASE_URL"] = s3.Endpoint + "/" + env["MEDIA_BUCKET"]
	cfg, err := app.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		return err
	}
	cfg.NewModerator = func(ffmpeg string) avatars.Moderator { return avatarimage.Moderation{FFmpeg: ffmpeg} }
	logFile, err := os.OpenFile(filepath.Join(logDir, "api.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	a, err := app.New(ctx, cfg, time.Now, slog.New(slog.NewJSONHandler(logFile, nil)))
	if err != nil {
		return err
	}

	catalog, err := a.Avatars.SeedCatalog(ctx, filepath.Join(root, "infra", "catalog"))
	if err != nil {
		return err
	}
	say("avatar catalog: %d avatar(s) from infra/catalog (e.g. %s)", len(catalog), catalog[0].ID)

	devPath := filepath.Join(local, "dev.json")
	dev, err := seed(ctx, a, devPath, say)
	if err != nil {
		return err
	}
	dev.APIURL = "http://" + apiAddr
	dev.LiveKitURL, dev.LiveKitKey, dev.LiveKitSecret = lk.URL, lk.APIKey, lk.APISecret
	dev.Env = env
	b, _ := json.MarshalIndent(dev, "", "  ")
	if err := os.WriteFile(devPath, append(b, '\n'), 0o600); err != nil {
		return err
	}

	srv := &http.Server{Addr: apiAddr, Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.ListenAndServe() }()

	// One renderer worker beside the API, as on a GPU host: it polls the
	// session-start queue, joins rooms on this livekit-server and serves
	// ws_uri on wsAddr. Room and avatar addresses on loopback are refused
	// in production; here the local livekit-server is opted in explicitly.
	say("starting a renderer worker (ws_uri on %s; log %s)", wsAddr, filepath.Join(logDir, "worker.log"))
	workerLog, err := os.OpenFile(filepath.Join(logDir, "worker.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer workerLog.Close()
	wenv := map[string]string{"WS_LISTEN": wsAddr, "ROOM_ALLOW_PREFIXES": "127.0.0.1/32", "WORKER_ID": "local-worker", "QUEUE_WAIT": "20s", "DRAIN_TIMEOUT": "5s"}
	for k, v := range env {
		wenv[k] = v
	}
	ws, err := worker.SettingsFromEnv(func(k string) string { return wenv[k] })
	if err != nil {
		return err
	}
	wp, err := worker.Start(ctx, ws, slog.New(slog.NewJSONHandler(workerLog, nil)), workerLog)
	if err != nil {
		return err
	}
	workerCtx, stopWorker := context.WithCancel(context.Background())
	defer stopWorker()
	workerDone := make(chan error, 1)
	go func() { workerDone <- wp.Run(workerCtx) }()
	// The reaper, every 10 s here (a one-minute EventBridge schedule in AWS).
	go a.Reaper.Loop(ctx, 10*time.Second)
	// Webhook deliveries (the webhook-deliver function's SQS trigger in AWS).
	go a.Deliverer.Run(ctx, jobs.NewConsumer(a.SQS, a.Config.WebhookQueueURL, 20*time.Second))

	// The viewer and link pages, bundled from infra/web.
	webDir := filepath.Join(local, "web")
	say("building the viewer and link pages into %s", webDir)
	if err := viewer.Build(ctx, root, webDir, "http://"+apiAddr); err != nil {
		return err
	}
	web := &http.Server{Addr: webAddr, Handler: viewer.Handler(webDir), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := web.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			say("viewer page server: %v", err)
		}
	}()
	defer web.Close()

	printUsage(out, dev, logDir, wsAddr, webAddr)
	if c.ready != nil {
		c.ready(dev)
	}

	select {
	case <-ctx.Done():
	case err := <-served:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("API server: %w", err)
		}
	}
	say("draining the renderer worker")
	stopWorker()
	werr := <-workerDone
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return errors.Join(werr, srv.Shutdown(shutdownCtx))
}

// seed makes sure the demo account and its two keys exist, reusing the keys
// of an earlier run while they still work.
func seed(ctx context.Context, a *app.App, devPath string, say func(string, ...any)) (devFile, error) {
	var dev devFile
	if b, err := os.ReadFile(devPath); err == nil {
		_ = json.Unmarshal(b, &dev)
	}
	if _, err := a.Accounts.GetUser(ctx, demoUserID); domain.ErrorCode(err) == domain.NotFound {
		say("seeding the demo account %s on the Pro plan", demoUserID)
		if _, err := a.Accounts.CreateUser(ctx, demoUserID, "demo@example.com", "pro"); err != nil {
			return dev, err
		}
	} else if err != nil {
		return dev, err
	}
	dev.UserID = demoUserID
	for _, k := range []struct {
		plain *string
		mode  string
	}{{&dev.LiveKey, domain.ModeLive}, {&dev.TestKey, domain.ModeTest}} {
		if *k.plain != "" {
			if key, err := a.Accounts.Lookup(ctx, *k.plain); err == nil && key.Active && key.UserID == demoUserID {
				continue
			}
		}
		plain, _, err := a.Accounts.CreateKey(ctx, demoUserID, k.mode, "make run")
		if err != nil {
			return dev, err
		}
		*k.plain = plain
	}
	return dev, nil
}

// liveKitSecret keeps one secret across runs so minted tokens stay valid.
func liveKitSecret(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return string(b), nil
	}
	s := domain.HashSecret(fmt.Sprint(time.Now().UnixNano(), os.Getpid())) // 64 hex chars
	return s, os.WriteFile(path, []byte(s), 0o600)
}

func port(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }

func printUsage(out io.Writer, dev devFile, logDir, wsAddr, webAddr string) {
	fmt.Fprintf(out, `
The avatar service is running (Ctrl-C drains the worker and stops everything).

  API          %[1]s   (also under /api/v1)
  live key     %[2]s
  test key     %[3]s
  LiveKit      %[4]s   key %[5]s / secret in .local/dev.json
  worker       ws_uri on ws://%[7]s, reaper every 10 s, webhook deliveries from the queue
  viewer page  http://%[8]s/viewer/       link page  http://%[8]s/link/
  settings     .local/dev.json     logs: %[6]s

A link anyone can open to talk to an avatar (in another terminal). The avatar greets you in
its voice, captions what you say and answers it (the offline demo voice agent, provider local):
  export KEY=%[2]s
  AGENT=$(curl -s -X POST %[1]s/v1/agents -H "x-api-key: $KEY" -H 'Content-Type: application/json' \
    -d '{"name":"Greeter","avatar_id":"catalog/nasa/eileen-collins","custom_greeting":"Hello! Say something."}' \
    | jq -r .agent.agent_id)
  curl -s -X POST %[1]s/v1/links -H "x-api-key: $KEY" -H 'Content-Type: application/json' \
    -d "{\"agent_id\":\"$AGENT\",\"name\":\"Demo\"}" | jq -r .link.url     # open it in a browser
  curl -s %[1]s/v1/voices -H "x-api-key: $KEY" | jq -r '.voices[].voice_id'     # voices for voice_id

From zero to a talking avatar (in another terminal):
  export KEY=%[2]s
  RENDERER=$(go run ./scripts/admin -local room-token -room demo -identity avatar-renderer -quiet)
  go run ./scripts/admin -local room-token -room demo      # open the viewer URL it prints
  printf '{"avatar":"data:image/png;base64,%%s","room":{"platform":"livekit","url":"%[4]s","token":"%%s"}}' \
    "$(base64 -w0 gpu-fleet/testfiles/images/face-astronaut.png)" "$RENDERER" > /tmp/session.json
  curl -s -X POST %[1]s/v1/sessions -H "x-api-key: $KEY" -H 'Content-Type: application/json' -d @/tmp/session.json
  curl -s -X PUT  "%[1]s/v1/sessions/<session_id>/start?wait=20" -H "x-api-key: $KEY"   # -> ws_uri (waits for it)
  go run ./scripts/speak -ws <ws_uri> -session-id <session_id> -session-token <session_token> \
    -wav gpu-fleet/testfiles/audio/speech-16k.wav
  curl -s -X POST %[1]s/v1/sessions/<session_id>/end -H "x-api-key: $KEY"
  curl -s         %[1]s/v1/usage -H "x-api-key: $KEY"

Accounts and keys:  go run ./scripts/admin -local user-list   (see -h for more)

`, dev.APIURL, dev.LiveKey, dev.TestKey, dev.LiveKitURL, dev.LiveKitKey, logDir, wsAddr, webAddr)
}
