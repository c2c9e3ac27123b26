package stacktest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"avatarsvc/scripts/localstack"
)

// Main runs a package's tests around the local stand-ins it needs: start
// brings them up once for the whole package, and the stop it returns runs
// after the last test. Under -short (`make test-fast`) nothing is started:
// the package's integration tests skip themselves (SkipShort) and its pure
// tests run.
func Main(m *testing.M, start func(ctx context.Context) (stop func(), err error)) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	stop, err := start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "start the local stack:", err)
		os.Exit(1)
	}
	code := m.Run()
	stop()
	os.Exit(code)
}

// SkipShort skips t under -short: it needs the local stand-ins.
func SkipShort(t testing.TB) { t.Helper(); localstack.SkipShort(t) }

// StartFor is Main's start for packages that need only the API stack.
func StartFor(s **Stack) func(ctx context.Context) (func(), error) {
	return func(ctx context.Context) (func(), error) {
		var err error
		if *s, err = Start(ctx); err != nil {
			return nil, err
		}
		return func() { (*s).Stop() }, nil
	}
}
