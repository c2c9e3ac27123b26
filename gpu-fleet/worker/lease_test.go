package worker_test

import (
	"context"
	"testing"
	"time"

	"avatarsvc/gpu-fleet/roomtest"
	"avatarsvc/scripts/stacktest"
	"avatarsvc/shared/domain"
	"avatarsvc/shared/jobs"
)

// slowAvatar is how long the avatar server's /slow-face.png takes to answer:
// three leases (leaseTTL is 2 s here, as 15 s is against the 30 s launch
// timeout in production), within the fetch's 10 s limit.
const slowAvatar = 3 * leaseTTL

// TestLaunchKeepsItsLease: a launch that takes three leases (a slow avatar
// fetch) keeps its session through the reaper's sweeps (every 0.5 s here)
// and a redelivery of its job to a second worker: the first worker serves
// it, nobody ends it, the second never claims it.
func TestLaunchKeepsItsLease(t *testing.T) {
	stacktest.SkipShort(t)
	w1, _ := startWorker(t, map[string]string{"WORKER_ID": "launching-worker"})
	acct, _ := stack.NewAccount(context.Background(), "pro")
	s := newSession(t, acct, avatarSrv.allowedURL+"/slow-face.png", "slow-launch")
	v := roomtest.JoinViewer(t, lk.URL, viewerToken(t, s.room, "viewer"), preparedFace(t))
	defer v.Room.Disconnect()
	s.start(t)

	var claimed domain.Session
	waitFor(t, "the first worker's claim", func() bool {
		got, err := stack.App.Store.GetSession(context.Background(), s.user, s.id)
		claimed = got
		return err == nil && got.WorkerID != ""
	})
	claimedAt := time.Now()
	w2, _ := startWorker(t, map[string]string{"WORKER_ID": "second-worker"})
	time.Sleep(leaseTTL + time.Second) // past the claim's first lease: the reaper swept meanwhile
	if err := stack.App.Queue.Enqueue(context.Background(), jobs.NewStartJob(s.id, s.user, claimed.JobDeadline, time.Now())); err != nil {
		t.Fatal(err)
	}
	s.awaitWSURI(t)
	t.Logf("claim to ws_uri: %v (avatar answered after %v; lease %v)", time.Since(claimedAt), slowAvatar, leaseTTL)
	time.Sleep(2 * time.Second) // the second worker polls the redelivered job meanwhile

	got, err := stack.App.Store.GetSession(context.Background(), s.user, s.id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != domain.StatusStarted || got.WorkerID != "launching-worker" {
		t.Errorf("after a slow launch: got %s %q held by %q, want started held by launching-worker", got.Status, got.EndReason, got.WorkerID)
	}
	if n1, n2 := w1.Worker.Running(), w2.Worker.Running(); n1 != 1 || n2 != 0 {
		t.Errorf("running: first worker %d, second %d; want 1 and 0", n1, n2)
	}
	api(t, "POST", "/v1/sessions/"+s.id+"/end", s.key, nil)
}
