// Package keys names every Redis key the coordinator uses. The seeds' keys come first
// and are spelled exactly as the seeds spell them; the coordinator's own keys all start
// with "coord:" so that they never collide with a seed key. docs/data-model.md lists
// each one with its type and owner.
package keys

import (
	"fmt"
	"strconv"
	"strings"
)

// Seed keys (seeds 001/002). Actors live in DB 0, everything else in the context's DB.

func Actor(id uint32) string             { return ActorPrefix + u(id) }
func Context(id uint32) string           { return ContextPrefix + u(id) }
func Flow(id uint32) string              { return FlowPrefix + u(id) }
func Message(callerID, id uint32) string { return MessagePrefix + u(callerID) + ":" + u(id) }
func Runner(id uint32) string            { return RunnerPrefix + u(id) }
func Job(callerID, id uint32) string     { return JobPrefix + u(callerID) + ":" + u(id) }
func Queue(suffix string) string         { return QueuePrefix + suffix }

// The seed keys' prefixes (the Lua prelude of lib/store builds keys from them).
const (
	ActorPrefix   = "actor:"
	ContextPrefix = "context:"
	FlowPrefix    = "flow:"
	MessagePrefix = "message:"
	RunnerPrefix  = "runner:"
	JobPrefix     = "job:"
	QueuePrefix   = "queue:"
)

// The generic message lists of a context.
const (
	MsgOut = "msg_out"
	MsgIn  = "msg_in"
)

// Coordinator keys in DB 0. The registry, actors, secrets and coord:control are on
// the primary server; the coordination entries of a context (wake lists, active
// flows, due work, expiries, remote checks, done notifications) are in DB 0 of the
// server that holds the context (docs/architecture.md, Placement).
const (
	SchemaVersion     = "coord:schema_version"      // string: the data layout's version
	Contexts          = "coord:contexts"            // zset: context id → creation time (ms); the registry
	ActorSeq          = "coord:seq:actor"           // string counter for server-assigned actor ids
	ActorIndex        = "coord:idx:actors"          // zset: actor id → creation time (ms)
	AdminSecrets      = "coord:admin_secrets"       // set: unsalted sha256 of operator secrets before signed requests (retired at start)
	OperatorSecrets   = "coord:operator_secrets"    // hash: fingerprint → JSON record of a stored or revoked operator secret
	OperatorSecretKey = "coord:operator_secret_key" // string: the deployment's HMAC key for operator secrets (random, set once)
	WakeMsgOut        = "coord:wake:msg_out"        // list: one context id per message pushed on a msg_out
	WakeMsgIn         = "coord:wake:msg_in"         // list: one context id per message pushed on a msg_in
	ActiveFlows       = "coord:flows:active"        // set: "<ctx>:<flow>" of every started, unfinished flow
	Due               = "coord:due"                 // zset: due-time queue (ms) of delayed work, e.g. retries
	Control           = "coord:control"             // pub/sub channel: runner and context changes
	Delayed           = "coord:delayed"             // zset: "<ctx>:job:<caller>:<id>" of scheduled jobs and "<ctx>:flow:<id>" of scheduled flows → when they are due (ms; docs/scheduling.md)
	ScheduleDue       = "coord:sched_due"           // zset: "<ctx>:<schedule id>" of each active schedule → when it is next due (ms): its next tick with jitter, sooner while a run is pending or buffered
	DelayedWake       = "coord:delayedwake"         // pub/sub channel: the due time (ms) of work just added to coord:delayed (the schedulers' due loops re-arm their timers)
	RemoteDue         = "coord:remote_due"          // zset: "<ctx>|<message key>" of remote requests → when their ack or result is due (ms); "<ctx>|ack|<job key>" of jobs from another node → when their ack is sent unless their result went first
	Expire            = "coord:expire"              // zset: "<ctx>:flow:<id>" or "<ctx>:job:<caller>:<id>" → when retention deletes it (ms)
	SchedulerSettings = "coord:scheduler"           // hash: the scheduler's retention_ms (its default retention; 0: forever) and sweep_ms (its safety sweep), for the runners that apply job ends themselves
	JobDone           = "coord:jobdone"             // pub/sub channel: "<ctx>:<caller>:<id>" of jobs that ended, space-separated (for job.run waiters)
	FlowDone          = "coord:flowdone"            // pub/sub channel: "<ctx>:<flow>" of each flow that ended (for flow.wait waiters)
	AuthChanged       = "coord:authchanged"         // pub/sub channel: "actor:<id>", "context:<id>" or "secret:<fingerprint>" whose credentials or roles changed (supervisor-daemon re-checks its open streams)
	LogAppended       = "coord:logappend"           // pub/sub channel: "<ctx>:<caller>:<id>" of a job whose log grew while someone tails it (its JobLogWatch key exists)
)

