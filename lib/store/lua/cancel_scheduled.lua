-- cancel_scheduled: job.stop of a delayed job before it was dispatched: the job ends
-- error ("cancelled", stop_requested) without ever running, leaves coord:delayed, and
-- is kept for its retention like any ended standalone job.
--
-- KEYS:
--   job  job:<caller>:<id>
-- ARGV:
--   ctx     string  the context id
--   caller  string  the job's caller
--   id      string  the job's id
--   actor   string  who stops it
--   now_s   string  now (s)
--   now_ms  string  now (ms)
--   reason  string  the reason (its error)
-- Reply: raw {1} cancelled; {0, status} the job is not scheduled (nothing changed).
--   Error NOTFOUND job.
-- Libs: lib_busy lib_state
-- Derives: context DB: context:<ctx> (read: retention_seconds), coord:idx:jobs[:<status>],
--   coord:events; DB 0 (SELECT 0, last): coord:scheduler (read: retention_ms),
--   coord:expire, coord:delayed.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local caller = ARGV[2]
local id = ARGV[3]
local actor = ARGV[4]
local now_s = ARGV[5]
local now_ms = ARGV[6]
local reason = ARGV[7]
-- luagen: end of the prologue

local st = rcall('HGET', KEYS[1], 'status')
if not st then return redis.error_reply('NOTFOUND job') end
if st ~= JOB_SCHEDULED then return {0, st} end
set_job(caller, id, JOB_ERROR, 'error', reason, 'stop_requested', '1', 'fatal', 'true', 'updated_at', now_s, 'finished_at_us', now_ms * 1000)
event(EV_JOB_CANCELLED, actor, now_ms, '0', id, caller, JOB_ERROR, reason)
local keep = (tonumber(rcall('HGET', K_CONTEXT .. ctx, 'retention_seconds') or '0') or 0) * 1000
rcall('SELECT', '0')
if keep <= 0 then keep = tonumber(rcall('HGET', K_SCHEDULER, 'retention_ms') or '0') or 0 end
local member = ctx .. ':job:' .. caller .. ':' .. id
if keep > 0 then rcall('ZADD', K_EXPIRE, tonumber(now_ms) + keep, member) end
rcall('ZREM', K_DELAYED, member)
return {1}
