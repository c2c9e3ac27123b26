package localstack

import (
	"context"
	"errors"
	"testing"
)

// The *T helpers start a stand-in for one test (or benchmark), stop it in
// t.Cleanup, and fail the test when it cannot start. A missing install fails
// rather than skips: a green run must mean the integration really ran.
// Logs go to t.TempDir(); a failing test gets the log tail in its output.

// SkipShort skips t under -short (`make test-fast`): it needs processes
// this package starts.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the local stand-ins (DynamoDB Local, SQS, S3, livekit-server); skipped under -short")
	}
}

// LiveKitT starts livekit-server for t.
func LiveKitT(t testing.TB) *LiveKit {
	t.Helper()
	SkipShort(t)
	lk, err := StartLiveKit(context.Background(), Options{LogDir: t.TempDir()})
	if err != nil {
		fatalStart(t, "livekit-server", err)
	}
	t.Cleanup(func() {
		dumpOnFailure(t, "livekit-server", lk.proc)
		lk.Stop()
	})
	return lk
}

// DynamoDBT starts an in-memory DynamoDB Local for t.
func DynamoDBT(t testing.TB) *DynamoDB {
	t.Helper()
	SkipShort(t)
	db, err := StartDynamoDB(context.Background(), Options{LogDir: t.TempDir()})
	if err != nil {
		fatalStart(t, "DynamoDB Local", err)
	}
	t.Cleanup(func() {
		dumpOnFailure(t, "DynamoDB Local", db.proc)
		db.Stop()
	})
	return db
}

// SQST starts an SQS server for t.
func SQST(t testing.TB) *SQS {
	t.Helper()
	SkipShort(t)
	q, err := StartSQS(context.Background(), Options{LogDir: t.TempDir()})
	if err != nil {
		fatalStart(t, "SQS server", err)
	}
	t.Cleanup(func() {
		dumpOnFailure(t, "SQS server", q.proc)
		q.Stop()
	})
	return q
}

// S3T starts an in-process S3 for t.
func S3T(t testing.TB) *S3 {
	t.Helper()
	s, err := StartS3(context.Background())
	if err != nil {
		t.Fatalf("start S3: %v", err)
	}
	t.Cleanup(func() { s.Stop() })
	return s
}

func fatalStart(t testing.TB, what string, err error) {
	t.Helper()
	if errors.Is(err, ErrNotInstalled) {
		t.Fatalf("%s is not installed; run `bash scripts/setup.sh` first: %v", what, err)
	}
	t.Fatalf("start %s: %v", what, err)
}

func dumpOnFailure(t testing.TB, what string, p *Process) {
	if t.Failed() {
		t.Logf("%s log tail (%s):\n%s", what, p.LogPath(), p.LogTail(40))
	}
}