// Functions is the DB-0 hash, on each server, of the store's Redis function libraries
// → when (unix ms) a process that calls them last said so: supervisor-daemon, which
// alone loads them, deletes a library of another version once no process has said so
// for a day (lib/store, script.go).
const Functions = "coord:functions"

// Nonce marks a signed request's nonce as used by an actor (DB 0, expires after the
// timestamp window).
func Nonce(actor uint32, nonce string) string { return NoncePrefix + u(actor) + ":" + nonce }

// NoncePrefix starts every Nonce key.
const NoncePrefix = "coord:nonce:"

// WakeRunner is the DB-0 wake list of one runner id and job queue, on each server:
// one token (the context id) per job pushed onto that queue of a context of the
// server whose job the runner id may take. A runner process waits on its queues'
// lists, whatever the number of contexts it serves.
func WakeRunner(runnerID uint32, queue string) string {
	return WakeRunnerPrefix + u(runnerID) + ":" + queue
}

// WakeRunnerPrefix starts every WakeRunner list.
const WakeRunnerPrefix = "coord:wake:runner:"

// Wakers is the set, in a context's DB, of the runner ids whose wake lists
// (WakeRunner) get a token for each job pushed onto a shared queue of the context
// (queue:<type>, queue:exec:<executor>): the runners that announced the script type or
// executor. A pinned queue (coord:rq:<runner>:<type>) wakes its runner only.
func Wakers(queue string) string { return WakersPrefix + queue }

// WakersPrefix starts every Wakers set.
const WakersPrefix = "coord:wakers:"

// ExecUnhealthy is the hash, in a context's DB, of the runner processes (worker ids)
// whose pool of an RRQ executor crash-loops or cannot start → until when (unix ms)
// they leave its jobs to others. A process that finds its pool unhealthy fails a job
// of the executor only when no other live process of the context has it healthy.
func ExecUnhealthy(executor string) string { return "coord:exec_unhealthy:" + executor }

// Priority is the zset, in a context's DB, of the queued jobs of job queue queue
// (queue:<type>, queue:exec:<executor>) that have a priority other than the default →
// their claim order score (ms: when queued + (priority − 3) × the context's priority
// age). A claim merges it with the queue's list (whose jobs score their
// dispatched_at_ms); while no job has a priority it does not exist, and a claim's
// only cost is one read of it (docs/scheduling.md).
func Priority(queue string) string { return PriorityPrefix + queue }

// PriorityPrefix starts every Priority zset.
const PriorityPrefix = "coord:prio:"

// ConcurrencyRunning is the set, in a context's DB, of the job keys that run now
// under concurrency key k (a job's concurrency_key): a claim starts a job of the key
// only while the set is below the job's concurrency_limit. A run's end or its lease's
// sweep removes its job; a claim that finds the set full first drops the members that
// no longer run (docs/scheduling.md).
func ConcurrencyRunning(k string) string { return ConcurrencyRunningPrefix + k }

// ConcurrencyRunningPrefix starts every ConcurrencyRunning set.
const ConcurrencyRunningPrefix = "coord:ckrun:"

// ConcurrencyHeld is the list, in a context's DB, of the jobs of concurrency key k
// that a claim held back at the key's limit ("<queue>\t<job key>", the newest at the
// head): each end of a run of the key puts the oldest back at its queue's consuming
// end.
func ConcurrencyHeld(k string) string { return ConcurrencyHeldPrefix + k }

// ConcurrencyHeldPrefix starts every ConcurrencyHeld list.
const ConcurrencyHeldPrefix = "coord:ckheld:"

// ConcurrencyRateHeld is the list, in a context's DB, of the jobs of concurrency key
// k that a claim held back at the key's rate (limit.set "key:<k>" with a rate;
// "<queue>\t<job key>", the newest at the head): a scheduler's release at the key's
// next token (lua/key_rate_wake.lua) puts the oldest back at their queue's consuming
// end, their tokens paid.
func ConcurrencyRateHeld(k string) string { return ConcurrencyRateHeldPrefix + k }

// ConcurrencyRateHeldPrefix starts every ConcurrencyRateHeld list.
const ConcurrencyRateHeldPrefix = "coord:ckrate:"

