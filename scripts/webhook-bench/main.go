// Command webhook-bench measures lifecycle webhook delivery locally: for n
// sessions it ends each through the API and times from the end (the
// ended_at the end transaction writes) to the session.ended event's arrival
// at a receiver on 127.0.0.1, through the SQS delivery queue, DynamoDB's
// delivery log and a signed POST. It prints p50/p99 (part of make bench).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"text/tabwriter"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"avatarsvc/scripts/benchtable"
	"avatarsvc/scripts/stacktest"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/sessions"
	"avatarsvc/shared/webhooks"
)

func main() {
	n := flag.Int("n", 50, "sessions to end (at most 59: the ends go through the API, 60 writes a minute)")
	flag.Parse()
	if err := run(context.Background(), *n, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "webhook-bench:", err)
		os.Exit(1)
	}
}

type arrival struct {
	latency time.Duration
	err     error
}

func run(ctx context.Context, n int, out io.Writer) error {
	st, err := stacktest.StartRealTime(ctx)
	if err != nil {
		return err
	}
	defer st.Stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a := st.App
	d := webhooks.NewDeliverer(a.Store, a.WebhookQueue, time.Now, slog.New(slog.NewJSONHandler(io.Discard, nil)),
		webhooks.DelivererOptions{Policy: a.Config.WebhookPolicy})
	go d.Run(ctx, jobs.NewConsumer(a.SQS, a.Config.WebhookQueueURL, 20*time.Second))

	acct, err := st.NewAccount(ctx, "enterprise")
	if err != nil {
		return err
	}
	arrivals := make(chan arrival, n)
	var verifier *standardwebhooks.Webhook
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var ev struct {
			Data struct {
				EndedAt time.Time `json:"ended_at"`
			} `json:"data"`
		}
		err := verifier.Verify(body, r.Header)
		if err == nil {
			err = json.Unmarshal(body, &ev)
		}
		arrivals <- arrival{latency: at.Sub(ev.Data.EndedAt), err: err}
	}))
	defer recv.Close()
	var reg struct {
		Webhook struct {
			Secret string `json:"secret"`
		} `json:"webhook"`
	}
	if err := st.Call("POST", "/v1/webhooks", acct.LiveKey, map[string]any{"url": recv.URL + "/hooks", "events": []string{"session.ended"}}, &reg); err != nil {
		return err
	}
	if verifier, err = standardwebhooks.NewWebhook(reg.Webhook.Secret); err != nil {
		return err
	}

	in := sessions.CreateInput{Avatar: "https://images.example.com/a.png", AspectRatio: "1:1",
		Room: &domain.Room{Platform: "livekit", URL: "wss://rooms.example.com", Token: "t"}}
	var latencies []time.Duration
	for i := 0; i < n; i++ {
		// Created and started through the service (the API's write quota,
		// 60 a minute, is kept for the ends being measured).
		c, err := a.Sessions.Create(ctx, acct.User.ID, domain.ModeLive, in)
		if err != nil {
			return err
		}
		id := c.Session.ID
		if _, err := a.Sessions.Start(ctx, acct.User.ID, id, domain.EventStart); err != nil {
			return err
		}
		if err := st.Serve(ctx, id); err != nil {
			return err
		}
		if err := st.Call("POST", "/v1/sessions/"+id+"/end", acct.LiveKey, nil, nil); err != nil {
			return err
		}
		select {
		case got := <-arrivals:
			if got.err != nil {
				return fmt.Errorf("session %d: %w", i, got.err)
			}
			latencies = append(latencies, got.latency)
		case <-time.After(30 * time.Second):
			return fmt.Errorf("session %d: session.ended did not arrive in 30 s", i)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "webhook delivery (end transaction -> receiver)\tn\tp50 ms\tp99 ms\tload avg\t\n")
	fmt.Fprintf(tw, "session.ended, signed, via SQS + DynamoDB Local\t%d\t%s\t%s\t%s\t\n", len(latencies),
		benchtable.Percentile(latencies, 50), benchtable.Percentile(latencies, 99), benchtable.LoadAvg())
	return tw.Flush()
}
