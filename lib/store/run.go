package store

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hero-coordinator/hero/lib/keys"
	"github.com/hero-coordinator/hero/lib/model"
)

// The runner's side of a job: start (after the claim), finish (with the ack and the
// result message, atomically), logs, and stop requests.

// StartOutcome says what a claimed job is to the runner.
type StartOutcome int

const (
	StartRun     StartOutcome = iota // run it
	StartGone                        // the job hash is gone: acked, nothing to do
	StartDone                        // already ended (a duplicate delivery): acked
	StartStopped                     // stop was requested before it started: finish it as stopped
	// StartRetaken: the job runs under an earlier claim of this consumer, whose lease
	// expired and was swept while no other claim took the job; that claim (Claim.ID)
	// holds it again, with a new lease. Nothing to start: the caller checks it still
	// runs the job under that claim, else releases it (ReleaseClaims).
	StartRetaken
	// StartHeld: held back by its concurrency key's rate (lua/lib_limit.lua): off the
	// queue, on the key's held list until its token comes; nothing to run.
	StartHeld
)

// Started is one job a ClaimStarts took.
type Started struct {
	Claim   *Claim
	Outcome StartOutcome // StartGone and StartDone: already acked, nothing to run
	Job     *model.Job   // nil for StartGone and StartDone
	Err     error        // the item could not be read (it is acked; Claim is set)
}

// ClaimStart claims the oldest job of a queue under a lease and marks it started, in
// one round trip: Claim and StartJob together. traceID (W3C, 32 hex digits) is stored
// as the job's trace_id, unless the job has a producer's traceparent (its trace id is). It returns a nil claim when the queue is empty; with
// StartGone or StartDone the item is already acked.
func (d *DB) ClaimStart(ctx context.Context, queue, consumer string, lease time.Duration, traceID string) (*Claim, StartOutcome, *model.Job, error) {
	got, err := d.ClaimStarts(ctx, queue, consumer, lease, []string{traceID}, Wake{})
	if err != nil || len(got) == 0 {
		return nil, StartGone, nil, err
	}
	return got[0].Claim, got[0].Outcome, got[0].Job, got[0].Err
}

// Wake names the wake list of a queue (in DB 0) and its token, for a claim that takes
// several items at once: the claim removes the tokens of the items it took beyond the
// one the caller holds (Held). A zero Wake leaves the tokens alone.
type Wake struct {
	Key, Token string
	Held       bool
}

func (w Wake) args() (key, token, held string) {
	if w.Key == "" {
		return keys.WakeNone, "", "-" // "-": the script leaves the tokens alone
	}
	if w.Held {
		return w.Key, w.Token, "1"
	}
	return w.Key, w.Token, "0"
}

// ClaimStarts claims up to len(traceIDs) jobs of a queue (oldest first) and marks
// each started, in one script; traceIDs[i] is stored as the i-th job's trace_id ("":
// none), unless the job has a producer's traceparent (then its trace id is). It returns what it took, in queue order (none when the queue is empty). An
// *UnansweredClaimError names the claims that may have been made but are not
// returned to run (the call's answer, or the started jobs' read, failed).
func (d *DB) ClaimStarts(ctx context.Context, queue, consumer string, lease time.Duration, traceIDs []string, w Wake) ([]Started, error) {
	given := traceIDs
	if !slices.ContainsFunc(given, func(t string) bool { return t != "" }) {
		given = nil // none: the call carries no list
	}
	return d.claimStarts(ctx, queue, consumer, lease, len(traceIDs), "", given, w)
}

// ClaimStartsFresh is ClaimStarts of up to max jobs, each started one with a fresh
// trace id of its own (its producer's when it handed one in): the trace id of its
// claim id (model.TraceOfClaim), which a read of the job derives and its hash does not
// store (issue 49: ~44 B of a finished job's listpack), not an id per slot (a
// runner's claim offers every free slot, most of which a claim under load does not
// fill).
func (d *DB) ClaimStartsFresh(ctx context.Context, queue, consumer string, lease time.Duration, max int, w Wake) ([]Started, error) {
	return d.claimStarts(ctx, queue, consumer, lease, max, "=", nil, w)
}

// MaxClaimStarts bounds the jobs of one claim call: a claim's id (and a fresh trace
// id) is its call's random stem and its index in two hex digits.
const MaxClaimStarts = 255