// OrderFeatures is the set, in a context's DB, of the claim-order features its jobs
// have used ("priority", "concurrency") and its limits ("limit": limit.set; "keyrate": a rate per
// concurrency key, which makes the claim read its jobs' keys): routing
// reads a job's priority and concurrency fields, and a claim the priority sets and
// the limits, only in a context that has one (one read of this set per script call,
// instead of fields missing from every job's hash). Written when such a job is
// created or submitted, or a limit set; never removed.
const OrderFeatures = "coord:features"

// Limits is the hash, in a context's DB, of its run and rate limits (limit.set) by
// scope ("context", "type:<script type>", "executor:<name>", "key:<concurrency key>")
// → "<max running> <rate> <per ms> <burst>" (0: none). The claim reads it while the
// context's OrderFeatures hold "limit" (docs/scheduling.md).
const Limits = "coord:limits"

// LimitRunning is the set, in a context's DB, of the claims (their coord:leases
// members) that run under the max-running limit of scope s: a claim starts jobs
// only while it holds fewer than the limit; a run's end removes its member, and a
// claim at the limit first drops the members whose lease is gone or expired.
func LimitRunning(s string) string { return LimitRunningPrefix + s }

// LimitRunningPrefix starts every LimitRunning set.
const LimitRunningPrefix = "coord:limrun:"

// LimitBucket is the hash, in a context's DB, of the token bucket of the rate limit
// of scope s: tokens (a number) and at_ms (Redis's time of its last refill).
func LimitBucket(s string) string { return LimitBucketPrefix + s }

// LimitBucketPrefix starts every LimitBucket hash.
const LimitBucketPrefix = "coord:limbucket:"

// LimitParked is the set, in a context's DB, of the job queues whose claims a
// max-running limit stopped (their wake tokens removed): the end of a run that
// frees a slot wakes them and empties it.
const LimitParked = "coord:limpark"

// Debounce is the string, in a context's DB, that names the pending job of debounce
// key k ("<caller>:<id>": the last job submitted with the key, scheduled at the end of
// its window); a later submission with the key replaces it and cancels that job while
// it still waits (lua/debounce.lua). It expires a while after the window.
func Debounce(k string) string { return "coord:debounce:" + k }

// Turns is the hash, in a context's DB, of the claims the context made in the
// current round of each runner wake list (keys.WakeRunner → count): a context whose
// weight is w > 1 claims w times per round (docs/scheduling.md). It exists only for a
// context with a weight.
const Turns = "coord:turns"

// WakeStop is a private DB-0 list that one WaitWake call also waits on: a token there
// ends the wait when the caller's context ends (BLPOP does not watch the context).
func WakeStop(id string) string { return "coord:wakestop:" + id }

// RunnerContexts is the DB-0 set, on each server, of the contexts of that server that
// hold runner:<id>: a runner process reads it (one SMEMBERS per server) instead of
// looking for its record in every context.
func RunnerContexts(runnerID uint32) string { return RunnerCoordPrefix + u(runnerID) + ":contexts" }

// RunnerCoordPrefix starts RunnerContexts and RunnerProcs.
const RunnerCoordPrefix = "coord:runner:"

// RunnerContextsFormat is RunnerContexts with "%d" for the runner id (for scripts).
const RunnerContextsFormat = "coord:runner:%d:contexts"

// RunnerProcsOf is the DB-0 zset, on each server, of the live processes of runner id
// <id> that serve contexts of that server → last heartbeat (ms): one heartbeat per
// server, whatever the number of contexts.
func RunnerProcsOf(runnerID uint32) string { return "coord:procs:" + u(runnerID) }

// Busy is the DB-0 zset, on each server, of the contexts of that server that may have
// work waiting (an item on msg_out, msg_in or a job queue) or held (a lease) → when an
// item was last pushed (ms). Producers add a context in the same atomic step as the
// item; the safety nets (lease sweeps, idle claims, the router's drain) and the queue
// depth metric read it instead of every context, and a check (CheckBusy) removes a
// context that has nothing waiting or held.
const Busy = "coord:busy"

// SweepLock is a DB-0 key, on each server, that one service replica holds for a
// round of the lease sweep of that server's contexts (SET NX PX): replicas share
// the sweep instead of each sweeping every context.
const SweepLock = "coord:sweeplock"

// GatewayLease is the DB-0 key, on the primary server, of the lease that makes one
// mycelium-gateway replica the only one that pops the inbox of the Mycelium node
// whose public key is pk (SET NX PX by the holder's token, renewed by a
// compare-and-extend, deleted by a compare-and-delete on a clean shutdown, which
// also publishes on the channel of the same name so that a standby takes over at
// once).
func GatewayLease(pk string) string { return "coord:gateway:" + pk }

