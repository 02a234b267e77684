package store_test

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/store"
)

// A claim's script returns its started jobs' DUMPs (read by HashFromDump) instead of
// their HGETALLs (up to 8 jobs; a larger claim's are read after it, a DUMP each): each job as LoadJob reads it, whether its hash is a listpack or a
// hash table (a value over 64 bytes, and one that the dump compresses), with no read
// after the script. A dump the reader does not know is read with HGETALL instead, and
// gives the same jobs.
func TestClaimStartsReadsStartedJobsFromTheirDumps(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 30)
	q := keys.Queue("sh")
	wakeRunner1(t, 30, q)
	_, jobs := flowWith(t, s, db, 56)
	rc := srv.Client(t, 30)
	long := map[uint32]string{
		jobs[1].ID: strings.Repeat("echo compressed; ", 40),                                      // LZF makes it shorter
		jobs[2].ID: "printf '%s' 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", // over 64 bytes
		jobs[9].ID: strings.Repeat("x", 5000),
	}
	for id, script := range long {
		if err := rc.HSet(ctx, keys.Job(1, id), "script", script).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for _, j := range []uint32{jobs[1].ID, jobs[9].ID} {
		if enc := rc.ObjectEncoding(ctx, keys.Job(1, j)).Val(); enc != "hashtable" {
			t.Fatalf("job %d's hash is a %q, want a hashtable for this test", j, enc)
		}
	}
	enqueueJobs(t, db, q, jobs)
	dumps, hgetalls := monitorReads(t, 30, "dump"), monitorReads(t, 30, "hgetall")
	check := func(got []store.Started, err error, n int, wantDumps, wantHgetalls int) {
		t.Helper()
		if err != nil || len(got) != n {
			t.Fatalf("claim %d: %d %v", n, len(got), err)
		}
		if d, h := dumps(), hgetalls(); d != wantDumps || h != wantHgetalls {
			t.Fatalf("a claim of %d jobs read them with %d DUMPs and %d HGETALLs, want %d and %d", n, d, h, wantDumps, wantHgetalls)
		}
		for _, st := range got {
			if st.Err != nil || st.Outcome != store.StartRun || st.Job == nil {
				t.Fatalf("started %+v", st)
			}
			if want, ok := long[st.Job.ID]; ok && st.Job.Script != want {
				t.Fatalf("job %d's script read as %q, want %q", st.Job.ID, st.Job.Script, want)
			}
			stored, err := db.LoadJob(ctx, 1, st.Job.ID)
			if err != nil || !reflect.DeepEqual(stored, st.Job) {
				t.Fatalf("job %d as claimed:\n%+v\nas stored:\n%+v (%v)", st.Job.ID, st.Job, stored, err)
			}
		}
		dumps()
		hgetalls() // the checks' own reads
	}
	got, err := db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 7), store.Wake{})
	check(got, err, 7, 0, 0)
	// A claim of up to INLINE_READS (32) jobs, as a heavy load's are (10-20), reads
	// nothing after the script either.
	got, err = db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 9), store.Wake{})
	check(got, err, 9, 0, 0)
	// A claim of more reads them after the script: a DUMP each.
	got, err = db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 33), store.Wake{})
	check(got, err, 33, 33, 0)
	restore := store.BreakStartedDumps()
	defer restore()
	got, err = db.ClaimStarts(ctx, q, "w1", time.Minute, make([]string, 7), store.Wake{})
	check(got, err, 7, 0, 7)
}
