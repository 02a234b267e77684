package store_test

import (
	"context"
	"errors"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
)

var srv *redistest.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

func open(t testing.TB) *store.Store {
	t.Helper()
	srv.Flush(t)
	s, err := store.Open(context.Background(), store.Options{URL: srv.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// wakeRunner1 makes runner 1 a waker of the context's queue (keys.Wakers): its wake
// list of the queue gets the queue's tokens.
func wakeRunner1(t testing.TB, ctxID uint32, q string) {
	t.Helper()
	if err := srv.Client(t, int(ctxID)).SAdd(context.Background(), keys.Wakers(q), 1).Err(); err != nil {
		t.Fatal(err)
	}
}

// wakeTokens counts the tokens of a context on runner 1's wake list of a queue.
func wakeTokens(t testing.TB, ctxID uint32, q string) int {
	t.Helper()
	n := 0
	for _, v := range srv.Client(t, 0).LRange(context.Background(), keys.WakeRunner(1, q), 0, -1).Val() {
		if v == strconv.FormatUint(uint64(ctxID), 10) {
			n++
		}
	}
	return n
}

func mustCtx(t testing.TB, s *store.Store, id uint32) *store.DB {
	t.Helper()
	if _, _, err := s.CreateContext(context.Background(), &model.Context{ID: id, Admins: []uint32{1}}, "operator"); err != nil {
		t.Fatal(err)
	}
	db, err := s.Ctx(id)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

var (
	pkA = strings.Repeat("ab", 32)
	pkB = strings.Repeat("cd", 32)
)

func TestActorRoundTrip(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	in := &model.Actor{ID: 12, Pubkey: pkA, Address: []string{"mycelium://x", "topic-y"}}
	out, created, err := s.CreateActor(ctx, in)
	if err != nil || !created {
		t.Fatalf("create: %v %v", created, err)
	}
	got, err := s.LoadActor(ctx, 12)
	if err != nil {
		t.Fatal(err)
	}
	if got.Pubkey != pkA || !reflect.DeepEqual(got.Address, in.Address) || got.CreatedAt == 0 || got.CreatedAt != out.CreatedAt {
		t.Fatalf("round trip: %+v", got)
	}
	// Stored in DB 0 under the seed's key.
	if n := srv.Client(t, 0).Exists(ctx, "actor:12").Val(); n != 1 {
		t.Fatalf("actor:12 not in DB 0")
	}
	// Same content again: fine, not created. Other content: already exists.
	if _, created, err := s.CreateActor(ctx, &model.Actor{ID: 12, Pubkey: pkA, Address: in.Address}); err != nil || created {
		t.Fatalf("retry: %v %v", created, err)
	}
	_, _, err = s.CreateActor(ctx, &model.Actor{ID: 12, Pubkey: pkB})
	if !errors.Is(err, store.ErrExists) || !strings.Contains(err.Error(), "pubkey") {
		t.Fatalf("conflict: %v", err)
	}
	// Server-assigned ids skip caller-chosen ones.
	if _, _, err := s.CreateActor(ctx, &model.Actor{ID: 1}); err != nil {
		t.Fatal(err)
	}
	a, _, err := s.CreateActor(ctx, &model.Actor{})
	if err != nil || a.ID != 2 {
		t.Fatalf("assigned id %v, %v; want 2", a, err)
	}
	if _, err := s.LoadActor(ctx, 99); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing actor: %v", err)
	}
}

func TestContextRules(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	if _, _, err := s.CreateContext(ctx, &model.Context{ID: 0, Admins: []uint32{1}}, "operator"); err == nil || !strings.Contains(err.Error(), "at least 1") {
		t.Fatalf("context 0: %v", err)
	}
	if _, err := s.Ctx(0); err == nil {
		t.Fatal("Ctx(0) must fail")
	}
	_, _, err := s.CreateContext(ctx, &model.Context{ID: redistest.Databases, Admins: []uint32{1}}, "operator")
	if err == nil || !strings.Contains(err.Error(), "beyond the databases") {
		t.Fatalf("context beyond databases: %v", err)
	}
	c, created, err := s.CreateContext(ctx, &model.Context{ID: 7, Admins: []uint32{1, 2}, Readers: []uint32{3}, Executors: []uint32{4}}, "operator")
	if err != nil || !created {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Admins, []uint32{1, 2}) || !reflect.DeepEqual(c.Readers, []uint32{3}) || !reflect.DeepEqual(c.Executors, []uint32{4}) {
		t.Fatalf("context: %+v", c)
	}
	if srv.Client(t, 7).Exists(ctx, "context:7").Val() != 1 {
		t.Fatal("context:7 must live in DB 7")
	}
	ids, err := s.ContextIDs(ctx)
	if err != nil || !reflect.DeepEqual(ids, []uint32{7}) {
		t.Fatalf("registry: %v %v", ids, err)
	}
	// Nothing was written for the refused ones.
	for _, db := range []int{0, 1} {
		for _, k := range srv.Keys(t, db) {
			if strings.HasPrefix(k, "context:") {
				t.Fatalf("refused context left %s in DB %d", k, db)
			}
		}
	}
}

func TestJobFlowRunnerMessageRoundTrip(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 3)
	checkRunnerRoundTrip(t, s, db)
	got := checkJobRoundTrip(t, s)
	checkFlowRoundTrip(t, s, db)

	m := &model.Message{CallerID: 12, ContextID: 3, Message: "hi", MessageType: "job", MessageFormatType: "text", Timeout: 10, TimeoutAck: 5, TimeoutResult: 60,
		Job: []model.Job{*got}, FlowID: 33, Nodes: []model.FlowNode{{ID: 2001, Depends: []uint32{2000}, NodeStatus: model.NodeReady}}, TransportID: "t1"}
	mm, _, err := db.CreateMessage(ctx, m, "12")
	if err != nil {
		t.Fatal(err)
	}
	if mm.ID == 0 || len(mm.Job) != 1 || mm.Job[0].Script != "print(1)" || mm.Nodes[0].NodeStatus != model.NodeReady || mm.FlowID != 33 || mm.Status != model.MessageDispatched {
		t.Fatalf("message: %+v", mm)
	}
}

// checkRunnerRoundTrip creates runner 20 (python) in context 3: its script type
// counts as served, another does not.
func checkRunnerRoundTrip(t *testing.T, s *store.Store, db *store.DB) {
	t.Helper()
	ctx := context.Background()
	r, _, err := s.CreateRunner(ctx, 3, &model.Runner{ID: 20, Local: true, ScriptTypes: []model.ScriptType{"python"}}, "1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Topic != "runner20" || !r.Local || len(r.ScriptTypes) != 1 {
		t.Fatalf("runner: %+v", r)
	}
	if ok, _ := db.ScriptTypeServed(ctx, "python"); !ok {
		t.Fatal("python must count as served")
	}
	if ok, _ := db.ScriptTypeServed(ctx, "v"); ok {
		t.Fatal("v must not count as served")
	}
}

// checkJobRoundTrip creates jobs 2001 (every field set) and 2000 in context 3, and
// returns 2001 as created.
func checkJobRoundTrip(t *testing.T, s *store.Store) *model.Job {
	t.Helper()
	ctx := context.Background()
	j := &model.Job{ID: 2001, CallerID: 12, ContextID: 3, Script: "print(1)", ScriptType: "python", Timeout: 30, Retries: 2,
		EnvVars: map[string]string{"A": "1"}, Prerequisites: []string{"file:x"}, Dependends: []uint32{2000}, RunnerID: 20}
	got, created, err := s.CreateJob(ctx, j, "12")
	if err != nil || !created {
		t.Fatal(err)
	}
	if got.Status != model.JobDispatched || got.Script != "print(1)" || got.Retries != 2 || got.EnvVars["A"] != "1" ||
		!reflect.DeepEqual(got.Dependends, []uint32{2000}) || !reflect.DeepEqual(got.Prerequisites, []string{"file:x"}) || got.RunnerID != 20 {
		t.Fatalf("job: %+v", got)
	}
	if _, _, err := s.CreateJob(ctx, &model.Job{ID: 2000, CallerID: 12, ContextID: 3, Script: "echo", ScriptType: "sh"}, "12"); err != nil {
		t.Fatal(err)
	}
	return got
}

// checkFlowRoundTrip creates flow 33 of jobs 2000 and 2001, which learn their flow;
// a flow naming a missing job is refused and stores nothing.
func checkFlowRoundTrip(t *testing.T, s *store.Store, db *store.DB) {
	t.Helper()
	ctx := context.Background()
	f, _, err := s.CreateFlow(ctx, &model.Flow{ID: 33, CallerID: 12, ContextID: 3, Jobs: []uint32{2000, 2001}, EnvVars: map[string]string{"G": "x"}}, "12")
	if err != nil {
		t.Fatal(err)
	}
	if f.Status != model.FlowDispatched || !reflect.DeepEqual(f.Jobs, []uint32{2000, 2001}) || f.EnvVars["G"] != "x" {
		t.Fatalf("flow: %+v", f)
	}
	if j2, _ := db.LoadJob(ctx, 12, 2001); j2.FlowID != 33 {
		t.Fatalf("job must learn its flow: %+v", j2)
	}
	if _, _, err := s.CreateFlow(ctx, &model.Flow{ID: 34, CallerID: 12, ContextID: 3, Jobs: []uint32{1}}, "12"); err == nil || !strings.Contains(err.Error(), "jobs") {
		t.Fatalf("flow with missing job: %v", err)
	}
	if srv.Client(t, 3).Exists(ctx, "flow:34").Val() != 0 {
		t.Fatal("refused flow was stored")
	}
}

// Hashes written with plain HSET exactly as the seeds lay them out are read back: data
// written by another implementation works.
func TestReadSeedLayoutHashes(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	c7 := srv.Client(t, 7)
	writeSeedLayoutHashes(t, srv.Client(t, 0), c7)

	a, err := s.LoadActor(ctx, 12)
	if err != nil {
		t.Fatal(err)
	}
	if a.Pubkey != "pk12" || a.Address[0] != "addr1" || a.CreatedAt != 1724900000 || a.UpdatedAt != 1724900001 {
		t.Fatalf("actor: %+v", a)
	}
	c, err := s.LoadContext(ctx, 7)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Admins, []uint32{12}) || !reflect.DeepEqual(c.Readers, []uint32{13, 14}) || len(c.Executors) != 0 {
		t.Fatalf("context: %+v", c)
	}
	db, _ := s.Ctx(7)
	checkSeedFlowMessageRunner(t, db)
	checkSeedJobs(t, db)
	// A field that cannot be read names the key and the field.
	if err := c7.HSet(ctx, "job:12:2003", "id", "2003", "timeout", "soon").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := db.LoadJob(ctx, 12, 2003); err == nil || !strings.Contains(err.Error(), "timeout") || !strings.Contains(err.Error(), "job:12:2003") {
		t.Fatalf("bad field: %v", err)
	}
}

// writeSeedLayoutHashes writes an actor (DB 0), and a context, flow, message, runner
// and two jobs (DB 7) as the seed's layout has them, field by field.
func writeSeedLayoutHashes(t *testing.T, c0, c7 *redis.Client) {
	t.Helper()
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c0.HSet(ctx, "actor:12", "id", "12", "pubkey", "pk12", "address", `["addr1"]`, "created_at", "1724900000", "updated_at", "1724900001").Err())
	must(c7.HSet(ctx, "context:7", "id", "7", "admins", "[12]", "readers", "[13,14]", "executors", "[]", "created_at", "1724900000", "updated_at", "1724900000").Err())
	must(c7.HSet(ctx, "flow:33", "id", "33", "caller_id", "12", "context_id", "7", "jobs", "[2001,2002]", "env_vars", `{"K":"V"}`, "result", `{"2001.x":"1"}`,
		"created_at", "1724900000", "updated_at", "1724900000", "status", "finished").Err())
	must(c7.HSet(ctx, "message:12:101", "id", "101", "caller_id", "12", "context_id", "7", "message", "run", "message_type", "job", "message_format_type", "text",
		"timeout", "60", "timeout_ack", "10", "timeout_result", "600",
		"job", `[{"id":2001,"caller_id":12,"context_id":7,"script":"print(1)","script_type":"python","timeout":30,"retries":1,"env_vars":{},"result":{},"prerequisites":[],"dependends":[],"created_at":1,"updated_at":1,"status":"dispatched"}]`,
		"logs", `[{"timestamp":1724900000,"message":"sent"}]`, "created_at", "1724900000", "updated_at", "1724900000", "status", "acknowledged").Err())
	must(c7.HSet(ctx, "runner:20", "id", "20", "pubkey", "", "address", "mycelium://r20", "topic", "runner20", "local", "true", "created_at", "1724900000", "updated_at", "1724900000").Err())
	must(c7.HSet(ctx, "job:12:2001", "id", "2001", "caller_id", "12", "context_id", "7", "script", "print(1)", "script_type", "python", "timeout", "30", "retries", "3",
		"env_vars", `{"A":"B"}`, "result", `{"out":"1"}`, "prerequisites", `["p1"]`, "dependends", "[2000]", "created_at", "1724900000", "updated_at", "1724900005",
		"status", "waiting_for_prerequisites").Err())
	// Another implementation's enum spelling.
	must(c7.HSet(ctx, "job:12:2002", "id", "2002", "caller_id", "12", "context_id", "7", "script", "x", "script_type", "Python", "timeout", "0", "retries", "0",
		"env_vars", "{}", "result", "{}", "prerequisites", "[]", "dependends", "[]", "created_at", "1", "updated_at", "1", "status", "WaitingForPrerequisites").Err())
}