// claimStarts runs the claim script: up to max jobs, their trace ids from the stem
// tstem ("": from traces, by index; none given: none).
func (d *DB) claimStarts(ctx context.Context, queue, consumer string, lease time.Duration, max int, tstem string, traces []string, w Wake) ([]Started, error) {
	if max > MaxClaimStarts {
		return nil, fmt.Errorf("claim and start from %s of context %d: %d jobs in one call, at most %d", queue, d.ContextID, max, MaxClaimStarts)
	}
	now := time.Now()
	// The claims' ids: the call's stem and each item's index (the script makes the
	// same ones), so that they need not be sent.
	cstem := randomHex(7)
	claimIDs := make([]string, max)
	for i := range claimIDs {
		claimIDs[i] = cstem + indexHex(i+1)
	}
	wkey, wtoken, held := w.args()
	// What a start writes into the job besides its claim and trace ids (the script
	// spells the fields): its status, worker, start in microseconds only (started_at
	// and started_at_ms are derived from it when read) and updated_at.
	a := &claimStartArgs{QueueKey: queue, ProcKey: keys.Processing(consumer), LeasesKey: keys.Leases, EventsKey: keys.Events, WakeKey: wkey,
		Worker: consumer, Qname: queue, Exp: now.Add(lease).UnixMilli(), NowMs: now.UnixMilli(), NowUs: now.UnixMicro(), NowS: now.Unix(),
		Max: int64(max), Token: wtoken, Held: held, Ctx: u32str(d.ContextID), Clears: startClears, Cnonce: cstem, Tnonce: tstem, Traces: traces}
	res, err := a.run(ctx, d)
	if err != nil && err != redis.Nil {
		return nil, &UnansweredClaimError{ClaimIDs: claimIDs, Err: fmt.Errorf("claim and start from %s of context %d: %w", queue, d.ContextID, err)}
	}
	return d.claimed(ctx, queue, consumer, claimIDs, res)
}

// claimed reads the claim script's reply items (lua/lib_claim.lua's claim_run, of
// queue, for consumer, whose claims' ids are claimIDs; lua/claim_start.lua declares
// it): what each item became, and the started jobs as they are after their start.
func (d *DB) claimed(ctx context.Context, queue, consumer string, claimIDs []string, items []claimStartClaimed) ([]Started, error) {
	if len(items) > len(claimIDs) {
		return nil, fmt.Errorf("claim and start from %s of context %d: %d items in the reply, at most %d asked", queue, d.ContextID, len(items), len(claimIDs))
	}
	n := len(items)
	out := make([]Started, 0, n)
	run := make([]int, 0, n) // the items to read: started jobs
	var inline map[int]any   // the started jobs' hashes the reply holds, by item
	for i := 0; i < n; i++ {
		e := &items[i]
		c := &Claim{Queue: queue, Consumer: consumer, ID: claimIDs[i], Item: e.Item}
		st := Started{Claim: c, Outcome: StartGone}
		if _, _, err := keys.ParseJobKey(c.Item); err != nil {
			st.Err = fmt.Errorf("dropped queue item %q of %s: %w", c.Item, queue, err)
		} else if st.Outcome = StartOutcome(e.Code); st.Outcome == StartRetaken && e.X4 != nil {
			id, ok := e.X4.(string) // the earlier claim, which holds the job again
			if !ok {
				return nil, fmt.Errorf("claim and start from %s of context %d: item %d retaken under a claim id of %T", queue, d.ContextID, i, e.X4)
			}
			c.ID = id
		} else if st.Outcome == StartRun || st.Outcome == StartStopped {
			if e.X4 != nil {
				if inline == nil {
					inline = map[int]any{}
				}
				inline[len(out)] = e.X4
			}
			if e.X5 != nil {
				c.Reads = startReads(e.X5)
			}
			run = append(run, len(out))
		}
		out = append(out, st)
	}
	if len(run) == 0 {
		return out, nil
	}
	return d.startedJobs(ctx, queue, out, run, inline)
}

// startReads reads the claim reply's start reads {job_defaults, job_max, env_vars,
// dependency results…}.
func startReads(v any) *StartReads {
	l, _ := v.([]any)
	if len(l) < 3 {
		return nil
	}
	str := func(x any) string { s, _ := x.(string); return s }
	r := &StartReads{JobDefaults: str(l[0]), JobMax: str(l[1]), FlowEnv: str(l[2])}
	if len(l) > 3 {
		r.DepResults = make([]string, len(l)-3)
		for i, x := range l[3:] {
			r.DepResults[i] = str(x)
		}
	}
	return r
}

