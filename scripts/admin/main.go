// Command admin manages accounts: users, plans, purchased minutes and API
// keys. It reads the same environment as the Lambda functions (table names,
// region, optional local endpoints), so it works against AWS and, with
// -local, against the stack that `make run` started (.local/dev.json).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"avatarsvc/gpu-fleet/room"
	"avatarsvc/shared/accounts"
	"avatarsvc/shared/app"
	"avatarsvc/shared/avatarimage"
	"avatarsvc/shared/avatars"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/livekit"
)

const usage = `usage: admin [-local] COMMAND [flags]

commands:
  user-create   -plan free|explorer|growth|pro|enterprise [-email E] [-id ID]
  user-list
  user-show     -user ID
  plan-set      -user ID -plan PLAN
  minutes-add   -user ID -minutes N
  key-create    -user ID [-mode live|test] [-name NAME]   (the key is shown once)
  key-list      -user ID
  key-deactivate -key KEY_OR_HASH
  key-activate  -key KEY_OR_HASH
  key-delete    -key KEY_OR_HASH
  voice-agent-allow  -user ID -provider livekit|elevenlabs -agent AGENT
                let the account put this voice agent behind its avatars (a LiveKit
                worker's agent_name, or an ElevenLabs agent id; local needs nothing)
  voice-agent-revoke -user ID -provider livekit|elevenlabs -agent AGENT
  seed-catalog  [-dir infra/catalog]   put the catalog's images into the media bucket and table
                (moderated like uploads; ids already there are left alone)
  room-token    -room NAME [-identity viewer] [-ttl 6h] [-quiet]
                a LiveKit join token for the local livekit-server (or LIVEKIT_URL,
                LIVEKIT_API_KEY, LIVEKIT_API_SECRET), and the viewer page URL;
                -identity avatar-renderer mints the token a session's room needs

-local reads the local stack's settings from .local/dev.json; otherwise the
environment names the tables (USERS_TABLE, API_KEYS_TABLE, ...) as in AWS.
`

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "admin:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	global := flag.NewFlagSet("admin", flag.ContinueOnError)
	local := global.Bool("local", false, "use the local stack's settings from .local/dev.json")
	global.Usage = func() { fmt.Fprint(out, usage) }
	if err := global.Parse(args); err != nil {
		return err
	}
	if global.NArg() == 0 {
		fmt.Fprint(out, usage)
		return errors.New("no command")
	}
	if global.Arg(0) == "room-token" {
		return roomToken(*local, global.Args()[1:], getenv, out)
	}
	if *local {
		env, err := localEnv()
		if err != nil {
			return err
		}
		getenv = func(k string) string {
			if v, ok := env[k]; ok {
				return v
			}
			return os.Getenv(k)
		}
	}
	cfg, err := app.ConfigFromEnv(getenv)
	if err != nil {
		return fmt.Errorf("%w (use -local for the local stack)", err)
	}
	cfg.NewModerator = func(ffmpeg string) avatars.Moderator { return avatarimage.Moderation{FFmpeg: ffmpeg} }
	a, err := app.New(ctx, cfg, time.Now, slog.New(slog.NewJSONHandler(io.Discard, nil)))
	if err != nil {
		return err
	}
	if global.Arg(0) == "seed-catalog" {
		return seedCatalog(ctx, a, global.Args()[1:], out)
	}
	return command(ctx, a.Accounts, global.Arg(0), global.Args()[1:], out)
}

// roomToken mints a LiveKit join token: for a person's browser (the viewer
// page) or, with -identity avatar-renderer, the one a session's room needs.
func roomToken(local bool, args []string, getenv func(string) string, out io.Writer) error {
	fs := flag.NewFlagSet("room-token", flag.ContinueOnError)
	roomName := fs.String("room", "", "room name (required)")
	identity := fs.String("identity", "viewer", "participant identity")
	ttl := fs.Duration("ttl", 6*time.Hour, "how long the token is valid")
	quiet := fs.Bool("quiet", false, "print the token only")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *roomName == "" {
		return errors.New("room-token: -room is required")
	}
	lkURL, key, secret := getenv("LIVEKIT_URL"), getenv("LIVEKIT_API_KEY"), getenv("LIVEKIT_API_SECRET")
	if local {
		var dev struct {
			URL    string `json:"livekit_url"`
			Key    string `json:"livekit_api_key"`
			Secret string `json:"livekit_api_secret"`
		}
		b, err := os.ReadFile(filepath.Join(".local", "dev.json"))
		if err != nil {
			return fmt.Errorf("read .local/dev.json (start the stack with `make run` first): %w", err)
		}
		if err := json.Unmarshal(b, &dev); err != nil {
			return fmt.Errorf("parse .local/dev.json: %w", err)
		}
		lkURL, key, secret = dev.URL, dev.Key, dev.Secret
	}
	if key == "" || secret == "" {
		return errors.New("room-token: no LiveKit key and secret (use -local, or set LIVEKIT_API_KEY and LIVEKIT_API_SECRET)")
	}
	tok, err := livekit.JoinToken(key, secret, *roomName, *identity, *ttl)
	if err != nil {
		return err
	}
	if *quiet {
		fmt.Fprintln(out, tok)
		return nil
	}
	fmt.Fprintf(out, "token (room %s, identity %s, valid %v):\n%s\n", *roomName, *identity, *ttl, tok)
	if *identity != room.AgentIdentity && local {
		fmt.Fprintf(out, "\nwatch in a browser:\n%s/viewer/?%s\n", viewerBase, url.Values{"url": {lkURL}, "token": {tok}}.Encode())
	}
	return nil
}

