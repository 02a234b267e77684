-- requeue_job: resets a standalone job that ended for a fresh run (attempts from 1)
-- and takes it out of the DLQ.
--
-- KEYS:
--   job  job:<caller>:<id>
-- ARGV:
--   ctx     int     the context id
--   caller  int     the caller id
--   id      int     the job id
--   actor   string  who requeues
--   now_s   int     now (s)
--   now_ms  int     now (ms)
-- Libs: lib_busy lib_state
-- Reply: int 1. Errors: NOTFOUND job; CONFLICT the job is started or dispatched.
-- Derives (the prelude's keys): context DB: coord:idx:jobs:<status> (set_job), coord:dlq,
--   coord:events; DB 0 (SELECT 0): coord:expire.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local caller = ARGV[2]
local id = ARGV[3]
local actor = ARGV[4]
local now_s = ARGV[5]
local now_ms = ARGV[6]
-- luagen: end of the prologue

local jk = KEYS[1]
local st = rcall('HGET', jk, 'status')
if not st then return redis.error_reply('NOTFOUND job') end
if st == JOB_STARTED or st == JOB_DISPATCHED then
  return redis.error_reply('CONFLICT job ' .. id .. ' is ' .. st .. ', not ended')
end
set_job(caller, id, JOB_DISPATCHED, 'updated_at', now_s, 'result', '{}')
rcall('HDEL', jk, 'result_json', 'attempt', 'done_attempt', 'error', 'exit_code', 'fatal', 'stop_requested', 'dlq_at_ms', 'retry_after_ms',
  'worker', 'started_at', 'finished_at', 'started_at_ms', 'finished_at_ms', 'started_at_us', 'finished_at_us')
rcall('ZREM', K_DLQ, caller .. ':' .. id)
event(EV_JOB_REQUEUED, actor, now_ms, '0', id, caller, JOB_DISPATCHED, 'from the dead-letter queue')
rcall('SELECT', '0')
rcall('ZREM', K_EXPIRE, ctx .. ':job:' .. caller .. ':' .. id)
return 1