// startedJobs fills in the jobs of the items run of a claim's out, as they are after
// their start: from the claim's reply when it holds each one's hash (inline, by item:
// its DUMP; one HashFromDump does not read is read with HGETALL, in one round trip),
// else read in one round trip (readStarted). Each hash is decoded from its field/value
// items (model.FromHashPairs), with no map made of them.
func (d *DB) startedJobs(ctx context.Context, queue string, out []Started, run []int, inline map[int]any) ([]Started, error) {
	hashes := make([][]string, len(run))
	var err error
	if len(inline) == len(run) {
		var again []int // by index of run: dumps HashFromDump does not read
		for k, i := range run {
			if h, ok := inlinePairs(inline[i]); ok {
				hashes[k] = h
			} else {
				again = append(again, k)
			}
		}
		err = d.readHashes(ctx, out, run, again, hashes)
	} else {
		err = d.readStarted(ctx, out, run, hashes)
	}
	if err != nil {
		// Started and leased, but unread: the caller releases their claims.
		ids := make([]string, len(run))
		for k, i := range run {
			out[i].Outcome, out[i].Err = StartGone, fmt.Errorf("read started job %s: %w", out[i].Claim.Item, err)
			ids[k] = out[i].Claim.ID
		}
		return out, &UnansweredClaimError{ClaimIDs: ids, Err: fmt.Errorf("read started jobs of %s of context %d: %w", queue, d.ContextID, err)}
	}
	for k, i := range run {
		st := &out[i]
		h := hashes[k]
		if len(h) == 0 {
			// Deleted since its start (a forced delete): nothing to run; release it.
			st.Outcome = StartGone
			if err := d.Ack(ctx, st.Claim); err != nil {
				st.Err = fmt.Errorf("release the claim of deleted job %s: %w", st.Claim.Item, err)
			}
			continue
		}
		var j model.Job
		if err := model.FromHashPairs(st.Claim.Item, h, &j); err != nil {
			st.Outcome, st.Err = StartGone, fmt.Errorf("read started job %s: %w", st.Claim.Item, err)
			continue
		}
		if j.ContextID == 0 {
			j.ContextID = d.ContextID
		}
		st.Job = &j
	}
	return out, nil
}

// inlinePairs reads a started job's hash from the claim's reply as field/value items:
// its DUMP (lua/lib_claim.lua; HashFromDump), or its items. false: a dump this reader
// does not know (the job is read after the claim).
func inlinePairs(v any) ([]string, bool) {
	dump, ok := v.(string)
	if !ok {
		return flatPairs(v), true
	}
	if dump == "" {
		return nil, true // gone
	}
	pairs, err := startedFromDump(dump)
	if err != nil {
		return nil, false
	}
	return pairs, true
}

// readStarted reads the hashes of the started jobs run of out into hashes, as
// field/value items (by index of run; none: the job is gone), in one round trip: each one's DUMP, one
// string to read where HGETALL's reply is two of every field (HashFromDump; ~26
// fields a started handler job), read without a string of its own per item. A dump
// this reader does not know (another Redis's format) is read with HGETALL instead,
// in one more round trip.
// startedFromDump reads a started job's DUMP (HashFromDump; a test makes it fail).
var startedFromDump = HashFromDump

func (d *DB) readStarted(ctx context.Context, out []Started, run []int, hashes [][]string) error {
	dumps := make([]*redis.StringCmd, len(run))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range run {
			dumps[k] = p.Dump(ctx, out[i].Claim.Item)
		}
		return nil
	}); err != nil && err != redis.Nil {
		return err
	}
	var again []int // by index of run: dumps HashFromDump does not read
	for k, c := range dumps {
		dump := c.Val()
		if dump == "" {
			continue // gone
		}
		pairs, err := startedFromDump(dump)
		if err != nil {
			again = append(again, k)
			continue
		}
		hashes[k] = pairs
	}
	return d.readHashes(ctx, out, run, again, hashes)
}

// readHashes reads the hashes of the started jobs run[k] of out, for each k of again,
// into hashes[k] with HGETALL, as field/value items, in one round trip (none when
// again is empty).
func (d *DB) readHashes(ctx context.Context, out []Started, run, again []int, hashes [][]string) error {
	if len(again) == 0 {
		return nil
	}
	reads := make([]*redis.MapStringStringCmd, len(again))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for x, k := range again {
			reads[x] = p.HGetAll(ctx, out[run[k]].Claim.Item)
		}
		return nil
	}); err != nil && err != redis.Nil {
		return err
	}
	for x, k := range again {
		h := reads[x].Val()
		pairs := make([]string, 0, 2*len(h))
		for f, v := range h {
			pairs = append(pairs, f, v)
		}
		hashes[k] = pairs
	}
	return nil
}

// flatPairs reads a script's flat field/value list as strings.
func flatPairs(v any) []string {
	flat, _ := v.([]any)
	out := make([]string, len(flat))
	for i, x := range flat {
		out[i], _ = x.(string)
	}
	return out
}

// randomHex returns n random bytes as hex (math/rand: claim ids and trace ids need to
// differ, not to be secret; no system call).
func randomHex(n int) string {
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rand.Uint64())
	}
	return hex.EncodeToString(b[:n])
}

// indexHex is k (1 … 255) in two lowercase hex digits, as the claim script's
// string.format('%02x', k).
func indexHex(k int) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[k>>4&15], digits[k&15]})
}

// startClears are the fields of an earlier run's end that a start removes (of any
// attempt but a job's first, which has none: lua/claim_start.lua), so that the run's
// end writes only those it has.
var startClears = []string{"error", "exit_code", "finished_at", "finished_at_ms", "finished_at_us", "fatal", "retry_after_ms", "result_json"}