// checkSeedFlowMessageRunner reads the flow, message and runner that
// writeSeedLayoutHashes wrote.
func checkSeedFlowMessageRunner(t *testing.T, db *store.DB) {
	t.Helper()
	ctx := context.Background()
	f, err := db.LoadFlow(ctx, 33)
	if err != nil {
		t.Fatal(err)
	}
	if f.Status != model.FlowFinished || f.Result["2001.x"] != "1" || f.EnvVars["K"] != "V" || !reflect.DeepEqual(f.Jobs, []uint32{2001, 2002}) {
		t.Fatalf("flow: %+v", f)
	}
	m, err := db.LoadMessage(ctx, 12, 101)
	if err != nil {
		t.Fatal(err)
	}
	if m.Status != model.MessageAcknowledged || m.TimeoutResult != 600 || m.Job[0].ScriptType != model.ScriptPython || m.Logs[0].Message != "sent" || m.MessageType != model.MessageTypeJob {
		t.Fatalf("message: %+v", m)
	}
	r, err := db.LoadRunner(ctx, 20)
	if err != nil {
		t.Fatal(err)
	}
	if !r.Local || r.Topic != "runner20" || r.Address != "mycelium://r20" {
		t.Fatalf("runner: %+v", r)
	}
}

// checkSeedJobs reads the two jobs that writeSeedLayoutHashes wrote, the second in
// another implementation's enum spelling.
func checkSeedJobs(t *testing.T, db *store.DB) {
	t.Helper()
	ctx := context.Background()
	j, err := db.LoadJob(ctx, 12, 2001)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != model.JobWaitingForPrerequisites || j.Retries != 3 || j.Timeout != 30 || j.EnvVars["A"] != "B" || j.Result["out"] != "1" ||
		j.Prerequisites[0] != "p1" || j.Dependends[0] != 2000 || j.UpdatedAt != 1724900005 {
		t.Fatalf("job: %+v", j)
	}
	j2, err := db.LoadJob(ctx, 12, 2002)
	if err != nil {
		t.Fatal(err)
	}
	if j2.Status != model.JobWaitingForPrerequisites || j2.ScriptType != model.ScriptPython {
		t.Fatalf("job with foreign enum spelling: %+v", j2)
	}
}

