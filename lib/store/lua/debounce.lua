-- debounce: job.submit with a debounce_key: the job just submitted (scheduled, due at
-- the end of its window) becomes the key's pending job (coord:debounce:<key>, a
-- string "<caller>:<id>" that expires a while after the window), and the job it
-- replaces, while it is still scheduled (its window not over), ends error,
-- cancelled, never run: its error and its job.cancelled event name the debounce and
-- the job that replaced it. So of the submissions of one key within the window only
-- the last runs. A job that no longer waits (released, stopped) is left as it is.
--
-- KEYS:
--   pending  coord:debounce:<key>
-- ARGV:
--   ctx     string  the context id
--   caller  string  the new job's caller
--   id      string  the new job's id
--   dkey    string  the debounce key
--   ttl_ms  int     how long the pending entry lasts (ms)
--   actor   string  who submitted
--   now_s   string  now (s)
--   now_ms  string  now (ms)
-- Reply: raw {1, "<caller>:<id>"} the job replaced was cancelled; {0} none was.
-- Libs: lib_busy lib_state
-- Derives: context DB: the replaced job's hash (job:<caller>:<id>), context:<ctx>
--   (read: retention_seconds), coord:idx:jobs[:<status>], coord:events; DB 0 (SELECT 0,
--   last): coord:scheduler (read: retention_ms), coord:expire, coord:delayed,
--   coord:jobdone.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local caller = ARGV[2]
local id = ARGV[3]
local dkey = ARGV[4]
local ttl_ms = ARGV[5]
local actor = ARGV[6]
local now_s = ARGV[7]
local now_ms = ARGV[8]
-- luagen: end of the prologue

local me = caller .. ':' .. id
local prev = rcall('SET', KEYS[1], me, 'PX', ttl_ms, 'GET')
if not prev or prev == me then return {0} end
local pc, pid = string.match(prev, '^(%d+):(%d+)$')
if not pc or rcall('HGET', K_JOB .. prev, 'status') ~= JOB_SCHEDULED then return {0} end
local reason = 'cancelled: debounced by job ' .. me .. ' (debounce_key ' .. dkey .. ')'
set_job(pc, pid, JOB_ERROR, 'error', reason, 'stop_requested', '1', 'fatal', 'true', 'updated_at', now_s, 'finished_at_us', now_ms .. '000')
event(EV_JOB_CANCELLED, actor, now_ms, '0', pid, pc, JOB_ERROR, reason)
local keep = (tonumber(rcall('HGET', K_CONTEXT .. ctx, 'retention_seconds') or '0') or 0) * 1000
rcall('SELECT', '0')
if keep <= 0 then keep = tonumber(rcall('HGET', K_SCHEDULER, 'retention_ms') or '0') or 0 end
local member = ctx .. ':job:' .. prev
if keep > 0 then rcall('ZADD', K_EXPIRE, tonumber(now_ms) + keep, member) end
rcall('ZREM', K_DELAYED, member)
rcall('PUBLISH', K_JOB_DONE, ctx .. ':' .. prev)
return {1, prev}