// JobOutcome is how a run ended.
type JobOutcome struct {
	Status     model.JobStatus // finished or error
	Error      string
	ExitCode   int
	Result     map[string]string
	ResultJSON json.RawMessage // a handler's result as returned (nil: none; the field is removed)
	Fatal      bool            // no retry (stopped, no interpreter, …)
	RetryAfter time.Duration   // an executor asked to be retried after this long
	Log        []byte          // appended to the job's log with the end (e.g. a handler call's header)
	LogMax     int             // the log's cap in bytes (0: MaxLogBytes)
	// StartedAt is when the run's process was about to run (zero: the claim's start,
	// started_at_us, stays): the job's started_at_us becomes it.
	StartedAt time.Time
}

// FinishJob records a run's end, acks the claim and pushes the result message
// (kind job_result) on msg_out, in one step. false: the job was not held by this
// worker any more (its lease was lost), nothing but the ack happened. Finishing again
// after an error (the answer may have been lost) is safe: a run whose end this claim
// wrote already answers true and writes nothing more.
func (d *DB) FinishJob(ctx context.Context, c *Claim, j *model.Job, o JobOutcome) (bool, error) {
	ok, errs := FinishJobs(ctx, []Finish{{DB: d, Claim: c, Job: j, Outcome: o}})
	return ok[0], errs[0]
}

// Finish is one run's end for FinishJobs.
type Finish struct {
	DB      *DB
	Claim   *Claim
	Job     *model.Job
	Outcome JobOutcome
	// Apply: when the run succeeded and its job is this node's own, apply its end here
	// too, as the router and the scheduler would (its flow node completes and the
	// dependents it makes ready are dispatched, or its standalone job ends), in the
	// same script (lua/finish_jobs.lua). A failed run goes the router's way; so does
	// every run before the scheduler recorded its settings (keys.SchedulerSettings),
	// and the end of what is kept for less than the scheduler's sweep interval.
	Apply bool
	// Take (with Apply): jobs waiting on a queue of Take.Queues (the one a dependent
	// that the run's end makes ready was routed to, else a queue of the runs that end)
	// are claimed and started for the finishing runner by the same script
	// (lua/finish_jobs.lua's take), when nothing else waits for the runner (no token on
	// its wake lists but this context's on that queue's): Applied.Taken holds them, to
	// run. Only the first call of a
	// FinishJobsApplied that holds a run with a Take takes.
	Take *Take
}

// Take is what a finishing runner offers to take at its runs' end (Finish.Take).
type Take struct {
	Worker   string        // the runner process (its processing list holds the runs that end)
	RunnerID uint32        // its runner id (its wake lists)
	Queues   []string      // the queues it serves
	Max      int           // the slots it offers (1 … MaxTake)
	Lease    time.Duration // the claims' lease
}

// MaxTake bounds Take.Max: a finish takes at most that many jobs for its runner, as a
// claim does under load (the script's reply holds their hashes: lua/lib_claim.lua's
// INLINE_READS). Under a backlog a finish's runs (~10-15 in
// BenchmarkPeers (a)) pass all their slots on: with 8, Redis and the runner spent ~10%
// more CPU a job than with the claims alone (docs/benchmarks.md, "The take").
const MaxTake = 32

// Taken is what a take claimed (Applied.Taken): Started as ClaimStarts returns them,
// in DB. Err: the call's answer was lost, or a started job could not be read (an
// *UnansweredClaimError names the claims to release).
type Taken struct {
	DB      *DB
	Started []Started
	Err     error
}

// Applied is what FinishJobsApplied's runs applied themselves (Finish.Apply).
type Applied struct {
	Ends       int                // runs whose end was applied to its flow or standalone job
	Dispatched int                // dependents dispatched
	FlowsEnded []model.FlowStatus // the flows that ended, by final status
	Taken      *Taken             // what a take claimed (Finish.Take; nil: no take was offered)
}

// FinishJobs is FinishJob for several runs, one round trip per database. The runs of
// one flow (of one consumer) that end together are recorded by one script, atomically,
// and share one result message, whose job list names each finished job: the router
// reports them to the scheduler together. The runs of standalone jobs (of one caller
// and consumer) that end together are recorded by one script too, each with a result
// message of its own. A run of a job that came from another node (its result goes back
// there) has a script run and a message of its own. It returns FinishJob's answer per
// run.
func FinishJobs(ctx context.Context, fs []Finish) ([]bool, []error) {
	oks, errs, _ := FinishJobsApplied(ctx, fs)
	return oks, errs
}

