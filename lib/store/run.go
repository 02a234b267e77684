package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
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
)

// claimStartScript claims up to max jobs from the consuming end of a queue and marks
// each started, in one round trip: KEYS queue, processing list, leases, events, the
// queue's wake list of the claiming runner id (keys.WakeRunner, DB 0); ARGV worker,
// queue name, lease expiry ms, now_ms, max, wake token (the context id), tokens held
// (0 or 1; "-": leave the tokens alone), n, then n
// field/value items that every start sets, the count of fields a start clears and
// those fields, then max pairs of (claim id, trace id) (ClaimStarts builds the lists).
// A job that has a producer's traceparent keeps that trace: its trace id is stored
// instead of the pair's.
// The claim id is written into the job: only this run may finish it (a job queued
// again while a first run of it ends is run anew). It returns one {item, code,
// attempt} per item claimed (none when the queue is empty); the caller reads the
// started jobs' hashes after it, with plain HGETALLs (moving a ~30-field hash through
// Lua and back cost this script a third of its work). An item that is no job key, a
// job that is gone (code 1), a job that already ended (code 2) and a job that runs under
// a claim that still holds it (a duplicate queue entry: code 2) are dropped from the
// processing list at once.
//
// Producers push up to WakeSpread tokens per push (LuaWake). After the claim the
// context's tokens on the wake list are set anew: none when the queue is empty (stale
// tokens, a group's or another runner's leftovers, wake no one for nothing), else as
// many as were left uncovered by the items claimed, at least one and at most
// WakeSpread, at the list's tail: a context with jobs left always keeps a token (no job
// waits for the idle claim), and goes behind the other contexts waiting on the list
// (a backlog of one context does not hold back the others).
var claimStartScript = newLibScript(`
local proc, leases, ek = KEYS[2], KEYS[3], KEYS[4]
local worker, qname, exp, now_ms, max = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local nset = tonumber(ARGV[8])
local common = {}
for i = 9, 8 + nset do common[#common + 1] = ARGV[i] end
local nclear = tonumber(ARGV[9 + nset])
-- The fields this script reads: eight, then the ones a start clears.
local want = {'status', 'attempt', 'worker', 'flow_id', 'id', 'caller_id', 'stop_requested', 'traceparent'}
for i = 10 + nset, 9 + nset + nclear do want[#want + 1] = ARGV[i] end
local slots = 10 + nset + nclear
local out = {}
for n = 1, max do
  local item = redis.call('LMOVE', KEYS[1], proc, 'RIGHT', 'LEFT')
  if not item then break end
  local claim, trace = ARGV[slots + 2 * (n - 1)], ARGV[slots + 2 * (n - 1) + 1]
  local member = worker .. '\t' .. qname .. '\t' .. item .. '\t' .. claim
  redis.call('ZADD', leases, exp, member)
  local v = {}
  if string.match(item, '^job:%d+:%d+$') then v = redis.call('HMGET', item, unpack(want)) end
  local st = v[1]
  -- A job started under a claim that still holds it (in its consumer's processing
  -- list: a lease's expiry takes it out of there first) is running: this queue entry
  -- is a duplicate, and starting it would run the job twice at once.
  if st == 'started' and v[3] then
    local held = redis.call('LPOS', 'coord:proc:' .. v[3], item, 'COUNT', 2)
    if #held > 1 or (#held == 1 and v[3] ~= worker) then st = 'duplicate' end
  end
  if not st or st == 'finished' or st == 'error' or st == 'duplicate' then
    redis.call('LREM', proc, 1, item)
    redis.call('ZREM', leases, member)
    if st then out[#out + 1] = {item, 2, 0} else out[#out + 1] = {item, 1, 0} end
  else
    local attempt = v[2] or '1'
    local prev = v[3]
    local flow = v[4] or '0'
    local id = v[5] or ''
    local caller = v[6] or ''
    local set = {'claim', claim}
    for i = 1, #common do set[#set + 1] = common[i] end
    if v[8] and #v[8] == 55 then trace = string.sub(v[8], 4, 35) end -- the producer's trace
    if trace ~= '' then set[#set + 1] = 'trace_id'; set[#set + 1] = trace end
    local clear = {}
    for i = 9, #want do if v[i] then clear[#clear + 1] = want[i] end end
    redis.call('HSET', item, unpack(set))
    index_job(caller .. ':' .. id, st, 'started')
    if #clear > 0 then redis.call('HDEL', item, unpack(clear)) end
    if flow ~= '0' and flow ~= '' then
      local dag = 'coord:dag:' .. flow
      if redis.call('HGET', dag, 's:' .. id) == 'dispatched' then redis.call('HSET', dag, 's:' .. id, 'running') end
    end
    local detail = 'attempt ' .. attempt .. ' on ' .. worker
    if st == 'started' and prev and prev ~= worker then detail = detail .. ' (taken over from ' .. prev .. ')' end
    redis.call('XADD', ek, 'MAXLEN', '~', ` + strconv.Itoa(EventsMaxLen) + `, '*', 'type', 'job.started', 'actor', 'runner', 'time_ms', now_ms, 'flow_id', flow, 'job_id', id, 'caller_id', caller, 'status', 'started', 'detail', detail)
    local code = 0
    if v[7] == '1' then code = 3 end
    out[#out + 1] = {item, code, tonumber(attempt) or 1}
  end
end
if ARGV[7] ~= '-' then
  local left = redis.call('LLEN', KEYS[1])
  redis.call('SELECT', 0)
  local have = redis.call('LREM', KEYS[5], 0, ARGV[6])
  local keep = math.min(left, math.max(have + tonumber(ARGV[7]) - #out, 1), ` + strconv.Itoa(WakeSpread) + `)
  if keep > 0 then
    local t = {}
    for i = 1, keep do t[i] = ARGV[6] end
    redis.call('RPUSH', KEYS[5], unpack(t))
  end
end
return out
`)

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
		return "coord:wake:none", "", "-" // "-": the script leaves the tokens alone
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
	now := time.Now()
	// What a start writes into the job besides its claim and trace ids.
	secs := strconv.FormatInt(now.Unix(), 10)
	set := []string{"status", string(model.JobStarted), "worker", consumer,
		"started_at", secs, "started_at_ms", strconv.FormatInt(now.UnixMilli(), 10), "started_at_us", strconv.FormatInt(now.UnixMicro(), 10), "updated_at", secs}
	claimIDs := make([]string, len(traceIDs))
	wkey, wtoken, held := w.args()
	args := make([]any, 0, 10+len(set)+len(startClears)+2*len(traceIDs))
	args = append(args, consumer, queue, now.Add(lease).UnixMilli(), now.UnixMilli(), len(traceIDs), wtoken, held, len(set))
	for _, v := range set {
		args = append(args, v)
	}
	args = append(args, len(startClears))
	for _, v := range startClears {
		args = append(args, v)
	}
	for i, t := range traceIDs {
		claimIDs[i] = newClaimID()
		args = append(args, claimIDs[i], t)
	}
	res, err := d.Eval(ctx, claimStartScript, []string{queue, keys.Processing(consumer), keys.Leases, keys.Events, wkey}, args...)
	if err != nil && err != redis.Nil {
		return nil, &UnansweredClaimError{ClaimIDs: claimIDs, Err: fmt.Errorf("claim and start from %s of context %d: %w", queue, d.ContextID, err)}
	}
	vals, _ := res.([]any)
	out := make([]Started, 0, len(vals))
	var run []int // the items to read: started jobs
	for i, v := range vals {
		e, _ := v.([]any)
		if len(e) != 3 {
			return out, fmt.Errorf("claim and start from %s of context %d: unexpected reply %v", queue, d.ContextID, res)
		}
		c := &Claim{Queue: queue, Consumer: consumer, ID: claimIDs[i]}
		c.Item, _ = e[0].(string)
		st := Started{Claim: c, Outcome: StartGone}
		code, _ := e[1].(int64)
		if _, _, err := keys.ParseJobKey(c.Item); err != nil {
			st.Err = fmt.Errorf("dropped queue item %q of %s: %w", c.Item, queue, err)
		} else if st.Outcome = StartOutcome(code); st.Outcome == StartRun || st.Outcome == StartStopped {
			run = append(run, len(out))
		}
		out = append(out, st)
	}
	if len(run) == 0 {
		return out, nil
	}
	// The started jobs as they are now (with this start's changes), in one round trip.
	reads := make([]*redis.MapStringStringCmd, len(run))
	if _, err := d.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, i := range run {
			reads[k] = p.HGetAll(ctx, out[i].Claim.Item)
		}
		return nil
	}); err != nil && err != redis.Nil {
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
		h, err := reads[k].Result()
		if err == nil && len(h) == 0 {
			// Deleted since its start (a forced delete): nothing to run; release it.
			st.Outcome = StartGone
			if err := d.Ack(ctx, st.Claim); err != nil {
				st.Err = fmt.Errorf("release the claim of deleted job %s: %w", st.Claim.Item, err)
			}
			continue
		}
		var j model.Job
		if err == nil {
			err = model.FromHash(st.Claim.Item, h, &j)
		}
		if err != nil {
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

// startClears are the fields of an earlier run's end that a start removes.
var startClears = []string{"error", "exit_code", "finished_at", "finished_at_ms", "finished_at_us"}

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
}

// finishJobsScript records the ends of runs of one context DB and pushes their result
// message(s): KEYS processing list, leases, msg_out, events; ARGV now_s, now_ms, ctx,
// caller, log cap, grouped (1: one result message for all the runs that end here,
// 0: one each), now_us (the end's time in microseconds), n, then n field/value items of the result message (all but its id and
// job), then, when grouped, the message's job list (every run's finished job, as a JSON
// array), then per run 14 items: job key, lease member, claim id, job id, flow id,
// status, error, exit code, result JSON (the string map), the handler's result_json
// ("": none, the field is removed), fatal, retry-after ms, log chunk, and the
// finished job's JSON for its own message, or, grouped, where it starts and ends in the
// list ("<start> <end>", 1-based, inclusive): the message lists the runs that
// finished, the list as given when all did. Only the run that holds the job's current
// claim can finish it; a second finish changes nothing but the ack. It returns per
// run 1 (written), 2 (written before by this claim: a retry after a lost answer) or 0
// (the claim is not the job's any more).
var finishJobsScript = newLibScript(`
local proc, leases, mo, ek = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local now_s, now_ms, ctx, caller, logmax, grouped, now_us = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5]), ARGV[6] == '1', ARGV[7]
local nf = tonumber(ARGV[8])
local first, last = 9, 8 + nf
local runs = last + 1
local glist = ''
if grouped then glist = ARGV[runs]; runs = runs + 1 end
local out, done, ids = {}, {}, {}
local gflow -- the flow of the runs that share one message (one flow per call)
local pushed = 0
local function push(mk)
  redis.call('LPUSH', mo, mk)
  pushed = pushed + 1
end
for i = runs, #ARGV, 14 do
  local jk, member, claim, id, flow, status, err = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6]
  local code, result, rjson, fatal, retry_after, chunk = ARGV[i + 7], ARGV[i + 8], ARGV[i + 9], ARGV[i + 10], tonumber(ARGV[i + 11]), ARGV[i + 12]
  redis.call('LREM', proc, 1, jk)
  redis.call('ZREM', leases, member)
  local cur = redis.call('HMGET', jk, 'claim', 'status', 'error', 'fatal', 'retry_after_ms')
  if cur[1] == claim and (cur[2] == 'finished' or cur[2] == 'error') then
    out[#out + 1] = 2 -- written already: a try whose answer was lost
  elseif cur[1] ~= claim or cur[2] ~= 'started' then
    out[#out + 1] = 0
  else
    local set = {'status', status, 'exit_code', code, 'result', result, 'finished_at', now_s, 'finished_at_ms', now_ms, 'finished_at_us', now_us, 'updated_at', now_s}
    local del = {}
    if rjson ~= '' then set[#set + 1] = 'result_json'; set[#set + 1] = rjson else del[#del + 1] = 'result_json' end
    if err ~= '' then set[#set + 1] = 'error'; set[#set + 1] = err elseif cur[3] then del[#del + 1] = 'error' end
    if fatal == '1' then set[#set + 1] = 'fatal'; set[#set + 1] = '1' elseif cur[4] then del[#del + 1] = 'fatal' end
    if retry_after and retry_after > 0 then set[#set + 1] = 'retry_after_ms'; set[#set + 1] = ARGV[i + 11] elseif cur[5] then del[#del + 1] = 'retry_after_ms' end
    redis.call('HSET', jk, unpack(set))
    if #del > 0 then redis.call('HDEL', jk, unpack(del)) end
    index_job(caller .. ':' .. id, 'started', status)
    if chunk ~= '' then
      local lk = 'coord:log:' .. caller .. ':' .. id
      local len = redis.call('STRLEN', lk)
      if len < logmax then
        if len + #chunk > logmax then chunk = string.sub(chunk, 1, logmax - len) .. '\n[log truncated at ' .. logmax .. ' bytes]\n' end
        redis.call('APPEND', lk, chunk)
      end
    end
    local ev = 'job.finished'
    if status ~= 'finished' then ev = 'job.failed' end
    redis.call('XADD', ek, 'MAXLEN', '~', ` + strconv.Itoa(EventsMaxLen) + `, '*', 'type', ev, 'actor', 'runner', 'time_ms', now_ms, 'flow_id', flow, 'job_id', id, 'caller_id', caller, 'status', status, 'detail', err)
    if grouped then
      done[#done + 1] = ARGV[i + 13]
      ids[#ids + 1] = id
      gflow = flow
    else
      local mk = store_message(caller, first, now_ms, last, {'job', '[' .. ARGV[i + 13] .. ']'})
      track_msg(caller, id, mk)
      push(mk)
    end
    out[#out + 1] = 1
  end
end
if #done > 0 then
  if #done < (#ARGV - runs + 1) / 14 then
    -- Some runs did not finish here: the list of those that did.
    local js = {}
    for k, span in ipairs(done) do
      local a, b = string.match(span, '^(%d+) (%d+)$')
      js[k] = string.sub(glist, tonumber(a), tonumber(b))
    end
    glist = '[' .. table.concat(js, ',') .. ']'
  end
  local mk = store_message(caller, first, now_ms, last, {'job', glist})
  track_msg(caller, ids[1], mk, gflow)
  push(mk)
end
wake_msg_out(ctx, pushed)
return out
`)

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
}