// viewerBase is where `make run` serves the viewer page.
const viewerBase = "http://127.0.0.1:8090"

// localEnv reads the environment the local stack recorded.
func localEnv() (map[string]string, error) {
	var dev struct {
		Env map[string]string `json:"env"`
	}
	b, err := os.ReadFile(filepath.Join(".local", "dev.json"))
	if err != nil {
		return nil, fmt.Errorf("read .local/dev.json (start the stack with `make run` first): %w", err)
	}
	if err := json.Unmarshal(b, &dev); err != nil {
		return nil, fmt.Errorf("parse .local/dev.json: %w", err)
	}
	return dev.Env, nil
}

func command(ctx context.Context, acc *accounts.Service, name string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	user := fs.String("user", "", "user id")
	plan := fs.String("plan", "", "plan key")
	email := fs.String("email", "", "email")
	id := fs.String("id", "", "user id to create (default: generated)")
	minutes := fs.Int("minutes", 0, "minutes to add")
	mode := fs.String("mode", domain.ModeLive, "key mode: live or test")
	keyName := fs.String("name", "", "key name")
	key := fs.String("key", "", "API key or its SHA-256")
	provider := fs.String("provider", "", "voice agent provider: livekit or elevenlabs")
	agentID := fs.String("agent", "", "voice agent: LiveKit agent_name or ElevenLabs agent id")
	if err := fs.Parse(args); err != nil {
		return err
	}
	need := func(v, flagName string) error {
		if v == "" {
			return fmt.Errorf("%s needs -%s", name, flagName)
		}
		return nil
	}
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	defer tw.Flush()
	switch name {
	case "user-create":
		if err := need(*plan, "plan"); err != nil {
			return err
		}
		u, err := acc.CreateUser(ctx, *id, *email, *plan)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "created user %s on plan %s\n", u.ID, u.PlanKey)
	case "user-list":
		users, err := acc.ListUsers(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "USER\tEMAIL\tPLAN\tACTIVE\tPURCHASED LEFT")
		for _, u := range users {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\n", u.ID, u.Email, u.PlanKey, u.ActiveSessions, u.PurchasedRemaining)
		}
	case "user-show":
		if err := need(*user, "user"); err != nil {
			return err
		}
		u, err := acc.GetUser(ctx, *user)
		if err != nil {
			return err
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(u)
	case "plan-set":
		if err := errors.Join(need(*user, "user"), need(*plan, "plan")); err != nil {
			return err
		}
		if err := acc.ChangePlan(ctx, *user, *plan); err != nil {
			return err
		}
		fmt.Fprintf(out, "user %s is now on plan %s\n", *user, *plan)
	case "minutes-add":
		if err := need(*user, "user"); err != nil {
			return err
		}
		u, err := acc.AddMinutes(ctx, *user, *minutes)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "user %s: purchased %d, remaining %d\n", u.ID, u.PurchasedTotal, u.PurchasedRemaining)
	case "key-create":
		if err := need(*user, "user"); err != nil {
			return err
		}
		plain, k, err := acc.CreateKey(ctx, *user, *mode, *keyName)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s\n(this %s key is shown once; its hash is %s)\n", plain, k.Mode, k.Hash)
	case "key-list":
		if err := need(*user, "user"); err != nil {
			return err
		}
		keys, err := acc.ListKeys(ctx, *user)
		if err != nil {
			return err
		}
		fmt.Fprintln(tw, "PREFIX\tMODE\tACTIVE\tNAME\tCREATED\tHASH")
		for _, k := range keys {
			fmt.Fprintf(tw, "%s...\t%s\t%t\t%s\t%s\t%s\n", k.Prefix, k.Mode, k.Active, k.Name, k.CreatedAt.Format(time.RFC3339), k.Hash)
		}
	case "voice-agent-allow", "voice-agent-revoke":
		if err := errors.Join(need(*user, "user"), need(*provider, "provider"), need(*agentID, "agent")); err != nil {
			return err
		}
		set := acc.AllowVoiceAgent
		if name == "voice-agent-revoke" {
			set = acc.RevokeVoiceAgent
		}
		u, err := set(ctx, *user, *provider, *agentID)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "user %s may use voice agents: %v\n", u.ID, u.VoiceAgents)
	case "key-deactivate", "key-activate", "key-delete":
		if err := need(*key, "key"); err != nil {
			return err
		}
		var err error
		switch name {
		case "key-deactivate":
			err = acc.DeactivateKey(ctx, *key)
		case "key-activate":
			err = acc.ActivateKey(ctx, *key)
		default:
			err = acc.DeleteKey(ctx, *key)
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s: done\n", name)
	default:
		fmt.Fprint(out, usage)
		return fmt.Errorf("unknown command %q", name)
	}
	return nil
}

// seedCatalog puts infra/catalog's images into the catalog.
func seedCatalog(ctx context.Context, a *app.App, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("seed-catalog", flag.ContinueOnError)
	dir := fs.String("dir", "infra/catalog", "folder of catalog images")
	if err := fs.Parse(args); err != nil {
		return err
	}
	list, err := a.Avatars.SeedCatalog(ctx, *dir)
	if err != nil {
		return err
	}
	for _, av := range list {
		fmt.Fprintf(out, "%s\t%s\n", av.ID, av.URL)
	}
	return nil
}