func TestReliableClaim(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 5)
	q := keys.Queue("sh")
	wakeRunner1(t, 5, q)
	for _, it := range []string{"job:1:1", "job:1:2"} {
		if err := db.Enqueue(ctx, q, it); err != nil {
			t.Fatal(err)
		}
	}
	// FIFO, with a wake token per item in DB 0 (on the list of each runner that
	// serves the queue).
	if n := wakeTokens(t, 5, q); n != 2 {
		t.Fatalf("wake tokens: %d", n)
	}
	checkDeadConsumerRequeued(t, db, q)
	checkLiveConsumerAcks(t, db, q)
	// The same item claimed twice by one consumer: each claim has its own lease, so
	// acking the first leaves the second held.
	_ = db.Enqueue(ctx, q, "job:1:9")
	_ = db.Enqueue(ctx, q, "job:1:9")
	c1, _ := db.Claim(ctx, q, "same", time.Minute)
	c2, _ := db.Claim(ctx, q, "same", time.Minute)
	if c1 == nil || c2 == nil || c1.ID == c2.ID {
		t.Fatalf("two claims: %v %v", c1, c2)
	}
	_ = db.Ack(ctx, c1)
	if ok, _ := db.ExtendLease(ctx, c2, time.Minute); !ok {
		t.Fatal("acking one claim of an item released the other")
	}
}