// GatewayYield is the pub/sub channel (primary server) on which a standby gateway
// announces a call to its Mycelium node (the payload: the node's public key, empty
// when not known yet): the active gateway of that node cancels its long poll for a
// moment so that the call does not wait for the node's lock behind it.
const GatewayYield = "coord:gateway:yield"

// Owner is the DB-0 key (primary server) that a service replica holds for its id of a
// kind ("runner", "router"): one live process per id.
func Owner(kind, id string) string { return "coord:owner:" + kind + ":" + id }

// Inbound is the dedup key, in a context's DB, of a message that came from another node
// (its source's public key and the origin's message key, or a result's name).
func Inbound(sourcePK, originMsg string) string {
	return "coord:inbound:" + sourcePK + ":" + originMsg
}

// WakeNone is the wake list named to a claim script that leaves the tokens alone (no
// list of that name is ever written).
const WakeNone = "coord:wake:none"

// Processing is a consumer's processing list (reliable claim), in the queue's DB.
func Processing(consumer string) string { return ProcessingPrefix + consumer }

// ProcessingPrefix starts every Processing list.
const ProcessingPrefix = "coord:proc:"

// Leases is the zset of claim leases of a DB: member "<consumer>|<item>", score = expiry (ms).
const Leases = "coord:leases"

// StopList is a runner process's control list in DB 0 (stop requests).
func StopList(process string) string { return StopListPrefix + process }

// StopListPrefix starts every StopList.
const StopListPrefix = "coord:ctl:"

// Coordinator keys in a context's DB.

func DAG(flowID uint32) string         { return DAGPrefix + u(flowID) }
func FlowResults(flowID uint32) string { return FlowResultsPrefix + u(flowID) }

// FlowCascade is the list of a flow's nodes left to examine by the cancel of a failed
// node's transitive dependents (items "<node> <failed node>"), while more are left
// than one call examines (lib/store's lua/flow_cascade_chunk.lua); gone when none is.
func FlowCascade(flowID uint32) string { return FlowCascadePrefix + u(flowID) }

// FlowStage is a flow's creation in progress (flow.begin until flow.create): its
// caller, its range of job ids, its expiry and state (lib/store/stage.go).
func FlowStage(flowID uint32) string { return FlowStagePrefix + u(flowID) }

// FlowClaim exists (with a TTL) while a flow.create of the flow has claimed jobs for it
// and not stored it yet: its claim's token (lib/store's lua/flow_jobs.lua).
func FlowClaim(flowID uint32) string    { return FlowClaimPrefix + u(flowID) }
func JobLog(callerID, id uint32) string { return JobLogPrefix + u(callerID) + ":" + u(id) }

// JobLogWatch exists (with a TTL) while a console tails the job's log: an append to
// the log then publishes on LogAppended.
func JobLogWatch(callerID, id uint32) string { return JobLogWatchPrefix + u(callerID) + ":" + u(id) }
func RunnerProcs(runnerID uint32) string     { return RunnerCoordPrefix + u(runnerID) + ":procs" }

// Prefixes of the coordinator keys of a context's DB that carry ids.
const (
	DAGPrefix          = "coord:dag:"
	FlowResultsPrefix  = "coord:flowres:"
	FlowCascadePrefix  = "coord:cascade:"
	FlowStagePrefix    = "coord:flowstage:"
	FlowClaimPrefix    = "coord:flowclaim:"
	JobLogPrefix       = "coord:log:"
	JobLogWatchPrefix  = "coord:logwatch:"
	JobMessagesPrefix  = "coord:jobmsgs:"
	FlowMessagesPrefix = "coord:flowmsgs:"
	PinnedQueuePrefix  = "coord:rq:"
)

// JobMessages is the set of the messages about one job that earlier versions wrote
// (now the job hash's msgs); deleting the job deletes it and its messages.
func JobMessages(callerID, id uint32) string { return JobMessagesPrefix + u(callerID) + ":" + u(id) }

// FlowMessages is the set of the messages shared by several jobs of a flow (group
// requests and results), deleted with the flow.
func FlowMessages(flowID uint32) string { return FlowMessagesPrefix + u(flowID) }

// StatusIndex is the per-status index of an index (coord:idx:jobs:<status>).
func StatusIndex(index, status string) string { return index + ":" + status }

// PinnedQueue is the job queue of one runner (jobs pinned to it by runner_id).
func PinnedQueue(runnerID uint32, suffix string) string {
	return PinnedQueuePrefix + u(runnerID) + ":" + suffix
}

