package layout_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"avatarsvc/scripts/localstack"
)

// scriptsImports reads `go list -f '{{.ImportPath}} {{join .Deps " "}}'`
// output and returns "pkg -> dep" for every dependency under scripts/.
func scriptsImports(listing string) []string {
	var bad []string
	sc := bufio.NewScanner(strings.NewReader(listing))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		for _, dep := range fields[1:] {
			if dep == "avatarsvc/scripts" || strings.HasPrefix(dep, "avatarsvc/scripts/") {
				bad = append(bad, fields[0]+" -> "+dep)
			}
		}
	}
	return bad
}

func TestScriptsImports(t *testing.T) {
	for _, tc := range []struct {
		name, listing string
		want          []string
	}{
		{"clean", "avatarsvc/gpu-fleet/worker fmt avatarsvc/gpu-fleet/room\n", nil},
		{"direct", "avatarsvc/gpu-fleet/cmd/x fmt avatarsvc/scripts/localstack\n",
			[]string{"avatarsvc/gpu-fleet/cmd/x -> avatarsvc/scripts/localstack"}},
		{"prefix only", "avatarsvc/gpu-fleet/a avatarsvc/scriptsx/y\n", nil},
		{"no deps", "avatarsvc/gpu-fleet/a\n\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := scriptsImports(tc.listing); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFleetDoesNotImportScripts: nothing the fleet builds (tests aside,
// which may start the local stack) depends on scripts/.
func TestFleetDoesNotImportScripts(t *testing.T) {
	if bad := scriptsImports(depsOf(t, "./gpu-fleet/...")); len(bad) > 0 {
		t.Errorf("got gpu-fleet packages depending on scripts/:\n  %s\nwant none",
			strings.Join(bad, "\n  "))
	}
}

// TestFleetCmdHoldsOnlyTheProduct: benches and dev tools live in scripts/.
func TestFleetCmdHoldsOnlyTheProduct(t *testing.T) {
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(root, "gpu-fleet", "cmd"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if want := []string{"renderer-worker"}; !slices.Equal(got, want) {
		t.Errorf("gpu-fleet/cmd: got %q, want %q", got, want)
	}
}

// forbiddenDeps reads the same listing as scriptsImports and returns
// "pkg -> dep" for every dependency that is one of the forbidden packages
// or inside one of them (github.com/guregu/dynamo covers .../dynamo/v2).
func forbiddenDeps(listing string, forbidden ...string) []string {
	var bad []string
	sc := bufio.NewScanner(strings.NewReader(listing))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for _, dep := range fields[min(1, len(fields)):] {
			for _, f := range forbidden {
				if dep == f || strings.HasPrefix(dep, f+"/") {
					bad = append(bad, fields[0]+" -> "+dep)
				}
			}
		}
	}
	return bad
}

// dynamoDB is the code that talks to the database.
var dynamoDB = []string{"avatarsvc/shared/store", "github.com/guregu/dynamo", "github.com/aws/aws-sdk-go-v2/service/dynamodb"}

func TestForbiddenDeps(t *testing.T) {
	for _, tc := range []struct {
		name, listing string
		want          []string
	}{
		{"clean", "avatarsvc/gpu-fleet/render fmt avatarsvc/shared/avatarimage\n", nil},
		{"store", "avatarsvc/gpu-fleet/render fmt avatarsvc/shared/store github.com/guregu/dynamo/v2\n",
			[]string{"avatarsvc/gpu-fleet/render -> avatarsvc/shared/store", "avatarsvc/gpu-fleet/render -> github.com/guregu/dynamo/v2"}},
		{"prefix only", "avatarsvc/gpu-fleet/render avatarsvc/shared/storex github.com/guregu/dynamox\n", nil},
		{"no deps", "avatarsvc/gpu-fleet/render\n\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := forbiddenDeps(tc.listing, dynamoDB...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRenderingDoesNotLinkDynamoDB: the renderer's packages share the
// avatar image code with the API (shared/avatarimage), not the API's
// services, so drawing a frame never links the database.
func TestRenderingDoesNotLinkDynamoDB(t *testing.T) {
	out := depsOf(t, "./gpu-fleet/render", "./gpu-fleet/rendersession", "./gpu-fleet/avatarsource")
	if n := len(strings.Split(strings.TrimSpace(out), "\n")); n != 3 {
		t.Fatalf("go list: got %d packages, want 3", n)
	}
	if bad := forbiddenDeps(out, dynamoDB...); len(bad) > 0 {
		t.Errorf("got rendering packages linking DynamoDB:\n  %s\nwant none", strings.Join(bad, "\n  "))
	}
}

// apiPackages are the HTTP API's: the renderer worker runs sessions and
// needs none of them (shared/backend is its wiring, shared/app the API's).
var apiPackages = []string{
	"avatarsvc/shared/app", "avatarsvc/shared/httpapi", "avatarsvc/shared/links", "avatarsvc/shared/roomhost",
	"avatarsvc/shared/ratelimit", "avatarsvc/shared/auth", "avatarsvc/shared/accounts", "avatarsvc/shared/reaper",
}

func TestWorkerDoesNotLinkTheAPI(t *testing.T) {
	if bad := forbiddenDeps(depsOf(t, "./gpu-fleet/cmd/renderer-worker"), apiPackages...); len(bad) > 0 {
		t.Errorf("got the renderer worker linking API packages:\n  %s\nwant none", strings.Join(bad, "\n  "))
	}
}

// depsOf lists each package in pkgs with its non-test dependencies, one
// line a package: "import/path dep dep ...".
func depsOf(t *testing.T, pkgs ...string) string {
	t.Helper()
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", append([]string{"list", "-test=false", "-f", `{{.ImportPath}} {{join .Deps " "}}`}, pkgs...)...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", pkgs, err)
	}
	if len(strings.TrimSpace(string(out))) == 0 {
		t.Fatalf("go list %v listed no packages", pkgs)
	}
	return string(out)
}

// TestConversationDoesNotLinkAProvider: the session's conversation hears
// remote voice agents through gpu-fleet/remoteagent's events, so a second
// provider is a new client package, not a change to the conversation.
func TestConversationDoesNotLinkAProvider(t *testing.T) {
	out := depsOf(t, "./gpu-fleet/conversation")
	if bad := forbiddenDeps(out, "avatarsvc/gpu-fleet/elevenlabs"); len(bad) > 0 {
		t.Errorf("got the conversation linking a provider's client:\n  %s\nwant none", strings.Join(bad, "\n  "))
	}
}

// TestNothingPointsOutsideTheClone: the specification and test inputs
// beside the development checkout are not there for someone who clones
// the project, so no tracked file (README, Makefile, scripts, tests, pages)
// may name them.
func TestNothingPointsOutsideTheClone(t *testing.T) {
	root, err := localstack.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "ls-files", "-z")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	// One level up from the root, not ../../shared/ from a subfolder
	// (which is this repository's own shared/).
	outside := regexp.MustCompile(`(?:^|[^./])\.\./(?:shared/|\.library)`)
	var bad []string
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		data, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || len(data) > 4<<20 || slices.Contains(data, 0) {
			continue // deleted in the work tree, large data, or binary
		}
		if m := outside.Find(data); m != nil {
			bad = append(bad, name+" names "+strings.TrimLeft(string(m), " \t\n\"'`("))
		}
	}
	if len(bad) > 0 {
		t.Errorf("got files pointing outside the clone:\n  %s\nwant none", strings.Join(bad, "\n  "))
	}
}