// checkDeadConsumerRequeued: the first item, claimed by a consumer that dies, stays
// in its processing list until its lease expires, then goes back exactly once, to
// the consuming end of the queue, with a wake token.
func checkDeadConsumerRequeued(t *testing.T, db *store.DB, q string) {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, 5)
	cl, err := db.Claim(ctx, q, "dead", 50*time.Millisecond)
	if err != nil || cl == nil || cl.Item != "job:1:1" {
		t.Fatalf("claim: %v %v", cl, err)
	}
	if got := rc.LRange(ctx, keys.Processing("dead"), 0, -1).Val(); !reflect.DeepEqual(got, []string{"job:1:1"}) {
		t.Fatalf("processing list: %v", got)
	}
	// Before expiry nothing moves.
	if moved, err := db.RequeueExpired(ctx, time.Now(), 100); err != nil || len(moved) != 0 {
		t.Fatalf("early requeue: %v %v", moved, err)
	}
	later := time.Now().Add(time.Second)
	moved, err := db.RequeueExpired(ctx, later, 100)
	if err != nil || len(moved) != 1 || moved[0].Item != "job:1:1" || moved[0].Queue != q {
		t.Fatalf("requeue: %v %v", moved, err)
	}
	if moved, _ := db.RequeueExpired(ctx, later, 100); len(moved) != 0 {
		t.Fatalf("second requeue moved %v", moved)
	}
	if got := rc.LRange(ctx, q, 0, -1).Val(); !reflect.DeepEqual(got, []string{"job:1:2", "job:1:1"}) {
		t.Fatalf("queue after requeue: %v", got)
	}
	if n := rc.LLen(ctx, keys.Processing("dead")).Val(); n != 0 {
		t.Fatalf("processing list not emptied: %d", n)
	}
	if n := wakeTokens(t, 5, q); n != 3 {
		t.Fatalf("requeue must add a wake token: %d", n)
	}
}

