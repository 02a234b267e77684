package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
	"github.com/hero-coordinator/hero/lib/store"
	"github.com/hero-coordinator/hero/lib/testutil/redistest"
	"github.com/hero-coordinator/hero/lib/testutil/storetest"
	herov1 "github.com/hero-coordinator/hero/proto/hero/v1"
)

var srv *redistest.Server

func TestMain(m *testing.M) { os.Exit(redistest.Main(m, &srv)) }

// scheduler is a Scheduler service that records the ends it is told and refuses the
// job ids in refuse (JobsDone fails as a whole, as the real one does).
type scheduler struct {
	herov1.UnimplementedSchedulerServer
	mu       sync.Mutex
	refuse   map[uint32]bool
	oldStyle bool // answer JobsDone with Unimplemented, like a scheduler before it
	batches  [][]uint32
	singles  []uint32
	ends     []*herov1.JobDoneRequest // every end told, as told
}

func (s *scheduler) JobsDone(_ context.Context, req *herov1.JobsDoneRequest) (*herov1.JobsDoneResponse, error) {
	if s.oldStyle {
		return nil, status.Error(codes.Unimplemented, "unknown method JobsDone")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []uint32
	for _, e := range req.Ends {
		if s.refuse[e.JobId] {
			return nil, status.Errorf(codes.InvalidArgument, "job %d refused", e.JobId)
		}
		ids = append(ids, e.JobId)
	}
	s.batches = append(s.batches, ids)
	s.ends = append(s.ends, req.Ends...)
	return &herov1.JobsDoneResponse{}, nil
}

func (s *scheduler) JobDone(_ context.Context, req *herov1.JobDoneRequest) (*herov1.JobDoneResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.refuse[req.JobId] {
		return nil, status.Errorf(codes.InvalidArgument, "job %d refused", req.JobId)
	}
	s.singles = append(s.singles, req.JobId)
	return &herov1.JobDoneResponse{}, nil
}

func startRouter(t *testing.T, sched *scheduler) (*router, *store.DB) {
	t.Helper()
	srv.Flush(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Options{URL: srv.URL, ConnectTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(st.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	herov1.RegisterSchedulerServer(gs, sched)
	go func() { _ = gs.Serve(ln) }()
	t.Cleanup(gs.Stop)
	cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	r := newRouter(routerParams{store: st, log: zerolog.Nop(), reg: prometheus.NewRegistry(), scheduler: herov1.NewSchedulerClient(cc),
		id: "router-test", workers: 1, lease: time.Minute})
	db, err := st.Ctx(3)
	if err != nil {
		t.Fatal(err)
	}
	return r, db
}

// queueResults stores one job_result message per job id on msg_out (as runners do).
func queueResults(t *testing.T, db *store.DB, ids ...uint32) map[uint32]string {
	t.Helper()
	ctx := context.Background()
	rc := srv.Client(t, 3)
	keysByJob := map[uint32]string{}
	for _, id := range ids {
		m := model.Message{ID: 100 + id, CallerID: 1, ContextID: 3, MessageType: model.MessageTypeJob, Kind: model.KindJobResult, FlowID: 5,
			Status: model.MessageDispatched, Job: []model.Job{{ID: id, CallerID: 1, ContextID: 3, FlowID: 5, Attempt: 1, Status: model.JobFinished}}}
		mk := keys.Message(1, m.ID)
		if err := rc.HSet(ctx, mk, model.HashFields(&m)...).Err(); err != nil {
			t.Fatal(err)
		}
		if err := db.Enqueue(ctx, keys.MsgOut, mk); err != nil {
			t.Fatal(err)
		}
		keysByJob[id] = mk
	}
	return keysByJob
}

func messageStatus(t *testing.T, mk string) string {
	return srv.Client(t, 3).HGet(context.Background(), mk, "status").Val()
}

// Results claimed together are reported in one JobsDone call and acknowledged.
func TestResultsAreReportedTogether(t *testing.T) {
	sched := &scheduler{}
	r, db := startRouter(t, sched)
	msgs := queueResults(t, db, 1, 2, 3, 4, 5)
	if n := r.drain(context.Background(), 3, keys.MsgOut, false); n != 5 {
		t.Fatalf("claimed %d of 5", n)
	}
	if len(sched.batches) != 1 || len(sched.batches[0]) != 5 || len(sched.singles) != 0 {
		t.Fatalf("calls: batches %v singles %v; want one call with five ends", sched.batches, sched.singles)
	}
	for id, mk := range msgs {
		if st := messageStatus(t, mk); st != string(model.MessageProcessed) {
			t.Fatalf("job %d's result message is %q", id, st)
		}
	}
	if n := srv.Client(t, 3).LLen(context.Background(), keys.Processing("router-test")).Val(); n != 0 {
		t.Fatalf("%d messages still claimed", n)
	}
}

// queueGroupResult stores one job_result message carrying the jobs ids (as a runner
// does for runs of one flow that end together) on msg_out.
func queueGroupResult(t *testing.T, db *store.DB, msgID uint32, ids ...uint32) string {
	t.Helper()
	ctx := context.Background()
	var jobs []model.Job
	for _, id := range ids {
		jobs = append(jobs, model.Job{ID: id, CallerID: 1, ContextID: 3, FlowID: 5, Attempt: 1, Status: model.JobFinished})
	}
	m := model.Message{ID: msgID, CallerID: 1, ContextID: 3, MessageType: model.MessageTypeJob, Kind: model.KindJobResult, FlowID: 5,
		Status: model.MessageDispatched, Job: jobs}
	mk := keys.Message(1, m.ID)
	if err := srv.Client(t, 3).HSet(ctx, mk, model.HashFields(&m)...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := db.Enqueue(ctx, keys.MsgOut, mk); err != nil {
		t.Fatal(err)
	}
	return mk
}

// One end the scheduler refuses in a result message of several jobs holds back only
// itself: the message's other ends are reported, the message stays claimed (retried
// with the refused end alone) until the router stops.
func TestARefusedEndOfAGroupMessageHoldsBackOnlyItself(t *testing.T) {
	sched := &scheduler{refuse: map[uint32]bool{22: true}}
	r, db := startRouter(t, sched)
	mk := queueGroupResult(t, db, 201, 21, 22, 23)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- r.drain(ctx, 3, keys.MsgOut, false) }()
	taken := func() map[uint32]bool {
		sched.mu.Lock()
		defer sched.mu.Unlock()
		got := map[uint32]bool{}
		for _, b := range sched.batches {
			for _, id := range b {
				got[id] = true
			}
		}
		return got
	}
	deadline := time.Now().Add(time.Minute)
	for got := taken(); !got[21] || !got[23]; got = taken() {
		if time.Now().After(deadline) {
			t.Fatalf("ends taken %v: 21 and 23 were held back by 22", got)
		}
		time.Sleep(5 * time.Millisecond) // the router works in another goroutine
	}
	cancel()
	<-done
	if got := taken(); got[22] {
		t.Fatal("the refused end was taken")
	}
	if st := messageStatus(t, mk); st == string(model.MessageProcessed) {
		t.Fatal("a message with a refused end was acknowledged")
	}
	held, err := srv.Client(t, 3).LRange(context.Background(), keys.Processing("router-test"), 0, -1).Result()
	if err != nil || len(held) != 1 || held[0] != mk {
		t.Fatalf("claimed after the stop: %v %v; want the group's message", held, err)
	}
}

// A result message of several jobs (runs of one flow that ended together) is reported
// with its others in one call and acknowledged once.
func TestAGroupResultMessageReportsEachJob(t *testing.T) {
	sched := &scheduler{}
	r, db := startRouter(t, sched)
	ctx := context.Background()
	rc := srv.Client(t, 3)
	mk := queueGroupResult(t, db, 200, 11, 12, 13)
	single := queueResults(t, db, 14)
	if n := r.drain(ctx, 3, keys.MsgOut, false); n != 2 {
		t.Fatalf("claimed %d of 2 messages", n)
	}
	sched.mu.Lock()
	batches := sched.batches
	sched.mu.Unlock()
	if len(batches) != 1 || len(batches[0]) != 4 {
		t.Fatalf("calls %v: want one call with the four ends", batches)
	}
	got := map[uint32]bool{}
	for _, id := range batches[0] {
		got[id] = true
	}
	for _, id := range []uint32{11, 12, 13, 14} {
		if !got[id] {
			t.Fatalf("job %d's end was not reported: %v", id, batches[0])
		}
	}
	for _, k := range []string{mk, single[14]} {
		if st := messageStatus(t, k); st != string(model.MessageProcessed) {
			t.Fatalf("%s is %q", k, st)
		}
	}
	if n := rc.LLen(ctx, keys.Processing("router-test")).Val(); n != 0 {
		t.Fatalf("%d messages still claimed", n)
	}
}

// One end the scheduler refuses does not hold back the others: each is then reported
// on its own, the refused one stays claimed (retried, its lease kept) until the
// router stops.
func TestARefusedEndDoesNotHoldBackTheGroup(t *testing.T) {
	sched := &scheduler{refuse: map[uint32]bool{3: true}}
	r, db := startRouter(t, sched)
	msgs := queueResults(t, db, 1, 2, 3, 4)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	go func() { done <- r.drain(ctx, 3, keys.MsgOut, false) }()
	deadline := time.Now().Add(time.Minute)
	for _, id := range []uint32{1, 2, 4} {
		for messageStatus(t, msgs[id]) != string(model.MessageProcessed) {
			if time.Now().After(deadline) {
				t.Fatalf("job %d's result was not delivered while job 3's is refused", id)
			}
			time.Sleep(5 * time.Millisecond) // the router works in another goroutine
		}
	}
	cancel()
	<-done
	if st := messageStatus(t, msgs[3]); st == string(model.MessageProcessed) {
		t.Fatal("the refused result was acknowledged")
	}
	held, err := srv.Client(t, 3).LRange(context.Background(), keys.Processing("router-test"), 0, -1).Result()
	if err != nil || len(held) != 1 || held[0] != msgs[3] {
		t.Fatalf("claimed after the stop: %v %v; want only job 3's result", held, err)
	}
	sched.mu.Lock()
	defer sched.mu.Unlock()
	var taken []uint32
	for _, b := range sched.batches {
		if len(b) != 1 {
			t.Fatalf("after the refused group, ends go one per call: %v", sched.batches)
		}
		taken = append(taken, b[0])
	}
	if len(taken) != 3 || taken[0] != 1 || taken[1] != 2 || taken[2] != 4 {
		t.Fatalf("ends taken %v: want 1, 2 and 4", taken)
	}
}

// A scheduler without JobsDone gets one JobDone per end.
func TestOlderSchedulerGetsOneCallPerEnd(t *testing.T) {
	sched := &scheduler{oldStyle: true}
	r, db := startRouter(t, sched)
	msgs := queueResults(t, db, 7, 8)
	r.drain(context.Background(), 3, keys.MsgOut, false)
	if len(sched.singles) != 2 {
		t.Fatalf("single reports %v: want 7 and 8", sched.singles)
	}
	for id, mk := range msgs {
		if st := messageStatus(t, mk); st != string(model.MessageProcessed) {
			t.Fatalf("job %d's result message is %q", id, st)
		}
	}
}

// Workers wait for wake tokens and claim in turn: a burst of results, one wake token
// each, is claimed once by one worker, not by every worker that took a token of the
// burst (the others would claim nothing, a round trip each).
func TestWorkersClaimABurstOnce(t *testing.T) {
	sched := &scheduler{}
	r, db := startRouter(t, sched)
	ids := make([]uint32, 20)
	tokens := make([]any, len(ids))
	for i := range ids {
		ids[i], tokens[i] = uint32(i+1), "3"
	}
	msgs := queueResults(t, db, ids...)
	ctx, cancel := context.WithCancel(context.Background())
	g := srv.Client(t, 0)
	g.LPush(ctx, keys.WakeMsgOut, tokens...)
	g.ConfigResetStat(ctx)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.worker(ctx)
		}()
	}
	deadline := time.Now().Add(time.Minute)
	for _, mk := range msgs {
		for messageStatus(t, mk) != string(model.MessageProcessed) {
			if time.Now().After(deadline) {
				t.Fatalf("%s was not delivered", mk)
			}
			time.Sleep(5 * time.Millisecond) // the workers run in other goroutines
		}
	}
	cancel()
	wg.Wait()
	sched.mu.Lock()
	defer sched.mu.Unlock()
	if len(sched.batches) != 1 || len(sched.batches[0]) != len(ids) {
		t.Fatalf("JobsDone calls %v: want one with all %d ends", sched.batches, len(ids))
	}
	stats := g.Info(context.Background(), "commandstats").Val()
	if !strings.Contains(stats, "cmdstat_fcall:calls=1,") {
		t.Fatalf("want one claim (fcall) for the burst; commandstats:\n%s", stats)
	}
	if n := g.LLen(context.Background(), keys.WakeMsgOut).Val(); n != 0 {
		t.Fatalf("%d wake tokens left after the burst was claimed", n)
	}
}

// A job request of several jobs that the claim cannot route whole (one job's type has
// no runner) is split into one request per job: the next claim routes the plain ones,
// and the one nobody can run fails and is reported to the scheduler.
func TestAGroupRequestIsSplitWhenOneJobCannotBeRouted(t *testing.T) {
	sched := &scheduler{}
	r, db := startRouter(t, sched)
	ctx := context.Background()
	rc := srv.Client(t, 3)
	f, jobs := startFlowOf(t, r, db, "sh", "v", "sh")
	ids := []uint32{jobs[0].ID, jobs[1].ID, jobs[2].ID}
	rc.HSet(ctx, "coord:script_types", "sh", 1)
	res, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0)
	if err != nil || res[0].MsgKey != res[2].MsgKey {
		t.Fatalf("dispatch: %+v %v", res, err)
	}
	if n := r.drain(ctx, 3, keys.MsgOut, false); n != 1 {
		t.Fatalf("first drain took %d messages, want the group", n)
	}
	if st := messageStatus(t, res[0].MsgKey); st != string(model.MessageProcessed) {
		t.Fatalf("group request is %q after the split", st)
	}
	// Each request of the split names its job (with the flow) and the job's global key.
	for k, mk := range rc.LRange(ctx, keys.MsgOut, 0, -1).Val() {
		id := ids[2-k] // newest first
		h := rc.HGetAll(ctx, mk).Val()
		if h["job"] != fmt.Sprintf(`[{"id":%d,"caller_id":1,"flow_id":%d}]`, id, f.ID) || h["message"] != fmt.Sprintf("job 3:1:%d", id) || h["job_ref"] != "1" {
			t.Fatalf("split request %s: %v", mk, h)
		}
	}
	if n := r.drain(ctx, 3, keys.MsgOut, false); n != 3 {
		t.Fatalf("second drain took %d, want the three requests of the split", n)
	}
	q := rc.LRange(ctx, "queue:sh", 0, -1).Val()
	if len(q) != 2 || q[1] != keys.Job(1, ids[0]) || q[0] != keys.Job(1, ids[2]) {
		t.Fatalf("queue:sh %v: want jobs %d and %d", q, ids[0], ids[2])
	}
	sched.mu.Lock()
	defer sched.mu.Unlock()
	var reported []uint32
	for _, b := range sched.batches {
		reported = append(reported, b...)
	}
	reported = append(reported, sched.singles...)
	if len(reported) != 1 || reported[0] != ids[1] {
		t.Fatalf("ends reported %v: want job %d's (no runner serves v)", reported, ids[1])
	}
}

// A group request that holds one job (the others of its dispatch were not ready) and
// cannot be routed is split too: its job then fails on its own path, reported.
func TestAGroupRequestOfOneJobIsSplit(t *testing.T) {
	sched := &scheduler{}
	r, db := startRouter(t, sched)
	ctx := context.Background()
	f, jobs := startFlowOf(t, r, db, "sh", "v")
	srv.Client(t, 3).HSet(ctx, "coord:script_types", "sh", 1)
	if _, err := db.DispatchMany(ctx, f.ID, 1, jobs[:1], "scheduler", 0); err != nil {
		t.Fatal(err)
	}
	res, err := db.DispatchMany(ctx, f.ID, 1, jobs, "scheduler", 0) // the first is dispatched already
	if err != nil || res[0].MsgKey != "" || res[1].MsgKey == "" {
		t.Fatalf("dispatch: %+v %v", res, err)
	}
	for range 3 {
		r.drain(ctx, 3, keys.MsgOut, false)
	}
	if st := messageStatus(t, res[1].MsgKey); st != string(model.MessageProcessed) {
		t.Fatalf("the one-job group request is %q, want split (processed)", st)
	}
	sched.mu.Lock()
	defer sched.mu.Unlock()
	if len(sched.batches) != 1 || len(sched.batches[0]) != 1 || sched.batches[0][0] != jobs[1].ID {
		t.Fatalf("ends reported %v: want job %d's (no runner serves v)", sched.batches, jobs[1].ID)
	}
}

// startFlowOf creates jobs of the script types (caller 1, context 3) in one flow and
// starts it; it returns the flow and its jobs as loaded.
func startFlowOf(t *testing.T, r *router, db *store.DB, types ...model.ScriptType) (*model.Flow, []*model.Job) {
	t.Helper()
	ctx := context.Background()
	var ids []uint32
	for _, typ := range types {
		j, _, err := r.store.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 3, Script: "true", ScriptType: typ}, "1")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	f, _, err := r.store.CreateFlow(ctx, &model.Flow{CallerID: 1, ContextID: 3, Jobs: ids}, "1")
	if err != nil {
		t.Fatal(err)
	}
	jobs, _ := storetest.StartFlow(t, db, f)
	return f, jobs
}