// FinishJobs is FinishJob for several runs, one round trip per database. The runs of
// one flow (of one consumer) that end together are recorded by one script, atomically,
// and share one result message, whose job list holds each finished job: the router
// reports them to the scheduler together. A run of a job that came from another node
// (its result goes back there) or of a job outside any flow gets a message of its own.
// It returns FinishJob's answer per run.
func FinishJobs(ctx context.Context, fs []Finish) ([]bool, []error) {
	oks, errs := make([]bool, len(fs)), make([]error, len(fs))
	type groupKey struct {
		ctxID, flow, caller uint32
		consumer            string
		solo                int // > 0: a run of its own (its index + 1)
	}
	groups := map[groupKey][]int{}
	var order []groupKey
	dbs := map[uint32]*DB{}
	for i, f := range fs {
		k := groupKey{ctxID: f.DB.ContextID, flow: f.Job.FlowID, caller: f.Job.CallerID, consumer: f.Claim.Consumer}
		if f.Job.FlowID == 0 || f.Job.Origin != nil {
			k.solo = i + 1
		}
		if _, seen := groups[k]; !seen {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
		dbs[f.DB.ContextID] = f.DB
	}
	// One pipeline per database, in the order the databases first appear.
	var dbOrder []uint32
	calls := map[uint32][]Call{}
	members := map[uint32][][]int{}
	for _, k := range order {
		if _, seen := calls[k.ctxID]; !seen {
			dbOrder = append(dbOrder, k.ctxID)
		}
		idx := groups[k]
		calls[k.ctxID] = append(calls[k.ctxID], finishCall(dbs[k.ctxID], fs, idx))
		members[k.ctxID] = append(members[k.ctxID], idx)
	}
	for _, ctxID := range dbOrder {
		cmds := dbs[ctxID].EvalBatch(ctx, calls[ctxID])
		for g, idx := range members[ctxID] {
			res, err := cmds[g].Result()
			vals, _ := res.([]any)
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
	}
	return oks, errs
}

// finishCall builds the finish script's run for the runs fs[idx] (one flow, caller and
// consumer of one database; a message each unless there are several).
func finishCall(d *DB, fs []Finish, idx []int) Call {
	now := time.Now()
	first := fs[idx[0]]
	j0, c0 := first.Job, first.Claim
	text := "result of job " + j0.GlobalKey()
	if len(idx) > 1 {
		text = fmt.Sprintf("results of %d jobs of flow %d", len(idx), j0.FlowID)
	}
	m := model.Message{
		CallerID: j0.CallerID, ContextID: d.ContextID, MessageType: model.MessageTypeJob, MessageFormatType: model.FormatText,
		Message: text, Status: model.MessageDispatched,
		CreatedAt: now.Unix(), UpdatedAt: now.Unix(), CreatedAtMs: now.UnixMilli(), FlowID: j0.FlowID, Kind: model.KindJobResult,
	}
	fields := model.HashFields(&m)
	msg := make([]any, 0, len(fields))
	for i := 0; i < len(fields); i += 2 {
		if fields[i] == "id" || fields[i] == "job" {
			continue
		}
		msg = append(msg, fields[i], fields[i+1])
	}
	logMax := first.Outcome.LogMax
	if logMax <= 0 {
		logMax = MaxLogBytes
	}
	grouped := "0"
	if len(idx) > 1 {
		grouped = "1"
	}
	args := make([]any, 0, 9+len(msg)+14*len(idx))
	args = append(args, now.Unix(), now.UnixMilli(), d.ContextID, j0.CallerID, logMax, grouped, now.UnixMicro(), len(msg))
	args = append(args, msg...)
	var list []byte // grouped: the message's job list, built as the runs are added
	if len(idx) > 1 {
		args = append(args, nil) // set below
	}
	for _, i := range idx {
		f := fs[i]
		j, c, o := f.Job, f.Claim, f.Outcome
		result := o.Result
		if result == nil {
			result = map[string]string{}
		}
		final := *j
		final.Status, final.Error, final.ExitCode, final.Result, final.ResultJSON, final.Fatal = o.Status, o.Error, o.ExitCode, result, o.ResultJSON, o.Fatal
		final.FinishedAt, final.FinishedAtMs, final.FinishedAtUs = now.Unix(), now.UnixMilli(), now.UnixMicro()
		final.Script = "" // the result message does not need to carry the source again
		js, err := json.Marshal(&final)
		if err != nil {
			js = []byte("{}") // a job is plain data; cannot happen
		}
		fatal := "0"
		if o.Fatal {
			fatal = "1"
		}
		var item any = js
		if len(idx) > 1 {
			list = append(append(list, listSep(list)), js...)
			item = strconv.Itoa(len(list)-len(js)+1) + " " + strconv.Itoa(len(list))
		}
		args = append(args, keys.Job(j.CallerID, j.ID), c.member(), c.ID, j.ID, j.FlowID, string(o.Status), o.Error, o.ExitCode,
			model.EncodeField(result), string(o.ResultJSON), fatal, o.RetryAfter.Milliseconds(), o.Log, item)
	}
	if len(idx) > 1 {
		args[8+len(msg)] = append(list, ']')
	}
	return Call{Script: finishJobsScript, Keys: []string{keys.Processing(c0.Consumer), keys.Leases, keys.MsgOut, keys.Events}, Args: args}
}

// MaxLogBytes caps a job's stored log by default.
const MaxLogBytes = 4 << 20

// appendLogScript: KEYS log; ARGV chunk, max bytes, ttl seconds (0 none). Appends
// within the cap; past it, one truncation note. Returns the new length.
var appendLogScript = NewScript(`
local len = redis.call('STRLEN', KEYS[1])
local max = tonumber(ARGV[2])
if len >= max then return len end
local chunk = ARGV[1]
if len + #chunk > max then
  chunk = string.sub(chunk, 1, max - len) .. '\n[log truncated at ' .. max .. ' bytes]\n'
end
return redis.call('APPEND', KEYS[1], chunk)
`)

// AppendLog appends to a job's log (bounded).
func (d *DB) AppendLog(ctx context.Context, callerID, id uint32, chunk []byte, max int) error {
	if max <= 0 {
		max = MaxLogBytes
	}
	_, err := d.Eval(ctx, appendLogScript, []string{keys.JobLog(callerID, id)}, chunk, max)
	return err
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
		AddEvent(ctx, p, &Event{Type: "job.stop_requested", Actor: actor, FlowID: j.FlowID, JobID: id, CallerID: callerID, Status: string(j.Status)})
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