// FinishJobsApplied is FinishJobs that also says what the runs with Apply applied.
func FinishJobsApplied(ctx context.Context, fs []Finish) ([]bool, []error, Applied) {
	oks, errs := make([]bool, len(fs)), make([]error, len(fs))
	var applied Applied
	type groupKey struct {
		ctxID, flow, caller uint32
		consumer            string
		solo                int // > 0: a run of its own (its index + 1)
		apply               bool
	}
	groups := map[groupKey][]int{}
	var order []groupKey
	dbs := map[uint32]*DB{}
	for i, f := range fs {
		k := groupKey{ctxID: f.DB.ContextID, flow: f.Job.FlowID, caller: f.Job.CallerID, consumer: f.Claim.Consumer, apply: f.Apply}
		if f.Job.Origin != nil {
			k.solo = i + 1
		}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
			groups[k] = make([]int, 0, min(len(fs)-i, 32)) // most finishes are of one group
		}
		groups[k] = append(groups[k], i)
		dbs[f.DB.ContextID] = f.DB
	}
	// One pipeline per database, in the order the databases first appear.
	var dbOrder []uint32
	calls := map[uint32][]Call{}
	members := map[uint32][][]int{}
	var tk *takeCall // the call that takes (Finish.Take), if any
	for _, k := range order {
		if _, seen := calls[k.ctxID]; !seen {
			dbOrder = append(dbOrder, k.ctxID)
		}
		for _, idx := range finishParts(groups[k], k.apply && k.flow != 0) {
			// The take goes with the first call that holds a run offering one.
			var t *takeCall
			if tk == nil && k.apply && applies(fs, idx) {
				if off := offeredTake(fs, idx); off != nil {
					t = newTakeCall(dbs[k.ctxID], off, k.ctxID, len(calls[k.ctxID]))
					tk = t
				}
			}
			calls[k.ctxID] = append(calls[k.ctxID], finishCall(dbs[k.ctxID], fs, idx, t))
			members[k.ctxID] = append(members[k.ctxID], idx)
		}
	}
	for _, ctxID := range dbOrder {
		cmds := dbs[ctxID].EvalBatch(ctx, calls[ctxID])
		for g, idx := range members[ctxID] {
			res, err := cmds[g].Result()
			if tk != nil && tk.ctxID == ctxID && tk.g == g {
				vals, _ := res.([]any)
				applied.Taken = tk.taken(ctx, vals, len(idx), err)
			}
			finishReply(fs, idx, res, err, oks, errs, &applied)
		}
	}
	return oks, errs, applied
}

