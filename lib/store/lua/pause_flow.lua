-- pause_flow: flow.pause and flow.resume of a started flow. A pause marks the DAG hash
-- (field paused, which lib_dispatch's dispatch_job reads with the node: a paused flow's
-- ready nodes are not dispatched, by the scheduler nor by a runner's own dispatch of
-- dependents); running jobs go on and end as usual. A resume clears it and enters the
-- flow in coord:delayed, due now: the scheduler that releases it dispatches the flow's
-- ready nodes (services/scheduler, releaseFlow).
--
-- KEYS:
--   flow  flow:<flow>
--   dag   coord:dag:<flow>
-- ARGV:
--   ctx     string  the context id
--   flow    string  the flow id
--   op      string  pause or resume
--   actor   string  who pauses or resumes it
--   now_ms  int     now (ms)
--   note    string  why (shown on the flow as pause_note)
-- Reply: raw {1} done; {0, status} the flow is not started (nothing changed); {2} it
--   was paused (pause) or not paused (resume) already. Error NOTFOUND flow.
-- Libs: lib_busy lib_state
-- Derives: context DB: coord:events; DB 0 (SELECT 0, last, on resume): coord:delayed,
--   coord:delayedwake (PUBLISH now).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local op = ARGV[3]
local actor = ARGV[4]
local now_ms = ARGV[5]
local note = ARGV[6]
-- luagen: end of the prologue

local h = rcall('HMGET', KEYS[1], 'status', 'caller_id', 'paused')
if not h[1] then return redis.error_reply('NOTFOUND flow') end
if h[1] ~= FLOW_STARTED then return {0, h[1]} end
if op == 'pause' then
  if h[3] == '1' then return {2} end
  rcall('HSET', KEYS[2], 'paused', '1')
  rcall('HSET', KEYS[1], 'paused', '1', 'pause_note', note)
  event(EV_FLOW_PAUSED, actor, now_ms, flow, '0', h[2], FLOW_STARTED, note)
  return {1}
end
if h[3] ~= '1' then return {2} end
rcall('HDEL', KEYS[2], 'paused')
rcall('HDEL', KEYS[1], 'paused')
rcall('HSET', KEYS[1], 'pause_note', note)
event(EV_FLOW_RESUMED, actor, now_ms, flow, '0', h[2], FLOW_STARTED, note)
rcall('SELECT', '0')
rcall('ZADD', K_DELAYED, now_ms, ctx .. ':flow:' .. flow)
rcall('PUBLISH', K_DELAYED_WAKE, now_ms)
return {1}