// checkLiveConsumerAcks: the requeued item is next; a live consumer extends and
// acks, and an acked item is never requeued (even one whose lease expired as it
// finished: LREM finds nothing, no double). The queue is empty after.
func checkLiveConsumerAcks(t *testing.T, db *store.DB, q string) {
	t.Helper()
	ctx := context.Background()
	cl, _ := db.Claim(ctx, q, "live", time.Minute)
	if cl == nil || cl.Item != "job:1:1" {
		t.Fatalf("next claim: %v", cl)
	}
	if ok, err := db.ExtendLease(ctx, cl, time.Minute); !ok || err != nil {
		t.Fatalf("extend: %v %v", ok, err)
	}
	if err := db.Ack(ctx, cl); err != nil {
		t.Fatal(err)
	}
	if ok, _ := db.ExtendLease(ctx, cl, time.Minute); ok {
		t.Fatal("extend after ack must report the lease gone")
	}
	// A lease that expires after an ack requeues nothing.
	if moved, _ := db.RequeueExpired(ctx, time.Now().Add(time.Hour), 100); len(moved) != 0 {
		t.Fatalf("acked item requeued: %v", moved)
	}
	// A consumer that finished just as its lease expired: LREM finds nothing, no double.
	cl, _ = db.Claim(ctx, q, "racer", time.Millisecond)
	_ = db.Ack(ctx, cl)
	if moved, _ := db.RequeueExpired(ctx, time.Now().Add(time.Hour), 100); len(moved) != 0 {
		t.Fatalf("finished item requeued: %v", moved)
	}
	if cl, _ := db.Claim(ctx, q, "x", time.Minute); cl != nil {
		t.Fatalf("queue should be empty, got %v", cl)
	}
}