// finishReply records one finish call's answer for its runs idx: each run's ok or
// error (oks, errs), and the summary of the ends it applied.
func finishReply(fs []Finish, idx []int, res any, err error, oks []bool, errs []error, applied *Applied) {
	vals, _ := res.([]any)
	if err == nil && len(vals) == len(idx)+1 && applies(fs, idx) {
		applied.add(vals[len(idx)])
		vals = vals[:len(idx)]
	}
	if err == nil && len(vals) != len(idx) {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	for k, i := range idx {
		if err != nil {
			errs[i] = fmt.Errorf("finish job %s: %w", fs[i].Job.GlobalKey(), err)
			continue
		}
		n, _ := vals[k].(int64)
		oks[i] = n == 1 || n == 2
	}
}

// applies reports whether the finish script's run for fs[idx] applies the runs' ends
// itself (its ARGV complete): runs with Apply of this node's own jobs.
func applies(fs []Finish, idx []int) bool {
	f := fs[idx[0]]
	return f.Apply && f.Job.Origin == nil
}

// add counts the finish script's summary {runs applied, dispatched, flow status[,
// take]}.
func (a *Applied) add(v any) {
	s, _ := v.([]any)
	if len(s) != 3 && len(s) != 4 {
		return
	}
	n, _ := s[0].(int64)
	d, _ := s[1].(int64)
	a.Ends += int(n)
	a.Dispatched += int(d)
	if st, _ := s[2].(string); st != "" {
		a.FlowsEnded = append(a.FlowsEnded, model.FlowStatus(st))
	}
}

// finishApplyRuns bounds the runs of one flow that one finish call applies: each
// completes its node, makes its dependents ready and dispatches them (~29 Redis
// commands a run of BenchmarkBigFlowLifecycle's flow, two dependents each), so that a
// call stays well under the 10 ms no Redis command may take (issue 49: calls of up to
// 64 such runs took up to 11.1 ms in the 100,000-job flow, of 32 up to 10.1 ms, idle).
// The calls of one finish go in one round trip all the same.
const finishApplyRuns = 24

// finishParts cuts the runs idx of one group into the calls that record them: those
// whose flow ends the call applies (apply) in parts of at most finishApplyRuns, the
// others in one.
func finishParts(idx []int, apply bool) [][]int {
	if !apply || len(idx) <= finishApplyRuns {
		return [][]int{idx}
	}
	var out [][]int
	for len(idx) > 0 {
		n := min(len(idx), finishApplyRuns)
		out = append(out, idx[:n:n])
		idx = idx[n:]
	}
	return out
}

// finishCall builds the finish script's run for the runs fs[idx] (one flow, or no
// flow, caller and consumer of one database): the runs of a flow share a message when
// there are several, any other has its own.
func finishCall(d *DB, fs []Finish, idx []int, tk *takeCall) Call {
	now := time.Now()
	first := fs[idx[0]]
	j0, c0 := first.Job, first.Claim
	shared := len(idx) > 1 && j0.FlowID != 0
	// A job of this node's own gets a result message that names it (jobRef, with the
	// run's end); the result of a job that came from another node goes back there and
	// carries the finished job (seed 001's Message.job).
	named := j0.Origin == nil
	var msg []any
	if named {
		text := "" // a message of its own: the script writes "result of job <ctx>:<caller>:<id>"
		if shared {
			text = fmt.Sprintf("results of %d jobs of flow %d", len(idx), j0.FlowID)
		}
		msg = resultFields(d.ContextID, j0.CallerID, j0.FlowID, text, now)
	} else {
		m := model.Message{
			CallerID: j0.CallerID, ContextID: d.ContextID, MessageType: model.MessageTypeJob, MessageFormatType: model.FormatText,
			Status:    model.MessageDispatched,
			CreatedAt: now.Unix(), UpdatedAt: now.Unix(), CreatedAtMs: now.UnixMilli(), FlowID: j0.FlowID, Kind: model.KindJobResult,
		}
		skip := []string{"id", "job", "message"} // a message of its own: the script writes its text
		if shared {
			m.Message, skip = fmt.Sprintf("results of %d jobs of flow %d", len(idx), j0.FlowID), skip[:2]
		}
		msg = withoutFields(model.HashFields(&m), skip...)
	}
	logMax := first.Outcome.LogMax
	if logMax <= 0 {
		logMax = MaxLogBytes
	}
	apply := applies(fs, idx)
	var request []any // the dependents' request message, when the script applies a flow's ends
	if apply && j0.FlowID != 0 {
		request = groupFields(d.ContextID, j0.FlowID, j0.CallerID, now, 0)
	}
	a := &finishJobsArgs{ProcKey: keys.Processing(c0.Consumer), LeasesKey: keys.Leases, MsgOutKey: keys.MsgOut, EventsKey: keys.Events,
		NowS: now.Unix(), NowMs: now.UnixMilli(), Ctx: int64(d.ContextID), Caller: int64(j0.CallerID), Logmax: int64(logMax), Grouped: shared,
		NowUs: now.UnixMicro(), Apply: apply, Request: request, Result: msg, Glist: "", Runs: make([]finishJobsRun, 0, len(idx))}
	if apply && j0.FlowID != 0 {
		a.DagKey, a.FlowKey, a.ResultsKey = keys.DAG(j0.FlowID), keys.Flow(j0.FlowID), keys.FlowResults(j0.FlowID)
	}
	var list []byte // grouped: the message's job list, built as the runs are added
	for _, i := range idx {
		f := fs[i]
		j, c, o := f.Job, f.Claim, f.Outcome
		js := finishedJSON(j, o, now, named)
		var item any = js
		if shared {
			list = append(append(list, listSep(list)), js...)
			item = strconv.Itoa(len(list)-len(js)+1) + " " + strconv.Itoa(len(list))
		}
		a.Runs = append(a.Runs, finishJobsRun{JobKey: keys.Job(j.CallerID, j.ID), Member: c.member(), Claim: c.ID, ID: int64(j.ID), Flow: int64(j.FlowID),
			Status: string(o.Status), Result: resultField(o.Result), Entry: item, Extra: runExtra(j, o)})
	}
	if shared {
		a.Glist = append(list, ']')
	}
	if tk != nil {
		tk.args(a, now)
	}
	return a.call()
}

// offeredTake is the take offered by one of the runs fs[idx], or nil.
func offeredTake(fs []Finish, idx []int) *Take {
	for _, i := range idx {
		if t := fs[i].Take; t != nil && t.Max > 0 && len(t.Queues) > 0 {
			return t
		}
	}
	return nil
}

// takeCall is the take of one finish call (the g-th call of context ctxID).
type takeCall struct {
	db       *DB
	t        *Take
	ctxID    uint32
	g        int
	max      int
	claimIDs []string
}

func newTakeCall(d *DB, t *Take, ctxID uint32, g int) *takeCall {
	tc := &takeCall{db: d, t: t, ctxID: ctxID, g: g, max: min(t.Max, MaxTake)}
	stem := randomHex(7)
	tc.claimIDs = make([]string, tc.max)
	for i := range tc.claimIDs {
		tc.claimIDs[i] = stem + indexHex(i+1)
	}
	return tc
}

// args sets the finish script's take arguments.
func (tc *takeCall) args(a *finishJobsArgs, now time.Time) {
	a.Take = int64(tc.max)
	a.Tworker = tc.t.Worker
	a.Texp = now.Add(tc.t.Lease).UnixMilli()
	a.Tnonce = tc.claimIDs[0][:len(tc.claimIDs[0])-2]
	a.Tqueues = tc.t.Queues
	a.Twakes = make([]string, len(tc.t.Queues))
	for i, q := range tc.t.Queues {
		a.Twakes[i] = keys.WakeRunner(tc.t.RunnerID, q)
	}
	a.Tclears = startClears
}

// taken reads the take's part of the finish call's reply vals (nruns runs' answers,
// then the summary {applied, dispatched, flow status[, {queue, claim reply}]}).
func (tc *takeCall) taken(ctx context.Context, vals []any, nruns int, err error) *Taken {
	out := &Taken{DB: tc.db}
	if err != nil {
		// Claims may have been made: the caller releases them.
		out.Err = &UnansweredClaimError{ClaimIDs: tc.claimIDs, Err: fmt.Errorf("finish and take in context %d: %w", tc.ctxID, err)}
		return out
	}
	if len(vals) != nruns+1 {
		return out
	}
	sum, _ := vals[nruns].([]any)
	if len(sum) != 4 {
		return out // nothing taken
	}
	tv, _ := sum[3].([]any)
	if len(tv) != 2 {
		out.Err = fmt.Errorf("finish and take in context %d: unexpected take %v", tc.ctxID, sum[3])
		return out
	}
	q, _ := tv[0].(string)
	// (the take's claim reply is lua/claim_start.lua's: lib_claim's claim_run makes both)
	cl, derr := decodeClaimStartReply(tv[1])
	if derr != nil {
		// Claims may have been made: the caller releases them.
		out.Err = &UnansweredClaimError{ClaimIDs: tc.claimIDs, Err: fmt.Errorf("finish and take in context %d: %w", tc.ctxID, derr)}
		return out
	}
	out.Started, out.Err = tc.db.claimed(ctx, q, tc.t.Worker, tc.claimIDs, cl)
	for _, st := range out.Started {
		st.Claim.Taken = true
	}
	return out
}

// runExtra is a run's items for the finish script that are not their defaults (its
// extra: name/value pairs; a successful run of a job without limits has none).
func runExtra(j *model.Job, o JobOutcome) []any {
	var x []any
	if o.Error != "" {
		x = append(x, "err", o.Error)
	}
	if o.ExitCode != 0 {
		x = append(x, "code", strconv.Itoa(o.ExitCode))
	}
	if len(o.ResultJSON) > 0 {
		x = append(x, "rjson", string(o.ResultJSON))
	}
	if o.Fatal {
		x = append(x, "fatal", "1")
	}
	if ms := o.RetryAfter.Milliseconds(); ms > 0 {
		x = append(x, "retry_after", strconv.FormatInt(ms, 10))
	}
	if len(o.Log) > 0 {
		x = append(x, "chunk", o.Log)
	}
	if !o.StartedAt.IsZero() {
		x = append(x, "started", strconv.FormatInt(o.StartedAt.UnixMicro(), 10))
	}
	if j.ConcurrencyKey != "" {
		x = append(x, "ck", j.ConcurrencyKey)
	}
	if j.Limited {
		x = append(x, "lim", "1")
	}
	if j.Awaited && awaitedSize(j, o) <= maxAwaitedBytes {
		x = append(x, "await", "1")
	}
	return x
}

// maxAwaitedBytes bounds the job an awaited end is told with (its hash's DUMP, in a
// coord:jobdone notice): a larger one is told by reference, and its job.run call reads
// it (the script's own bound, AWAITED_MAX, is on the DUMP, made by then).
const maxAwaitedBytes = 16 << 10

// awaitedSize is about how large j's hash is once o ended it: its largest fields.
func awaitedSize(j *model.Job, o JobOutcome) int {
	n := len(j.Script) + len(j.Args) + len(j.Kwargs) + len(o.ResultJSON) + len(o.Error)
	for k, v := range j.EnvVars {
		n += len(k) + len(v)
	}
	for k, v := range o.Result {
		n += len(k) + len(v)
	}
	return n
}

// finishedJSON is what a result message lists for the run of j that ended with o: a
// jobRef with the end when named, else the finished job (without its script).
func finishedJSON(j *model.Job, o JobOutcome, now time.Time, named bool) []byte {
	if named {
		if ref, ok := plainResultRef(j, o.Status, o.Error, o.Fatal); ok {
			return ref
		}
		return resultRef(j, o.Status, o.Error, o.Fatal)
	}
	result := o.Result
	if result == nil {
		result = map[string]string{}
	}
	final := *j
	final.Status, final.Error, final.ExitCode, final.Result, final.ResultJSON, final.Fatal = o.Status, o.Error, o.ExitCode, result, o.ResultJSON, o.Fatal
	final.FinishedAt, final.FinishedAtMs, final.FinishedAtUs = now.Unix(), now.UnixMilli(), now.UnixMicro()
	if !o.StartedAt.IsZero() {
		final.StartedAt, final.StartedAtMs, final.StartedAtUs = o.StartedAt.Unix(), o.StartedAt.UnixMilli(), o.StartedAt.UnixMicro()
	}
	final.Script = "" // the result message does not need to carry the source again
	js, err := json.Marshal(&final)
	if err != nil {
		js = []byte("{}") // a job is plain data; cannot happen
	}
	return js
}

// plainResultRef is resultRef's JSON written directly for a run's end without an
// error text and of a status of plain letters (a successful run's: every run of a
// busy runner), without encoding/json's reflection; false: another end, which
// resultRef writes.
func plainResultRef(j *model.Job, st model.JobStatus, errText string, fatal bool) ([]byte, bool) {
	if errText != "" || strings.ContainsFunc(string(st), func(r rune) bool { return (r < 'a' || r > 'z') && r != '_' }) {
		return nil, false
	}
	b := make([]byte, 0, 48+len(st))
	b = strconv.AppendUint(append(b, `{"id":`...), uint64(j.ID), 10)
	if j.Attempt != 0 {
		b = strconv.AppendUint(append(b, `,"attempt":`...), uint64(j.Attempt), 10)
	}
	if st != "" {
		b = append(append(append(b, `,"status":"`...), st...), '"')
	}
	if fatal {
		b = append(b, `,"fatal":true`...)
	}
	return append(b, '}'), true
}

// resultField is a run's result map as the job's result field stores it (none: "{}").
func resultField(result map[string]string) string {
	if len(result) == 0 {
		return "{}"
	}
	return model.EncodeField(result)
}

// resultFields are the fields of a job result message of this node's own jobs that
// the finish script stores (text "": none, the script writes the text of a message
// of its own), and its jobRef mark: localMessageFields's of the same model.Message,
// written directly instead of through its reflection (TestResultFieldsAsLocalMessage).
func resultFields(ctxID, callerID, flowID uint32, text string, now time.Time) []any {
	out := make([]any, 0, 18)
	out = append(out, "status", string(model.MessageDispatched), "caller_id", u32str(callerID), "context_id", u32str(ctxID))
	if text != "" {
		out = append(out, "message", text)
	}
	out = append(out, "updated_at", i64s(now.Unix()))
	if flowID != 0 {
		out = append(out, "flow_id", u32str(flowID))
	}
	return append(out, "kind", string(model.KindJobResult), "created_at_ms", i64s(now.UnixMilli()), fieldJobRef, "1")
}

// MaxLogBytes caps a job's stored log by default.
const MaxLogBytes = 4 << 20

// AppendLog appends to a job's log (bounded).
func (d *DB) AppendLog(ctx context.Context, callerID, id uint32, chunk []byte, max int) error {
	if max <= 0 {
		max = MaxLogBytes
	}
	ref := model.JobRef{ContextID: d.ContextID, CallerID: callerID, ID: id}.String()
	_, err := (&appendLogArgs{LogKey: keys.JobLog(callerID, id), WatchKey: keys.JobLogWatch(callerID, id), Chunk: string(chunk), Max: int64(max), Ref: ref}).run(ctx, d)
	return err
}

// WatchLog marks a job's log as tailed for ttl: until then each append to it
// publishes the job's reference on keys.LogAppended (AppendLog). A tail renews it
// before it passes.
func (d *DB) WatchLog(ctx context.Context, callerID, id uint32, ttl time.Duration) error {
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, keys.JobLogWatch(callerID, id), "1", ttl)
		return nil
	}); err != nil {
		return fmt.Errorf("watch the log of job %d:%d: %w", callerID, id, err)
	}
	return nil
}

