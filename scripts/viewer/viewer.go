// Package viewer builds and serves the viewer page (infra/web/viewer): a
// small livekit-client page that joins a room and shows the avatar's video
// with its audio. esbuild bundles livekit-client from scripts/node_modules;
// `make run` serves the result on 127.0.0.1:8090/viewer/, and in AWS it is a
// static site behind CloudFront.
package viewer

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
)

// Build bundles the page into outDir.
func Build(ctx context.Context, repoRoot, outDir string) error {
	src := filepath.Join(repoRoot, "infra", "web", "viewer")
	esbuild := filepath.Join(repoRoot, "scripts", "node_modules", ".bin", "esbuild")
	if _, err := os.Stat(esbuild); err != nil {
		return fmt.Errorf("esbuild is not installed; run `bash scripts/setup.sh`: %w", err)
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, esbuild, filepath.Join(src, "viewer.js"),
		"--bundle", "--format=iife", "--target=es2020", "--minify", "--log-level=warning",
		"--outfile="+filepath.Join(outDir, "viewer.js"))
	// Resolve livekit-client from scripts/node_modules.
	cmd.Env = append(os.Environ(), "NODE_PATH="+filepath.Join(repoRoot, "scripts", "node_modules"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("esbuild: %v: %s", err, out)
	}
	for _, f := range []string{"index.html", "viewer.css"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(outDir, f), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Handler serves the built page under /viewer/.
func Handler(dir string) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/viewer/", http.StripPrefix("/viewer/", http.FileServer(http.Dir(dir))))
	mux.Handle("/", http.RedirectHandler("/viewer/", http.StatusFound))
	return mux
}