// The result messages a runner writes for standalone jobs name their jobs with the
// runs' ends (not the jobs): the router reports each end as the message names it.
func TestResultMessagesThatNameTheirJobsAreReported(t *testing.T) {
	sched := &scheduler{}
	r, db := startRouter(t, sched)
	ctx := context.Background()
	rc := srv.Client(t, 3)
	var fs []store.Finish
	for i := range 2 {
		j, _, err := r.store.CreateJob(ctx, &model.Job{CallerID: 1, ContextID: 3, Script: "true", ScriptType: "sh"}, "1")
		if err != nil {
			t.Fatal(err)
		}
		if _, _, _, _, err := db.Dispatch(ctx, 0, j, "1", 0); err != nil {
			t.Fatal(err)
		}
		rc.LPush(ctx, "queue:sh", keys.Job(1, j.ID))
		cl, out, started, err := db.ClaimStart(ctx, "queue:sh", "w1", time.Minute, "")
		if err != nil || out != store.StartRun {
			t.Fatalf("claim job %d: %v %v", j.ID, out, err)
		}
		o := store.JobOutcome{Status: model.JobFinished}
		if i == 1 {
			o = store.JobOutcome{Status: model.JobError, Error: "boom \"quoted\"", Fatal: true}
		}
		fs = append(fs, store.Finish{DB: db, Claim: cl, Job: started, Outcome: o})
	}
	rc.Del(ctx, keys.MsgOut) // the requests: this test drains the results alone
	if oks, errs := store.FinishJobs(ctx, fs); !oks[0] || !oks[1] || errs[0] != nil || errs[1] != nil {
		t.Fatalf("finish: %v %v", oks, errs)
	}
	for _, mk := range rc.LRange(ctx, keys.MsgOut, 0, -1).Val() {
		if js := rc.HGet(ctx, mk, "job").Val(); strings.Contains(js, "script") || rc.HGet(ctx, mk, "job_ref").Val() != "1" {
			t.Fatalf("result message %s carries its job: %s", mk, js)
		}
	}
	if n := r.drain(ctx, 3, keys.MsgOut, false); n != 2 {
		t.Fatalf("claimed %d of 2 results", n)
	}
	sched.mu.Lock()
	defer sched.mu.Unlock()
	if len(sched.ends) != 2 {
		t.Fatalf("ends told: %+v", sched.ends)
	}
	for i, e := range sched.ends {
		f := fs[i]
		if e.JobId != f.Job.ID || e.CallerId != 1 || e.Attempt != 1 || e.Status != string(f.Outcome.Status) || e.Error != f.Outcome.Error || e.Fatal != f.Outcome.Fatal {
			t.Fatalf("end %d told %+v, want job %d's %+v", i, e, f.Job.ID, f.Outcome)
		}
	}
}
