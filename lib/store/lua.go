package store

import (
	"strconv"

	"github.com/hero-coordinator/hero/lib/keys"
)

// luaLib is prepended to the scripts that change statuses: every status change also
// moves the object between the per-status indexes (coord:idx:jobs:<status>,
// coord:idx:flows:<status>), which is what lets lists filter by status without a scan.
var luaLib = `
-- int formats a whole number (a Redis integer reply) as a string: Lua would format it
-- as a float (tostring, .., or a number argument of redis.call), which costs Redis
-- several times as much.
local function int(n) return string.format('%d', n) end
-- reindex moves member m of the index idx (coord:idx:jobs or coord:idx:flows) from
-- the per-status index of old to that of st, keeping its score (creation time).
local function reindex(idx, m, old, st)
  if old == st then return end
  local score = redis.call('ZSCORE', idx, m)
  if score then
    if old then redis.call('ZREM', idx .. ':' .. old, m) end
    redis.call('ZADD', idx .. ':' .. st, score, m)
  end
end
local function index_job(m, old, st) reindex('coord:idx:jobs', m, old, st) end
local function set_job(caller, id, st, ...)
  local jk = 'job:' .. caller .. ':' .. id
  local old = redis.call('HGET', jk, 'status')
  redis.call('HSET', jk, 'status', st, ...)
  index_job(caller .. ':' .. id, old, st)
  return old
end
local function set_flow(id, st, ...)
  local fk = 'flow:' .. id
  local old = redis.call('HGET', fk, 'status')
  redis.call('HSET', fk, 'status', st, ...)
  reindex('coord:idx:flows', id, old, st)
  return old
end
local function event(typ, actor, now_ms, flow, job, caller, st, detail)
  redis.call('XADD', 'coord:events', 'MAXLEN', '~', ` + strconv.Itoa(EventsMaxLen) + `, '*', 'type', typ, 'actor', actor, 'time_ms', now_ms,
    'flow_id', flow or '0', 'job_id', job or '0', 'caller_id', caller or '0', 'status', st or '', 'detail', detail or '')
end
-- dead_letter puts a job that failed for good into the context's DLQ (coord:dlq), unless
-- an actor stopped it (a stop or a cancel is a decision, not a failure).
local function dead_letter(caller, id, flow, now_ms, actor, err)
  local jk = 'job:' .. caller .. ':' .. id
  if redis.call('HGET', jk, 'stop_requested') == '1' then return end
  redis.call('ZADD', 'coord:dlq', now_ms, caller .. ':' .. id)
  redis.call('HSET', jk, 'dlq_at_ms', now_ms)
  event('job.dead_lettered', actor, now_ms, flow, id, caller, 'error', err)
end
-- store_message stores a message from ARGV[first..last] (field/value pairs; last
-- defaults to #ARGV) and, if given, the field/value pairs of the table extra, under a
-- fresh id (skipping ids taken), indexes it, and returns its key.
local function store_message(caller, first, now_ms, last, extra)
  local mid
  repeat
    mid = int(redis.call('INCR', 'coord:seq:message'))
  until redis.call('EXISTS', 'message:' .. caller .. ':' .. mid) == 0
  local mk = 'message:' .. caller .. ':' .. mid
  if extra then
    local kv = {'id', mid}
    for i = 1, #extra do kv[#kv + 1] = extra[i] end
    for i = first, last or #ARGV do kv[#kv + 1] = ARGV[i] end
    redis.call('HSET', mk, unpack(kv))
  else
    redis.call('HSET', mk, 'id', mid, unpack(ARGV, first, last or #ARGV))
  end
  redis.call('ZADD', 'coord:idx:messages', now_ms, caller .. ':' .. mid)
  return mk
end
` + LuaBusy + `
-- wake_msg_out pushes n router wake tokens for context ctx onto coord:wake:msg_out
-- and marks the context busy (DB 0 of the server the script runs on, the context's,
-- where the routers wait on it; the script is left in DB 0, so it comes last).
local function wake_msg_out(ctx, n)
  if n <= 0 then return end
  local tokens = {}
  for i = 1, n do tokens[i] = ctx end
  redis.call('SELECT', 0)
  redis.call('LPUSH', 'coord:wake:msg_out', unpack(tokens))
  mark_busy(ctx)
end
-- track_msg records that message mk is about job id: a message shared by several jobs
-- of a flow (given flow) in the flow's message set (coord:flowmsgs:<flow>, deleted with
-- the flow: one entry per message however many jobs it carries), any other in the
-- job's own (coord:jobmsgs:<caller>:<id>, deleted with the job).
local function track_msg(caller, id, mk, flow)
  if flow and flow ~= '0' and flow ~= '' then
    redis.call('SADD', 'coord:flowmsgs:' .. flow, mk)
  else
    redis.call('SADD', 'coord:jobmsgs:' .. caller .. ':' .. id, mk)
  end
end
`

// LuaBusy defines mark_busy(ctx): it adds context ctx to coord:busy (keys.Busy) with
// the server's time. Call it in DB 0, in the step that pushes an item onto one of the
// context's queues.
const LuaBusy = `
local function mark_busy(ctx)
  local t = redis.call('TIME')
  redis.call('ZADD', 'coord:busy', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), ctx)
end
`

// newLibScript prepares a script that uses luaLib.
func newLibScript(body string) *Script { return NewScript(luaLib + body) }

// WakeCap bounds a runner's wake list (keys.WakeRunner): beyond it a producer adds a
// token of its context only if the list holds none. A runner id with no live process
// (its record kept, its processes gone) then keeps at most WakeCap tokens and one per
// context, instead of more with every push forever.
const WakeCap = 10000

// WakeSpread is the most wake tokens a push of jobs, or a claim that leaves jobs on
// their queue, puts on a runner's wake list for one context: enough for the claim
// loops of a few processes to claim side by side (a runner process has up to 4), few
// enough that a burst of thousands of jobs pushes, and a claim moves, a handful of
// tokens. Each claim renews them while jobs are left (claimStartScript).
const WakeSpread = 8

// LuaWake defines the job queues' wake-ups:
//
//   - wake_targets(q), called in the context's DB: the runner ids whose wake lists get
//     a token for a job pushed onto job queue q: the runner of a pinned queue
//     (coord:rq:<runner>:<type>), else the members of coord:wakers:<q> (keys.Wakers).
//   - wake_runners(ctx, q, ids, n), called in DB 0, for n jobs pushed: min(n,
//     WakeSpread) tokens (the context id ctx) at the tail of the wake list of queue q
//     of each runner id of ids (keys.WakeRunner); over WakeCap tokens, one only if the
//     list holds none of ctx.
var LuaWake = `
local function wake_targets(q)
  local r = string.match(q, '^coord:rq:(%d+):')
  if r then return {r} end
  return redis.call('SMEMBERS', 'coord:wakers:' .. q)
end
local function wake_runners(ctx, q, ids, n)
  for _, r in ipairs(ids) do
    local wk = '` + keys.WakeRunnerPrefix + `' .. r .. ':' .. q
    local k = math.min(n, ` + strconv.Itoa(WakeSpread) + `, ` + strconv.Itoa(WakeCap) + ` - redis.call('LLEN', wk))
    if k <= 0 then
      if n > 0 and not redis.call('LPOS', wk, ctx) then redis.call('RPUSH', wk, ctx) end
    else
      local t = {}
      for i = 1, k do t[i] = ctx end
      redis.call('RPUSH', wk, unpack(t))
    end
  end
end
`
