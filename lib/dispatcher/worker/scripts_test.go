package worker

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/dispatcher"
)

// Direct tests of the protocol's scripts (every file of lua/, lib_end_stopped through
// start, park and stop) on a real Redis: each one's effect on the keys it names, and
// its refusals. The worker tests reach them through whole jobs; these name the script
// that broke.

// scriptEnv is the keys and client of one job of worker "w" claimed by process "p1".
type scriptEnv struct {
	t    *testing.T
	ctx  context.Context
	rdb  *redis.Client
	k    dispatcher.Keys
	id   string
	proc string
}

func newScriptEnv(t *testing.T) *scriptEnv {
	t.Helper()
	srv.Flush(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &scriptEnv{t: t, ctx: ctx, rdb: srv.Client(t, 0), k: dispatcher.NewKeys("s:"), id: "j1", proc: "p1"}
}

// claimed writes the job's hash (status dispatched) and puts its id on p1's
// processing list, as a claim does.
func (e *scriptEnv) claimed() {
	e.t.Helper()
	if err := e.rdb.HSet(e.ctx, e.k.Job(e.id), "status", "dispatched", "output", "old", "error", "old").Err(); err != nil {
		e.t.Fatal(err)
	}
	if err := e.rdb.RPush(e.ctx, e.k.Processing(e.proc, "w"), e.id).Err(); err != nil {
		e.t.Fatal(err)
	}
}

func (e *scriptEnv) start() string {
	e.t.Helper()
	res, err := startScript.Run(e.ctx, e.rdb,
		[]string{e.k.Processing(e.proc, "w"), e.k.Job(e.id), e.k.Claims(), e.k.StopMark(e.id), e.k.Reply(e.id), e.k.Log(e.id)},
		e.id, e.proc, "2026-01-01T00:00:00Z", 60000).Text()
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

func (e *scriptEnv) finish(status dispatcher.Status, output, errText string) int {
	e.t.Helper()
	n, err := finishScript.Run(e.ctx, e.rdb,
		[]string{e.k.Processing(e.proc, "w"), e.k.Job(e.id), e.k.Claims(), e.k.Reply(e.id), e.k.StopMark(e.id)},
		e.id, e.proc, "2026-01-01T00:00:01Z", string(status), output, errText, "reply-payload", 60000).Int()
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *scriptEnv) field(f string) string {
	e.t.Helper()
	v, err := e.rdb.HGet(e.ctx, e.k.Job(e.id), f).Result()
	if err == redis.Nil {
		return "<none>"
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return v
}

func (e *scriptEnv) processing() []string {
	e.t.Helper()
	ids, err := e.rdb.LRange(e.ctx, e.k.Processing(e.proc, "w"), 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

func (e *scriptEnv) replies() []string {
	e.t.Helper()
	r, err := e.rdb.LRange(e.ctx, e.k.Reply(e.id), 0, -1).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// start: ok marks the job started, clears its old output and error and its Redis log,
// and records the claim; lost and gone refuse.
func TestStartScript(t *testing.T) {
	e := newScriptEnv(t)
	if got := e.start(); got != "lost" {
		t.Fatalf("start of a job not on the processing list: %q, want lost", got)
	}
	if e.field("status") != "<none>" {
		t.Fatal("a lost start wrote the job")
	}

	if err := e.rdb.RPush(e.ctx, e.k.Processing(e.proc, "w"), e.id).Err(); err != nil {
		t.Fatal(err)
	}
	if got := e.start(); got != "gone" || len(e.processing()) != 0 {
		t.Fatalf("start of a job with no hash: %q, processing %v; want gone and the id dropped", got, e.processing())
	}

	e.claimed()
	if err := e.rdb.Set(e.ctx, e.k.Log(e.id), "old log", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got := e.start(); got != "ok" {
		t.Fatalf("start of a claimed job: %q, want ok", got)
	}
	if e.field("status") != "started" || e.field("output") != "<none>" || e.field("error") != "<none>" {
		t.Fatalf("after start: status %q output %q error %q", e.field("status"), e.field("output"), e.field("error"))
	}
	if p, _ := e.rdb.HGet(e.ctx, e.k.Claims(), e.id).Result(); p != e.proc {
		t.Fatalf("claims[%s] = %q, want %q", e.id, p, e.proc)
	}
	if n, _ := e.rdb.Exists(e.ctx, e.k.Log(e.id)).Result(); n != 0 {
		t.Fatal("start kept the job's old Redis log")
	}
	if ids := e.processing(); len(ids) != 1 || ids[0] != e.id {
		t.Fatalf("start changed the processing list: %v", ids)
	}
}

// start of a job whose stop came first: stopped ends it (error "stopped", a reply)
// once; a second such start is dropped.
func TestStartScriptStopped(t *testing.T) {
	e := newScriptEnv(t)
	for i, want := range []string{"stopped", "dropped"} {
		e.claimed()
		if i == 1 {
			// The hash as the first end left it (claimed() wrote status again).
			if err := e.rdb.HSet(e.ctx, e.k.Job(e.id), "status", "error", "error", "stopped").Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.rdb.Set(e.ctx, e.k.StopMark(e.id), "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if got := e.start(); got != want {
			t.Fatalf("start %d of a stopped job: %q, want %q", i+1, got, want)
		}
		if n, _ := e.rdb.Exists(e.ctx, e.k.StopMark(e.id)).Result(); n != 0 || len(e.processing()) != 0 {
			t.Fatalf("start %d: stop mark kept (%d) or processing %v", i+1, n, e.processing())
		}
		if e.field("status") != "error" || e.field("error") != "stopped" {
			t.Fatalf("start %d: status %q error %q, want error/stopped", i+1, e.field("status"), e.field("error"))
		}
		if r := e.replies(); len(r) != 1 || r[0] != "stopped" {
			t.Fatalf("start %d: replies %v, want one \"stopped\"", i+1, r)
		}
	}
}

// finish: writes the end and the reply and acknowledges the claim (1); with the hash
// gone, the reply only (2); with the claim lost, nothing (0).
func TestFinishScript(t *testing.T) {
	e := newScriptEnv(t)
	e.claimed()
	if got := e.start(); got != "ok" {
		t.Fatalf("start: %q", got)
	}
	if err := e.rdb.Set(e.ctx, e.k.StopMark(e.id), "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n := e.finish(dispatcher.StatusFinished, "hi\n", ""); n != 1 {
		t.Fatalf("finish of a held claim: %d, want 1", n)
	}
	if e.field("status") != "finished" || e.field("output") != "hi\n" || e.field("error") != "<none>" {
		t.Fatalf("after finish: status %q output %q error %q", e.field("status"), e.field("output"), e.field("error"))
	}
	if n, _ := e.rdb.HExists(e.ctx, e.k.Claims(), e.id).Result(); n || len(e.processing()) != 0 {
		t.Fatalf("finish left the claim (%v) or the processing entry %v", n, e.processing())
	}
	if n, _ := e.rdb.Exists(e.ctx, e.k.StopMark(e.id)).Result(); n != 0 {
		t.Fatal("finish left the stop mark")
	}
	if r := e.replies(); len(r) != 1 || r[0] != "reply-payload" {
		t.Fatalf("replies %v, want the payload once", r)
	}
	if ttl, _ := e.rdb.PTTL(e.ctx, e.k.Reply(e.id)).Result(); ttl <= 0 {
		t.Fatalf("the reply list has no TTL (%v)", ttl)
	}

	// The claim lost (the id no longer on our processing list): nothing is written.
	if n := e.finish(dispatcher.StatusError, "", "boom"); n != 0 {
		t.Fatalf("finish without the claim: %d, want 0", n)
	}
	if e.field("status") != "finished" || len(e.replies()) != 1 {
		t.Fatalf("a finish without the claim wrote: status %q, replies %v", e.field("status"), e.replies())
	}

	// The claim held but the hash gone: the reply only.
	if err := e.rdb.Del(e.ctx, e.k.Job(e.id)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.RPush(e.ctx, e.k.Processing(e.proc, "w"), e.id).Err(); err != nil {
		t.Fatal(err)
	}
	if n := e.finish(dispatcher.StatusError, "partial", "boom"); n != 2 {
		t.Fatalf("finish of a job whose hash is gone: %d, want 2", n)
	}
	if n, _ := e.rdb.Exists(e.ctx, e.k.Job(e.id)).Result(); n != 0 || len(e.replies()) != 2 {
		t.Fatalf("finish with the hash gone: hash recreated (%d) or replies %v", n, e.replies())
	}
}

// finish in error keeps the output given, writes the error.
func TestFinishScriptError(t *testing.T) {
	e := newScriptEnv(t)
	e.claimed()
	if n := e.finish(dispatcher.StatusError, "partial", "exit code 3"); n != 1 {
		t.Fatalf("finish: %d, want 1", n)
	}
	if e.field("status") != "error" || e.field("error") != "exit code 3" || e.field("output") != "partial" {
		t.Fatalf("after finish in error: status %q error %q output %q", e.field("status"), e.field("error"), e.field("output"))
	}
}

// heartbeat refreshes a registered process only; release moves a waiting job back to
// its queue once.
func TestHeartbeatAndReleaseScripts(t *testing.T) {
	e := newScriptEnv(t)
	procs := e.k.Procs()
	if n, err := heartbeatScript.Run(e.ctx, e.rdb, []string{procs}, "p1", 2000).Int(); err != nil || n != 0 {
		t.Fatalf("heartbeat of an unregistered process: %d, %v; want 0", n, err)
	}
	if n, _ := e.rdb.Exists(e.ctx, procs).Result(); n != 0 {
		t.Fatal("a refused heartbeat registered the process")
	}
	if err := e.rdb.ZAdd(e.ctx, procs, redis.Z{Score: 1000, Member: "p1"}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := heartbeatScript.Run(e.ctx, e.rdb, []string{procs}, "p1", 2000).Int(); err != nil || n != 1 {
		t.Fatalf("heartbeat of a registered process: %d, %v; want 1", n, err)
	}
	if s, _ := e.rdb.ZScore(e.ctx, procs, "p1").Result(); s != 2000 {
		t.Fatalf("heartbeat score %v, want 2000", s)
	}

	waiting, queue := e.k.Waiting("w"), e.k.WorkQueue("w")
	if err := e.rdb.ZAdd(e.ctx, waiting, redis.Z{Score: 1, Member: "j1"}).Err(); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 0} {
		if n, err := releaseScript.Run(e.ctx, e.rdb, []string{waiting, queue}, "j1").Int(); err != nil || n != want {
			t.Fatalf("release %d: %d, %v; want %d", i+1, n, err, want)
		}
	}
	if q, _ := e.rdb.LRange(e.ctx, queue, 0, -1).Result(); len(q) != 1 || q[0] != "j1" {
		t.Fatalf("work queue %v after two releases, want [j1]", q)
	}
}

// requeue: a process still heart-beating after the cutoff is left alone (-1); a stale
// one's jobs go back to the consuming end of their work queues (oldest first), started
// ones of its claims become dispatched again, and the process is removed.
func TestRequeueScript(t *testing.T) {
	e := newScriptEnv(t)
	procs, queue := e.k.Procs(), e.k.WorkQueue("w")
	if err := e.rdb.ZAdd(e.ctx, procs, redis.Z{Score: 5000, Member: e.proc}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.MSet(e.ctx, e.k.Proc(e.proc), "x", e.k.Ctl(e.proc), "x").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.RPush(e.ctx, e.k.Processing(e.proc, "w"), "j1", "j2").Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.RPush(e.ctx, queue, "j0").Err(); err != nil {
		t.Fatal(err)
	}
	// j1 claimed by p1 and started; j2 claimed by another process (left as it is).
	if err := e.rdb.HSet(e.ctx, e.k.Claims(), "j1", e.proc, "j2", "p2").Err(); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"j1", "j2"} {
		if err := e.rdb.HSet(e.ctx, e.k.Job(id), "status", "started").Err(); err != nil {
			t.Fatal(err)
		}
	}
	run := func(cutoff string) int {
		t.Helper()
		n, err := requeueScript.Run(e.ctx, e.rdb,
			[]string{procs, e.k.Proc(e.proc), e.k.Ctl(e.proc), e.k.Claims(), e.k.Processing(e.proc, "w"), queue},
			e.proc, cutoff, "2026-01-01T00:00:02Z", e.k.Job("")).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := run("4000"); n != -1 {
		t.Fatalf("requeue of a live process: %d, want -1", n)
	}
	if l := e.processing(); len(l) != 2 {
		t.Fatalf("requeue of a live process moved jobs: processing %v", l)
	}
	if n := run("6000"); n != 2 {
		t.Fatalf("requeue of a stale process: %d, want 2", n)
	}
	if q, _ := e.rdb.LRange(e.ctx, queue, 0, -1).Result(); len(q) != 3 || q[0] != "j0" || q[1] != "j1" || q[2] != "j2" {
		t.Fatalf("work queue %v, want [j0 j1 j2] (the consuming end is the right)", q)
	}
	if len(e.processing()) != 0 {
		t.Fatalf("processing list %v left", e.processing())
	}
	if st, _ := e.rdb.HGet(e.ctx, e.k.Job("j1"), "status").Result(); st != "dispatched" {
		t.Fatalf("j1 (p1's claim) status %q, want dispatched", st)
	}
	if st, _ := e.rdb.HGet(e.ctx, e.k.Job("j2"), "status").Result(); st != "started" {
		t.Fatalf("j2 (p2's claim) status %q, want started (not ours)", st)
	}
	if c, _ := e.rdb.HGetAll(e.ctx, e.k.Claims()).Result(); len(c) != 1 || c["j2"] != "p2" {
		t.Fatalf("claims %v, want only j2 → p2", c)
	}
	if n, _ := e.rdb.Exists(e.ctx, e.k.Proc(e.proc), e.k.Ctl(e.proc)).Result(); n != 0 {
		t.Fatal("the process's key or control list was kept")
	}
	if _, err := e.rdb.ZScore(e.ctx, procs, e.proc).Result(); err != redis.Nil {
		t.Fatalf("the process is still registered (%v)", err)
	}
}

// stop: each of its replies, with what it writes.
func TestStopScript(t *testing.T) {
	e := newScriptEnv(t)
	waiting := e.k.Waiting("w")
	stop, marked, set := e.stop, e.marked, e.set

	if res := stop(); len(res) != 1 || res[0] != "missing" || marked() {
		t.Fatalf("stop of a missing job: %v (marked %v), want [missing] and no mark", res, marked())
	}

	set("status", "finished")
	if res := stop(); len(res) != 2 || res[0] != "final" || res[1] != "finished" || marked() {
		t.Fatalf("stop of a finished job: %v (marked %v), want [final finished] and no mark", res, marked())
	}

	set("status", "started")
	if res := stop(); len(res) != 1 || res[0] != "foreign" || !marked() {
		t.Fatalf("stop of a started job no process of ours claims: %v (marked %v), want [foreign] and the mark", res, marked())
	}

	if err := e.rdb.HSet(e.ctx, e.k.Claims(), e.id, "p2").Err(); err != nil {
		t.Fatal(err)
	}
	if res := stop(); len(res) != 2 || res[0] != "claimed" || res[1] != "p2" {
		t.Fatalf("stop of a claimed job: %v, want [claimed p2]", res)
	}
	if err := e.rdb.HDel(e.ctx, e.k.Claims(), e.id).Err(); err != nil {
		t.Fatal(err)
	}

	// A job waiting for its dependencies: taken off the waiting zset and ended.
	set("status", "dispatched")
	if err := e.rdb.ZAdd(e.ctx, waiting, redis.Z{Score: 1, Member: e.id}).Err(); err != nil {
		t.Fatal(err)
	}
	if res := stop(); len(res) != 1 || res[0] != "stopped" {
		t.Fatalf("stop of a waiting job: %v, want [stopped]", res)
	}
	if _, err := e.rdb.ZScore(e.ctx, waiting, e.id).Result(); err != redis.Nil {
		t.Fatalf("the job is still waiting (%v)", err)
	}
	if e.field("status") != "error" || e.field("error") != "stopped" {
		t.Fatalf("status %q error %q, want error/stopped", e.field("status"), e.field("error"))
	}
	if r := e.replies(); len(r) != 1 || r[0] != "stopped" {
		t.Fatalf("replies %v, want one \"stopped\"", r)
	}
}

// park: with every dependency finished the job is ready (it stays claimed); a failed
// dependency is named; unfinished ones move the job from the processing list to the
// waiting zset and register it with each of them; a stop that came first ends the job.
func TestParkScript(t *testing.T) {
	e := newScriptEnv(t)
	waiting := e.k.Waiting("w")
	member := "w\t" + e.id
	deps := []string{"d1", "d2", "d3"}
	park := func() []string { return e.park(deps, member) }
	depStatus := func(st ...string) { e.depStatus(deps, st...) }
	eq := func(got []string, want ...string) bool { return slices.Equal(got, want) }

	if res := park(); !eq(res, "lost") {
		t.Fatalf("park of a job not on the processing list: %v, want [lost]", res)
	}
	e.claimed()
	depStatus("finished", "FINISHED", "finished")
	if res := park(); !eq(res, "ready") || len(e.processing()) != 1 {
		t.Fatalf("park with every dependency finished: %v, processing %v; want [ready], still claimed", res, e.processing())
	}
	depStatus("finished", "error", "started")
	if res := park(); !eq(res, "failed", "2") || len(e.processing()) != 1 {
		t.Fatalf("park with dependency 2 failed: %v, processing %v; want [failed 2], still claimed", res, e.processing())
	}
	depStatus("finished", "dispatched", "started")
	if res := park(); !eq(res, "waiting", "2") {
		t.Fatalf("park with two dependencies unfinished: %v, want [waiting 2]", res)
	}
	if len(e.processing()) != 0 {
		t.Fatalf("a parked job is still on the processing list: %v", e.processing())
	}
	if s, err := e.rdb.ZScore(e.ctx, waiting, e.id).Result(); err != nil || s != 777 {
		t.Fatalf("waiting score %v (%v), want the re-check time 777", s, err)
	}
	for i, d := range deps {
		ok, err := e.rdb.SIsMember(e.ctx, e.k.Dependents(d), member).Result()
		if err != nil || ok != (i > 0) {
			t.Fatalf("dependents of %s hold the job: %v (%v); want %v", d, ok, err, i > 0)
		}
	}
	if ttl, _ := e.rdb.PTTL(e.ctx, e.k.Dependents("d2")).Result(); ttl <= 0 {
		t.Fatalf("a dependents set has no TTL (%v)", ttl)
	}

	// A stop that came before the check: the job ends as stopped.
	if err := e.rdb.RPush(e.ctx, e.k.Processing(e.proc, "w"), e.id).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(e.ctx, e.k.StopMark(e.id), "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if res := park(); !eq(res, "stopped") || len(e.processing()) != 0 {
		t.Fatalf("park of a stopped job: %v, processing %v; want [stopped], unclaimed", res, e.processing())
	}
	if e.field("status") != "error" || e.field("error") != "stopped" || len(e.replies()) != 1 {
		t.Fatalf("a stopped park: status %q error %q replies %v", e.field("status"), e.field("error"), e.replies())
	}
}

// append_log: appends up to max bytes, then a truncation note once, then nothing; the
// copy keeps its TTL.
func TestAppendLogScript(t *testing.T) {
	e := newScriptEnv(t)
	key := e.k.Log(e.id)
	appendLog := func(chunk string) int {
		t.Helper()
		n, err := appendLogScript.Run(e.ctx, e.rdb, []string{key}, chunk, 10, 60000).Int()
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := appendLog("12345"); n != 5 {
		t.Fatalf("first chunk: length %d, want 5", n)
	}
	note := "\n[hero] output truncated: Redis keeps the first 10 bytes\n"
	if n := appendLog("6789abc"); n != 10+len(note) {
		t.Fatalf("chunk over the cap: length %d, want %d", n, 10+len(note))
	}
	if n := appendLog("more"); n != 10+len(note) {
		t.Fatalf("chunk after the cap: length %d, want it unchanged", n)
	}
	if got, _ := e.rdb.Get(e.ctx, key).Result(); got != "123456789a"+note {
		t.Fatalf("log %q, want the first 10 bytes and the note", got)
	}
	if ttl, _ := e.rdb.PTTL(e.ctx, key).Result(); ttl <= 0 {
		t.Fatalf("the log copy has no TTL (%v)", ttl)
	}
}

func (e *scriptEnv) stop() []string {
	e.t.Helper()
	res, err := stopScript.Run(e.ctx, e.rdb,
		[]string{e.k.Job(e.id), e.k.Claims(), e.k.StopMark(e.id), e.k.Waiting("w"), e.k.Reply(e.id)},
		e.id, "2026-01-01T00:00:03Z", 60000, 60000).StringSlice()
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// marked says whether the job's stop mark is set.
func (e *scriptEnv) marked() bool {
	e.t.Helper()
	n, err := e.rdb.Exists(e.ctx, e.k.StopMark(e.id)).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	return n == 1
}

// set writes fields of the job's hash.
func (e *scriptEnv) set(f ...any) {
	e.t.Helper()
	if err := e.rdb.HSet(e.ctx, e.k.Job(e.id), f...).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// park runs the park script for the job with dependencies deps (re-check at 777).
func (e *scriptEnv) park(deps []string, member string) []string {
	e.t.Helper()
	keys := []string{e.k.Processing(e.proc, "w"), e.k.Job(e.id), e.k.StopMark(e.id), e.k.Reply(e.id), e.k.Waiting("w")}
	for _, d := range deps {
		keys = append(keys, e.k.Job(d))
	}
	for _, d := range deps {
		keys = append(keys, e.k.Dependents(d))
	}
	res, err := parkScript.Run(e.ctx, e.rdb, keys, e.id, "2026-01-01T00:00:04Z", 60000, 777, member, 60000, len(deps)).StringSlice()
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// depStatus writes the statuses of the dependencies deps, in order.
func (e *scriptEnv) depStatus(deps []string, st ...string) {
	e.t.Helper()
	for i, s := range st {
		if err := e.rdb.HSet(e.ctx, e.k.Job(deps[i]), "status", s).Err(); err != nil {
			e.t.Fatal(err)
		}
	}
}