const (
	FlowSeq    = "coord:seq:flow" // counters for server-assigned ids
	MessageSeq = "coord:seq:message"
	// MessageTemplate: a scratch hash a script writes and deletes within one call (never
	// seen outside it): the fields its messages share, which each message is copied
	// from (lib/store lib_state.lua's message_share)
	MessageTemplate = "coord:msgtmpl"
	// JobTemplate: the same for the fields the new jobs of one submission share
	// (lib/store submit.lua)
	JobTemplate  = "coord:jobtmpl"
	RunnerSeq    = "coord:seq:runner"
	ScriptTypes  = "coord:script_types" // hash: script type → number of runners serving it
	Executors    = "coord:executors"    // hash: RRQ executor name → number of runners that have it
	FlowIndex    = "coord:idx:flows"    // zset: flow id → creation time (ms)
	RunnerIndex  = "coord:idx:runners"  // zset: runner id → creation time (ms)
	JobIndex     = "coord:idx:jobs"     // zset: "<caller>:<id>" → creation time (ms)
	MessageIndex = "coord:idx:messages" // zset: "<caller>:<id>" → creation time (ms)
	Events       = "coord:events"       // stream: the context's capped event log
	DLQ          = "coord:dlq"          // zset: "<caller>:<id>" of jobs that failed for good → when (ms)
)

// JobSeqPrefix prefixes JobSeq.
const JobSeqPrefix = "coord:seq:job:"

// JobSeq is the counter for server-assigned job ids of one caller.
func JobSeq(callerID uint32) string { return JobSeqPrefix + u(callerID) }

func u(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

// ParseJobKey splits "job:<caller_id>:<id>".
func ParseJobKey(k string) (callerID, id uint32, err error) {
	c, i, ok := parsePair(k, JobPrefix)
	if !ok {
		return 0, 0, fmt.Errorf("%q is not a job key (job:<caller_id>:<id>)", k)
	}
	return c, i, nil
}

// parsePair splits "<prefix><a>:<b>" where a and b are uint32 in their canonical
// decimal form (no sign, no leading zero, no space: the key Job or Message makes).
// It runs for every job a runner claims, where fmt.Sscanf cost a tenth of the claim.
func parsePair(k, prefix string) (a, b uint32, ok bool) {
	rest, found := strings.CutPrefix(k, prefix)
	if !found {
		return 0, 0, false
	}
	as, bs, found := strings.Cut(rest, ":")
	if !found {
		return 0, 0, false
	}
	a, okA := canonicalU32(as)
	b, okB := canonicalU32(bs)
	return a, b, okA && okB
}

// canonicalU32 parses s as a uint32 written as FormatUint writes it.
func canonicalU32(s string) (uint32, bool) {
	if s == "" || len(s) > 10 || (len(s) > 1 && s[0] == '0') {
		return 0, false
	}
	var v uint64
	for i := 0; i < len(s); i++ {
		d := s[i]
		if d < '0' || d > '9' {
			return 0, false
		}
		v = v*10 + uint64(d-'0')
	}
	if v > 1<<32-1 {
		return 0, false
	}
	return uint32(v), true
}

// ParseMessageKey splits "message:<caller_id>:<id>".
func ParseMessageKey(k string) (callerID, id uint32, err error) {
	c, i, ok := parsePair(k, MessagePrefix)
	if !ok {
		return 0, 0, fmt.Errorf("%q is not a message key (message:<caller_id>:<id>)", k)
	}
	return c, i, nil
}

// Unique is a context's uniqueness key for job.submit's unique_key (a string holding
// "<caller>:<id>" of the job submitted with it, expiring after its unique_ttl_seconds).
func Unique(key string) string { return "coord:unique:" + key }

// SchedulePrefix starts every Schedule key.
const SchedulePrefix = "coord:sched:"

// Schedule is a schedule's hash in its context's DB (docs/scheduling.md).
func Schedule(id string) string { return SchedulePrefix + id }

// Schedules is a context's index of its schedules: id → creation time (ms).
const Schedules = "coord:scheds"

// QueuePause is the hash, in a context's DB, of its paused job queues (queue.pause):
// the queue's key (queue:<type>, queue:exec:<executor>) → "<ms>\t<actor>\t<note>". A
// claim of a queue in it takes nothing (a job pinned to a runner, on
// coord:rq:<runner>:<suffix>, waits with its queue); while no queue is paused it does
// not exist, and a claim's only cost is one HEXISTS of it (docs/scheduling.md).
const QueuePause = "coord:qpause"
