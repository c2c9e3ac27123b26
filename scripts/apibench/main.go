// Command apibench measures each endpoint through the full HTTP stack
// (routing, auth, rate limit, handler, JSON) against DynamoDB Local, and, in
// the same run, the raw store calls that endpoint makes, then prints p50/p99
// and the overhead ratio (target <= 1.3x, README's figures).
package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"avatarsvc/scripts/stacktest"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
	"avatarsvc/shared/ratelimit"
	"avatarsvc/shared/sessions"
	"avatarsvc/shared/store"
)

const iterations = 300

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "apibench:", err)
		os.Exit(1)
	}
}

type bench struct {
	name string
	http func() error
	raw  func() error
}

func run(ctx context.Context, out io.Writer) error {
	st, err := stacktest.Start(ctx)
	if err != nil {
		return err
	}
	defer st.Stop()
	acct, err := st.NewAccount(ctx, "enterprise")
	if err != nil {
		return err
	}
	store, svc := st.App.Store, st.App.Sessions
	keyHash := domain.HashSecret(acct.LiveKey)
	uid := acct.User.ID
	in := sessions.CreateInput{Avatar: "https://images.example.com/a.png", AspectRatio: "1:1",
		Room: &domain.Room{Platform: "livekit", URL: "wss://rooms.example.com", Token: "t"}}
	// A few sessions so list and usage read something.
	var ids []string
	for i := 0; i < 5; i++ {
		c, err := svc.Create(ctx, uid, domain.ModeLive, in)
		if err != nil {
			return err
		}
		ids = append(ids, c.Session.ID)
	}
	if _, err := svc.Start(ctx, uid, ids[0], domain.EventStart); err != nil {
		return err
	}
	client := &http.Client{}
	do := func(method, path, body string) error {
		req, _ := http.NewRequest(method, st.Server.URL+path, strings.NewReader(body))
		req.Header.Set("x-api-key", acct.LiveKey)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode >= 300 {
			return fmt.Errorf("%s %s: status %d", method, path, res.StatusCode)
		}
		return nil
	}
	// auth and rate limit: the two store calls every authenticated request makes.
	authRate := func(class ratelimit.Class) error {
		if _, err := store.KeyByHash(ctx, keyHash); err != nil {
			return err
		}
		_, err := store.Increment(ctx, fmt.Sprintf("key:%s#%s#%d", keyHash, class, st.Clock.Now().Unix()), st.Clock.Now().Add(time.Hour))
		return err
	}
	createBody := `{"avatar":"https://images.example.com/a.png","aspect_ratio":"1:1","room":{"platform":"livekit","url":"wss://rooms.example.com","token":"t"}}`
	// start and end each need a fresh created/started session per iteration.
	newCreated := func() string {
		c, err := svc.Create(ctx, uid, domain.ModeLive, in)
		if err != nil {
			panic(err)
		}
		return c.Session.ID
	}
	queue := st.App.Queue
	benches := []bench{
		{"GET /v1/sessions/{id}", func() error { return do("GET", "/v1/sessions/"+ids[1], "") }, func() error {
			if err := authRate(ratelimit.Read); err != nil {
				return err
			}
			_, err := store.GetSession(ctx, uid, ids[1])
			return err
		}},
		{"GET /v1/sessions", func() error { return do("GET", "/v1/sessions", "") }, func() error {
			if err := authRate(ratelimit.Read); err != nil {
				return err
			}
			_, _, err := store.ListSessions(ctx, uid, "", domain.Page{Limit: domain.DefaultPageLimit})
			return err
		}},
		{"POST /v1/sessions", func() error { return do("POST", "/v1/sessions", createBody) }, func() error {
			if err := authRate(ratelimit.Write); err != nil {
				return err
			}
			return store.CreateSession(ctx, domain.Session{ID: domain.NewSessionID(), UserID: uid, Status: domain.StatusCreated,
				AspectRatio: "1:1", CreatedAt: time.Now(), Room: *in.Room, Avatar: domain.AvatarSource{URL: in.Avatar}})
		}},
		{"GET /v1/usage", func() error { return do("GET", "/v1/usage", "") }, func() error {
			if err := authRate(ratelimit.Read); err != nil {
				return err
			}
			if _, err := store.GetUser(ctx, uid); err != nil {
				return err
			}
			_, err := store.RunningSessionsOf(ctx, uid)
			return err
		}},
	}
	// PUT start then POST end on fresh sessions: measured as a pair of
	// endpoints, raw as the same reads, transactions and queue send.
	var startIDs, rawStartIDs []string
	for i := 0; i < iterations; i++ {
		startIDs = append(startIDs, newCreated())
		rawStartIDs = append(rawStartIDs, newCreated())
	}
	si, ri := 0, 0
	benches = append(benches, bench{"PUT start + POST end", func() error {
		id := startIDs[si]
		si++
		if err := do("PUT", "/v1/sessions/"+id+"/start", ""); err != nil {
			return err
		}
		return do("POST", "/v1/sessions/"+id+"/end", "")
	}, func() error {
		id := rawStartIDs[ri]
		ri++
		if err := authRate(ratelimit.SessionStart); err != nil {
			return err
		}
		s, err := store.GetSession(ctx, uid, id)
		if err != nil {
			return err
		}
		u, err := store.GetUser(ctx, uid)
		if err != nil {
			return err
		}
		now := time.Now()
		p := u.EffectivePlan(now)
		if err := store.StartSession(ctx, startParams(id, uid, now, p, u)); err != nil {
			return err
		}
		if err := queue.Enqueue(ctx, jobs.NewStartJob(s.ID, s.UserID, now.Add(jobs.ClaimWindow), now)); err != nil {
			return err
		}
		if err := store.MarkJobEnqueued(ctx, id, now); err != nil {
			return err
		}
		if err := authRate(ratelimit.Write); err != nil {
			return err
		}
		if _, err := store.GetSession(ctx, uid, id); err != nil {
			return err
		}
		u, err = store.GetUser(ctx, uid)
		if err != nil {
			return err
		}
		return store.EndSession(ctx, endParams(id, uid, now, u))
	}})

	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(out, "API latency on DynamoDB Local, %d iterations each, HTTP over loopback vs the raw store calls the endpoint makes\n", iterations)
	fmt.Fprintln(tw, "endpoint\tHTTP p50\tHTTP p99\traw p50\traw p99\tratio p50\t")
	for _, b := range benches {
		// Interleave so both see the same machine load.
		var h, r []time.Duration
		for i := 0; i < iterations; i++ {
			st.Clock.Advance(time.Minute) // a fresh rate-limit window: the bench measures, it is not throttled
			t0 := time.Now()
			if err := b.http(); err != nil {
				return fmt.Errorf("%s: %w", b.name, err)
			}
			h = append(h, time.Since(t0))
			t0 = time.Now()
			if err := b.raw(); err != nil {
				return fmt.Errorf("%s raw: %w", b.name, err)
			}
			r = append(r, time.Since(t0))
		}
		hp50, hp99, rp50, rp99 := pct(h, 50), pct(h, 99), pct(r, 50), pct(r, 99)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2fx\t\n", b.name, ms(hp50), ms(hp99), ms(rp50), ms(rp99), float64(hp50)/float64(rp50))
	}
	return tw.Flush()
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func startParams(id, uid string, now time.Time, p domain.Plan, u domain.User) store.StartParams {
	return store.StartParams{SessionID: id, UserID: uid, StartedAt: now, Expiration: domain.Expiration(now, p, u.MinutesRemaining(now)),
		JobDeadline: now.Add(jobs.ClaimWindow), MaxConcurrent: p.MaxConcurrent, Period: u.CurrentPeriod(now), IncludedMinutes: p.IncludedMinutes}
}

func endParams(id, uid string, now time.Time, u domain.User) store.EndParams {
	period := u.CurrentPeriod(now)
	total, used := u.EffectivePlan(now).IncludedMinutes, u.IncludedUsedIn(period)
	inc, pur, bill := domain.Charge(1, total-used, u.PurchasedRemaining)
	return store.EndParams{SessionID: id, UserID: uid, EndedAt: now, Reason: "bench", Billing: bill, Period: period,
		FromIncluded: inc, FromPurchased: pur, SamePeriod: u.UsagePeriod == period.Key(),
		IncludedHeadroom: pur == 0 && inc <= total-used, IncludedTotal: total, IncludedUsedWas: used, PurchasedWas: u.PurchasedRemaining}
}
