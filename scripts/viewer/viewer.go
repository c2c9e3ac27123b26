// Package viewer builds and serves the project's web pages (infra/web):
// the viewer page, which joins a room and shows the avatar, and the link
// page, which a link's url opens to start a session and talk to the avatar.
// esbuild bundles livekit-client from scripts/node_modules; `make run`
// serves the result on 127.0.0.1:8090/viewer/ and /link/, and in AWS the
// pages are a static site behind CloudFront (template.yaml's WebBucket).
package viewer

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
)

// page is one of infra/web's pages: its entry script and static files.
type page struct {
	name   string
	script string
	files  []string
}

var pages = []page{
	{"viewer", "viewer.js", []string{"index.html", "viewer.css"}},
	{"link", "link.js", []string{"index.html", "link.css"}},
}

// Build bundles every page into outDir/<page>/. apiBase is the API's base
// address the link page calls (its %API_BASE% placeholder).
func Build(ctx context.Context, repoRoot, outDir, apiBase string) error {
	esbuild := filepath.Join(repoRoot, "scripts", "node_modules", ".bin", "esbuild")
	if _, err := os.Stat(esbuild); err != nil {
		return fmt.Errorf("esbuild is not installed; run `bash scripts/setup.sh`: %w", err)
	}
	for _, p := range pages {
		src, dst := filepath.Join(repoRoot, "infra", "web", p.name), filepath.Join(outDir, p.name)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, esbuild, filepath.Join(src, p.script),
			"--bundle", "--format=iife", "--target=es2020", "--minify", "--log-level=warning",
			"--outfile="+filepath.Join(dst, p.script))
		// Resolve livekit-client from scripts/node_modules.
		cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(repoRoot, "scripts", "node_modules"))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("esbuild %s: %v: %s", p.name, err, out)
		}
		for _, f := range p.files {
			b, err := os.ReadFile(filepath.Join(src, f))
			if err != nil {
				return err
			}
			b = bytes.ReplaceAll(b, []byte("%API_BASE%"), []byte(apiBase))
			if err := os.WriteFile(filepath.Join(dst, f), b, 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// Handler serves the built pages under /viewer/ and /link/.
func Handler(dir string) http.Handler {
	mux := http.NewServeMux()
	for _, p := range pages {
		prefix := "/" + p.name + "/"
		mux.Handle(prefix, http.StripPrefix(prefix, http.FileServer(http.Dir(filepath.Join(dir, p.name)))))
	}
	mux.Handle("/", http.RedirectHandler("/viewer/", http.StatusFound))
	return mux
}
