package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
)

// A paused queue gives nothing to a claim (lua/lib_qpause.lua in claim_start), which
// drops the context's wake tokens of it; its jobs stay queued. The resume gives the
// runners their tokens back and the jobs are claimed. queue.list's view shows the
// pause and the depth.
func TestPausedQueueClaimsNothing(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 31)
	q := keys.Queue("sh")
	wakeRunner1(t, 31, q)
	_, jobs := flowWith(t, s, db, 3)
	enqueueJobs(t, db, q, jobs)
	g, rc := srv.Client(t, 0), srv.Client(t, 31)
	wake := keys.WakeRunner(1, q)
	if changed, err := db.PauseQueue(ctx, "sh", "pause", "7", "hold"); err != nil || !changed {
		t.Fatalf("pause: %v %v", changed, err)
	}
	if changed, err := db.PauseQueue(ctx, "sh", "pause", "8", "again"); err != nil || changed {
		t.Fatalf("a second pause: %v %v", changed, err)
	}
	g.LPop(ctx, wake) // the token the caller holds
	got, err := db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 4), store.Wake{Key: wake, Token: "31", Held: true})
	if err != nil || len(got) != 0 {
		t.Fatalf("claim of a paused queue: %+v %v", got, err)
	}
	if n := g.LLen(ctx, wake).Val(); n != 0 {
		t.Fatalf("%d wake tokens left after a claim of a paused queue", n)
	}
	if n := rc.LLen(ctx, q).Val(); n != 3 {
		t.Fatalf("the paused queue holds %d jobs, not 3", n)
	}
	checkPausedView(t, db, q)
	if changed, err := db.PauseQueue(ctx, "sh", "resume", "7", "go"); err != nil || !changed {
		t.Fatalf("resume: %v %v", changed, err)
	}
	if changed, _ := db.PauseQueue(ctx, "sh", "resume", "7", "go"); changed {
		t.Fatal("a second resume changed the queue")
	}
	if n := g.LLen(ctx, wake).Val(); n != 3 {
		t.Fatalf("%d wake tokens after the resume of a queue of 3 jobs", n)
	}
	got, err = db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 4), store.Wake{})
	if err != nil || len(got) != 3 {
		t.Fatalf("claim after the resume: %+v %v", got, err)
	}
	if q, err := db.Queue(ctx, "sh"); err != nil || q.Paused || q.Depth != 0 {
		t.Fatalf("the resumed queue: %+v %v", q, err)
	}
}

// checkPausedView: Queues shows queue q of db paused by 7 ("hold") with its 3 jobs.
func checkPausedView(t *testing.T, db *store.DB, q string) {
	t.Helper()
	qs, err := db.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var v model.Queue
	for _, x := range qs {
		if x.Queue == q {
			v = x
		}
	}
	if v.Queue != q || v.ScriptType != "sh" || !v.Paused || v.Depth != 3 || v.PausedBy != "7" || v.PauseNote != "hold" || v.PausedAtMs == 0 {
		t.Fatalf("the paused queue: %+v", v)
	}
}
