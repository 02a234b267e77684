package worker

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/hero-coordinator/hero/lib/dispatcher"
)

// iso8601 is what the seed's timestamps look like (RFC 3339 profile of ISO 8601).
var iso8601 = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$`)

// TestConformanceForeignClient plays a client that speaks the protocol with raw
// Redis commands exactly as the seed writes them (HSET hero:job:…, LPUSH
// hero:work_queue:…, BLPOP hero:reply:…) and checks, field by field, what our worker
// wrote.
func TestConformanceForeignClient(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	h.worker(Params{Workers: []Spec{{ID: "conf", Argv: []string{"/bin/sh"}}}})
	foreignClientSuccess(t, h)
	foreignClientFailure(t, h)
	foreignClientUnclaimedReply(t, h)
	// Nothing of ours matches the seed's job pattern.
	var keys []string
	ctx := context.Background()
	iter := h.rdb.Scan(ctx, 0, "hero:job:*", 100).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if len(keys) != 4 {
		t.Errorf("hero:job:* matches %d keys, want the 4 jobs: %v", len(keys), keys)
	}
}

// foreignClientSuccess: a job that succeeds. Its script reads its own status while it
// runs: the worker must have written "started" before executing it.
func foreignClientSuccess(t *testing.T, h *harness) {
	id := dispatcher.NewJobID()
	script := `printf 'status=%s\n' "$(` + rc + ` HGET hero:job:$HERO_JOB_ID status)"; echo "greeting=$GREETING"`
	env := `{"RP":"` + h.port + `","GREETING":"hello"}`
	h.seedJob(id, "conf", script, "env_vars", env)
	before := h.hash(id)
	h.push("conf", id)
	got := h.reply(id, time.Minute)
	wantOut := "status=started\ngreeting=hello\n"
	if got != wantOut {
		t.Fatalf("reply = %q, want the output %q", got, wantOut)
	}
	after := h.hash(id)
	if after["status"] != "finished" {
		t.Errorf("status = %q, want finished", after["status"])
	}
	if after["output"] != wantOut {
		t.Errorf("output = %q, want %q", after["output"], wantOut)
	}
	if _, ok := after["error"]; ok {
		t.Errorf("a finished job has an error field: %q", after["error"])
	}
	if !iso8601.MatchString(after["updated_at"]) {
		t.Errorf("updated_at = %q, not ISO 8601", after["updated_at"])
	}
	if u, err := dispatcher.ParseTime(after["updated_at"]); err != nil || !u.After(time.Date(2024, 5, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("updated_at %q was not advanced (%v)", after["updated_at"], err)
	}
	checkOnlyWorkerFields(t, before, after)
	// The reply was taken: nothing else is left on it.
	if n := h.rdb.LLen(context.Background(), "hero:reply:"+id).Val(); n != 0 {
		t.Errorf("reply list still has %d items", n)
	}
}

// checkOnlyWorkerFields: everything the client wrote is left as it was, and the
// worker added no field but output.
func checkOnlyWorkerFields(t *testing.T, before, after map[string]string) {
	for k, v := range before {
		if k == "status" || k == "updated_at" {
			continue
		}
		if after[k] != v {
			t.Errorf("field %s changed from %q to %q", k, v, after[k])
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok && k != "output" {
			t.Errorf("the worker added field %q to the job hash", k)
		}
	}
}

// foreignClientFailure: a job that fails: status error, error the reason, the reply
// the error text.
func foreignClientFailure(t *testing.T, h *harness) {
	id2 := dispatcher.NewJobID()
	h.seedJob(id2, "conf", "echo partial; echo oops >&2; exit 3")
	h.push("conf", id2)
	got := h.reply(id2, time.Minute)
	f := h.hash(id2)
	if f["status"] != "error" || f["error"] != "exit code 3: oops" {
		t.Errorf("failed job: status %q error %q, want error / %q", f["status"], f["error"], "exit code 3: oops")
	}
	if got != f["error"] {
		t.Errorf("reply %q is not the error %q", got, f["error"])
	}
	if f["output"] != "partial\n" {
		t.Errorf("failed job output = %q, want the partial stdout", f["output"])
	}
	if !iso8601.MatchString(f["updated_at"]) {
		t.Errorf("updated_at = %q, not ISO 8601", f["updated_at"])
	}
}

// foreignClientUnclaimedReply: a reply nobody takes expires.
func foreignClientUnclaimedReply(t *testing.T, h *harness) {
	ctx := context.Background()
	id3 := dispatcher.NewJobID()
	h.seedJob(id3, "conf", "echo unclaimed")
	h.push("conf", id3)
	// Wait for its end through a job queued after it (FIFO, one at a time).
	id4 := dispatcher.NewJobID()
	h.seedJob(id4, "conf", "echo next")
	h.push("conf", id4)
	h.reply(id4, time.Minute)
	ttl := h.rdb.PTTL(ctx, "hero:reply:"+id3).Val()
	if ttl <= 0 || ttl > time.Hour {
		t.Errorf("unclaimed reply TTL = %s, want (0, 1h]", ttl)
	}
	if v := h.rdb.LRange(ctx, "hero:reply:"+id3, 0, -1).Val(); len(v) != 1 || v[0] != "unclaimed\n" {
		t.Errorf("unclaimed reply = %q", v)
	}
}

// TestFIFO: clients LPUSH, the worker takes from the other end, so jobs run in the
// order they were queued.
func TestFIFO(t *testing.T) {
	h := newHarness(t)
	h.needRedisCLI()
	var ids []string
	for i := 0; i < 5; i++ {
		id := dispatcher.NewJobID()
		ids = append(ids, id)
		h.seedJob(id, "fifo", rc+" RPUSH test:order "+id+" >/dev/null")
		h.push("fifo", id)
	}
	h.worker(Params{Workers: []Spec{{ID: "fifo", Argv: []string{"/bin/sh"}}}})
	h.reply(ids[len(ids)-1], time.Minute)
	order := h.rdb.LRange(context.Background(), "test:order", 0, -1).Val()
	if len(order) != len(ids) {
		t.Fatalf("ran %d jobs, want %d", len(order), len(ids))
	}
	for i := range ids {
		if order[i] != ids[i] {
			t.Fatalf("run order %v, want the queue order %v", order, ids)
		}
	}
}
