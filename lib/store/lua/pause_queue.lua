-- pause_queue: queue.pause and queue.resume of a context's job queue (a script type's
-- queue:<type> or an executor's queue:exec:<executor>). A pause is the queue's field
-- in coord:qpause, which claim_start reads before it takes anything (lib_qpause): the
-- queue's jobs stay queued, pinned ones too; the runs under way go on and end as
-- usual. A resume removes the field and gives the runners that serve the queue their
-- wake tokens again (lib_wake): as many as it has jobs (the priority set's too), at most
-- WAKE_SPREAD each, and the runners pinned jobs wait for theirs. The state is in Redis
-- only: a kill -9 of any service changes nothing.
--
-- KEYS:
--   pause  coord:qpause
--   queue  the queue (queue:<type> or queue:exec:<executor>)
-- ARGV:
--   ctx     string  the context id
--   op      string  pause or resume
--   actor   string  who pauses or resumes it
--   now_ms  int     now (ms)
--   note    string  why (shown with the queue)
--   suffix  string  the queue's name after queue: (<type>, exec:<executor>)
-- Reply: int 1 done; 0 it was paused (pause) or not paused (resume) already.
-- Libs: lib_busy lib_state lib_wake
-- Derives: context DB: coord:events, coord:prio:<queue> (ZCARD), coord:wakers:<queue>,
--   coord:idx:runners and the pinned queues coord:rq:<runner>:<suffix> of its runners
--   (LLEN, on resume); DB 0 (SELECT 0, last, on resume): coord:wake:runner:<id>:<queue>,
--   coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local op = ARGV[2]
local actor = ARGV[3]
local now_ms = ARGV[4]
local note = ARGV[5]
local suffix = ARGV[6]
-- luagen: end of the prologue

local pk, q = KEYS[1], KEYS[2]
local detail = string.sub(q, #K_QUEUE + 1)
if note ~= '' then detail = detail .. ': ' .. note end
if op == 'pause' then
  if rcall('HSETNX', pk, q, now_ms .. '\t' .. actor .. '\t' .. note) == 0 then return 0 end
  event(EV_QUEUE_PAUSED, actor, now_ms, '0', '0', '0', '', detail)
  return 1
end
if rcall('HDEL', pk, q) == 0 then return 0 end
event(EV_QUEUE_RESUMED, actor, now_ms, '0', '0', '0', '', detail)
-- the wake-ups: the queue's runners, and each runner with pinned jobs of it
local wakes = {}
local n = rcall('LLEN', q) + rcall('ZCARD', K_PRIO .. q)
if n > 0 then wakes[#wakes + 1] = {q, wake_targets(q), n} end
for _, r in ipairs(rcall('ZRANGE', K_RUNNER_INDEX, 0, -1)) do
  local pq = K_PINNED_QUEUE .. r .. ':' .. suffix
  local m = rcall('LLEN', pq)
  if m > 0 then wakes[#wakes + 1] = {pq, {r}, m} end
end
if #wakes == 0 then return 1 end
rcall('SELECT', '0')
for _, w in ipairs(wakes) do wake_runners(ctx, w[1], w[2], w[3]) end
mark_busy(ctx)
return 1
