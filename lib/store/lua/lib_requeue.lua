-- lib_requeue: a dead-lettered standalone job made ready for a fresh run (dlq.requeue),
-- for dispatch.lua, which dispatches it in the same call (the reset and the dispatch
-- were two calls, the second the scheduler's: a scheduler out of reach, or a
-- supervisor-daemon gone in between, left the job dispatched with no request, out of
-- the DLQ, never to run).
--
--   - requeue_reset(caller, id, actor, now_s, now_ms), in the context's DB: the
--     job must be in the DLQ (nil and why not: it is missing, or not in the DLQ); it
--     is taken out, its run's fields dropped (attempts from 1), its status dispatched
--     (dispatch_job's next step dispatches it) and job.requeued recorded. Its
--     retention's entry (DB 0's coord:expire, "<ctx>:job:<caller>:<id>") is the
--     caller's to remove.
-- Needs lib_state.

local function requeue_reset(caller, id, actor, now_s, now_ms)
  local jk = K_JOB .. caller .. ':' .. id
  local st = rcall('HGET', jk, 'status')
  if not st then return 'job missing' end
  if not rcall('ZSCORE', K_DLQ, caller .. ':' .. id) then return 'not in the dead-letter queue (' .. st .. ')' end
  set_job(caller, id, JOB_DISPATCHED, 'updated_at', now_s, 'result', '{}')
  rcall('HDEL', jk, 'result_json', 'attempt', 'done_attempt', 'error', 'exit_code', 'fatal', 'stop_requested', 'dlq_at_ms', 'retry_after_ms',
    'worker', 'started_at', 'finished_at', 'started_at_ms', 'finished_at_ms', 'started_at_us', 'finished_at_us')
  rcall('ZREM', K_DLQ, caller .. ':' .. id)
  event(EV_JOB_REQUEUED, actor, now_ms, '0', id, caller, JOB_DISPATCHED, 'from the dead-letter queue')
  return nil
end