func TestWaitWakeAcrossContexts(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db5 := mustCtx(t, s, 5)
	_ = mustCtx(t, s, 6)
	wakeRunner1(t, 5, "queue:sh")
	got := make(chan string, 1)
	go func() {
		// Runner 1's list of the queue, for both contexts: one key.
		w, err := s.WaitWake(ctx, 5*time.Second, store.WakeSetsOn(s.ServersOf([]uint32{6, 5}), keys.WakeRunner(1, "queue:sh"))...)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- w.Key + " " + w.Token
	}()
	if err := db5.Enqueue(ctx, "queue:sh", "job:1:1"); err != nil {
		t.Fatal(err)
	}
	select {
	case k := <-got:
		if k != keys.WakeRunner(1, "queue:sh")+" 5" {
			t.Fatalf("woke on %q, want context 5's token", k)
		}
		r, q, ok := store.ParseWakeRunner(keys.WakeRunner(1, "queue:sh"))
		if !ok || r != 1 || q != "queue:sh" {
			t.Fatalf("parse: %d %q", r, q)
		}
	case <-time.After(time.Minute):
		t.Fatal("no wake-up")
	}
}

// WaitWake returns soon after its context ends, long before its timeout, takes no
// token meant for others and leaves no key behind.
func TestWaitWakeEndsWithContext(t *testing.T) {
	s := open(t)
	ctx, cancel := context.WithCancel(context.Background())
	wake := keys.WakeRunner(1, "queue:sh")
	bg := context.Background()
	blocked := func() int {
		info, err := s.G().Info(bg, "clients").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "blocked_clients:"); ok {
				n, _ := strconv.Atoi(v)
				return n
			}
		}
		t.Fatalf("no blocked_clients in %q", info)
		return 0
	}
	before := blocked()
	done := make(chan error, 1)
	go func() {
		_, err := s.WaitWake(ctx, time.Minute, s.Everywhere(wake)...)
		done <- err
	}()
	// Cancel once the BLPOP is blocked (then the wait can only end through the stop token).
	for deadline := time.Now().Add(time.Minute); blocked() <= before; {
		if time.Now().After(deadline) {
			t.Fatal("WaitWake never blocked")
		}
		time.Sleep(2 * time.Millisecond) // nothing signals a blocked client but INFO
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("WaitWake did not return after its context ended")
	}
	if n, err := s.G().Keys(bg, "coord:wakestop:*").Result(); err != nil || len(n) != 0 {
		t.Fatalf("stop lists left behind: %v %v", n, err)
	}
	// The wake list works on for the next waiter.
	if err := s.G().LPush(bg, wake, "1").Err(); err != nil {
		t.Fatal(err)
	}
	if w, err := s.WaitWake(bg, time.Second, s.Everywhere(wake)...); err != nil || w.Key != wake {
		t.Fatalf("next wait: %q %v", w.Key, err)
	}
	// An ended context returns at once.
	if _, err := s.WaitWake(ctx, time.Minute, s.Everywhere(wake)...); !errors.Is(err, context.Canceled) {
		t.Fatalf("ended context: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	cases := map[string]string{
		"redis://127.0.0.1:1/0":                         "connection refused",
		"redis://127.0.0.1:6379/5":                      "database must be 0",
		"http://x":                                      "redis url",
		"redis://" + srv.Addr + "/0x":                   "redis url",
		strings.Replace(srv.UnixURL, "db=0", "db=4", 1): "database must be 0",
	}
	for url, want := range cases {
		_, err := store.Open(ctx, store.Options{URL: url, ConnectTimeout: 300 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", url, err, want)
		}
	}
	if _, err := store.Open(ctx, store.Options{URL: srv.URL, Placement: "5-1=redis://x"}); err == nil || !strings.Contains(err.Error(), "context range") {
		t.Errorf("bad placement: %v", err)
	}
}

// A Unix socket URL works: its path is the socket's, not a database number.
func TestOpenUnixSocket(t *testing.T) {
	s, err := store.Open(context.Background(), store.Options{URL: srv.UnixURL, ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatalf("open %s: %v", srv.UnixURL, err)
	}
	defer s.Close()
	if err := s.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestPlacement(t *testing.T) {
	other := redistest.Start(t)
	srv.Flush(t)
	ctx := context.Background()
	s, err := store.Open(ctx, store.Options{URL: srv.URL, Placement: "10-19=" + other.URL, ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, _, err := s.CreateContext(ctx, &model.Context{ID: 12, Admins: []uint32{1}}, "operator"); err != nil {
		t.Fatal(err)
	}
	if other.Client(t, 12).Exists(ctx, "context:12").Val() != 1 {
		t.Fatal("context 12 must live on the placed server")
	}
	if srv.Client(t, 12).Exists(ctx, "context:12").Val() != 0 {
		t.Fatal("context 12 must not live on the primary")
	}
	// The registry stays on the primary's DB 0.
	if srv.Client(t, 0).ZScore(ctx, keys.Contexts, "12").Err() != nil {
		t.Fatal("context 12 must be registered on the primary")
	}
}

func TestAuthURL(t *testing.T) {
	pw := redistest.Start(t, redistest.Options{Password: "s3cret"})
	ctx := context.Background()
	s, err := store.Open(ctx, store.Options{URL: pw.URL, ConnectTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = store.Open(ctx, store.Options{URL: strings.Replace(pw.URL, "s3cret", "wrong", 1), ConnectTimeout: time.Second})
	if err == nil || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("wrong password must fail without echoing it: %v", err)
	}
}

// TestSweepHoldsBackAfterAFault (issue 17): leases that ran out while Redis was away
// are not requeued at once when it is back: their live holders get a lease's time to
// extend them (or to write the job's end) first.
func TestSweepHoldsBackAfterAFault(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{ExtraArgs: []string{"--appendonly", "yes", "--appendfsync", "always"}})
	ctx := context.Background()
	s, err := store.Open(ctx, store.Options{URL: rs.URL, ConnectTimeout: time.Minute, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	db := mustCtx(t, s, 3)
	if err := db.Enqueue(ctx, "queue:sh", "job:1:1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Claim(ctx, "queue:sh", "w1", time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := rs.Down(redistest.DownKill); err != nil {
		t.Fatal(err)
	}
	if _, err := db.QueueLen(ctx, "queue:sh"); err == nil {
		t.Fatal("a call to a stopped Redis succeeded")
	}
	if err := rs.Up(); err != nil {
		t.Fatal(err)
	}
	if s.LastFault().IsZero() {
		t.Fatal("the fault was not noted")
	}
	n := 0
	if s.SweepLeases(ctx, []uint32{3}, time.Now().Add(time.Minute), time.Minute, func(uint32, store.Requeued) { n++ }) || n != 0 {
		t.Fatalf("the sweep right after a fault requeued %d", n)
	}
	if !s.SweepLeases(ctx, []uint32{3}, time.Now().Add(time.Minute), 0, func(uint32, store.Requeued) { n++ }) || n != 1 {
		t.Fatalf("with no grace: requeued %d, want the expired lease's job", n)
	}
}

// jobMsgs is the numbers n of message:<caller>:<n> that job caller:id lists as its own
// (its hash's msgs).
func jobMsgs(t testing.TB, rc *redis.Client, caller, id uint32) []string {
	t.Helper()
	return strings.Fields(rc.HGet(context.Background(), keys.Job(caller, id), "msgs").Val())
}

// A flow's start plans handler jobs that name their executor and have no script_type
// (as read for the start: LoadStartJobs), and still refuses a job that is neither a
// known script type's nor a named executor's.
func TestPlanTakesHandlerJobsWithoutScriptType(t *testing.T) {
	s := open(t)
	ctx := context.Background()
	db := mustCtx(t, s, 3)
	var ids []uint32
	for _, j := range []*model.Job{
		{ScriptType: model.ScriptSh, Script: "true"},
		{FunctionName: "mailer#send", Kwargs: []byte(`{"to":"x"}`)},
		{FunctionName: "mailer#send", Dependends: []uint32{2}},
	} {
		j.CallerID, j.ContextID = 1, 3
		made, _, err := s.CreateJob(ctx, j, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, made.ID)
	}
	f := &model.Flow{ID: 1, CallerID: 1, ContextID: 3, Jobs: ids}
	jobs, err := db.LoadStartJobs(ctx, 1, ids)
	if err != nil {
		t.Fatal(err)
	}
	deps, err := store.PlanDAG(f, jobs)
	if err != nil {
		t.Fatalf("plan a flow of handler jobs without script_type: %v", err)
	}
	if !reflect.DeepEqual(deps, map[uint32][]uint32{ids[1]: {ids[2]}}) {
		t.Errorf("dependents: %v", deps)
	}
	jobs[1].FunctionName = "send" // no executor named, and no script type
	if _, err := store.PlanDAG(f, jobs); err == nil || !strings.Contains(err.Error(), `job 2: script_type "" is not a known script type`) {
		t.Errorf("a job of no script type and no executor: %v", err)
	}
}