// ReadLog returns a job's log from offset (at most limit bytes) and the next offset.
func (d *DB) ReadLog(ctx context.Context, callerID, id uint32, offset, limit int64) ([]byte, int64, error) {
	if offset < 0 {
		offset = 0
	}
	if limit <= 0 {
		limit = 1 << 20
	}
	var cmd *redis.StringCmd
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.GetRange(ctx, keys.JobLog(callerID, id), offset, offset+limit-1)
		return nil
	}); err != nil {
		return nil, offset, fmt.Errorf("read log of job %d:%d: %w", callerID, id, err)
	}
	b := []byte(cmd.Val())
	return b, offset + int64(len(b)), nil
}

// RequestStop marks a job to be stopped. If a worker runs it, the worker's control list
// in DB 0 gets the request. It returns the worker ("" if none) and the job's status.
func (d *DB) RequestStop(ctx context.Context, callerID, id uint32, actor string) (worker string, status model.JobStatus, err error) {
	j, err := d.LoadJob(ctx, callerID, id)
	if err != nil {
		return "", "", err
	}
	if j.Status.Terminal() {
		return "", j.Status, nil
	}
	now := time.Now()
	_, err = d.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, keys.Job(callerID, id), "stop_requested", "1", "updated_at", now.Unix())
		AddEvent(ctx, p, &Event{Type: string(model.EventJobStopRequested), Actor: actor, FlowID: j.FlowID, JobID: id, CallerID: callerID, Status: string(j.Status)})
		if j.Status == model.JobStarted && j.Worker != "" {
			p.Select(ctx, 0)
			p.LPush(ctx, keys.StopList(j.Worker), model.JobRef{ContextID: d.ContextID, CallerID: callerID, ID: id}.String())
			p.Expire(ctx, keys.StopList(j.Worker), time.Hour)
		}
		return nil
	})
	if err != nil {
		return "", "", fmt.Errorf("stop job %d:%d: %w", callerID, id, err)
	}
	if j.Status == model.JobStarted {
		return j.Worker, j.Status, nil
	}
	return "", j.Status, nil
}
