// Command renderer-worker is the renderer fleet's long-running process: it
// takes session-start jobs from SQS and runs avatar sessions until SIGTERM,
// then drains (gpu-fleet/worker). Configuration comes from the environment;
// see worker.SettingsFromEnv and the README.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"avatarsvc/gpu-fleet/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "renderer-worker:", err)
		os.Exit(1)
	}
}

// run wires and runs one worker. Logs are JSON on stderr; EMF metric lines
// go to stdout, where the CloudWatch agent picks them up.
func run(ctx context.Context, getenv func(string) string, stdout, stderr io.Writer) error {
	s, err := worker.SettingsFromEnv(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, nil))
	p, err := worker.Start(ctx, s, log, stdout)
	if err != nil {
		return err
	}
	log.Info("ws_uri listener ready", "addr", p.Addr(), "advertise_url", p.Settings.Worker.AdvertiseURL)
	return p.Run(ctx)
}
