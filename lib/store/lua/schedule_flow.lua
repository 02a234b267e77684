-- schedule_flow: flow.start with run_at or delay: a created (dispatched) flow becomes
-- scheduled with its start time, and enters coord:delayed, where the scheduler finds it
-- when it falls due and starts it (lua/start_flow.lua takes a scheduled flow as a
-- dispatched one). flow.cancel before then ends it (lua/cancel_flow.lua).
--
-- KEYS:
--   flow  flow:<flow>
-- ARGV:
--   ctx     string  the context id
--   flow    string  the flow id
--   actor   string  who schedules it
--   now_s   string  now (s)
--   now_ms  string  now (ms)
--   run_at  string  when it starts (ms)
-- Reply: raw {1, run_at} scheduled; {0, status, run_at or ""} the flow was not a
--   created flow (already scheduled, started or ended): nothing changed. Error
--   NOTFOUND flow.
-- Libs: lib_busy lib_state
-- Derives: context DB: coord:idx:flows[:<status>], coord:events; DB 0 (SELECT 0, last):
--   coord:delayed, coord:delayedwake (PUBLISH the run_at).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local actor = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local run_at = ARGV[6]
-- luagen: end of the prologue

local h = rcall('HMGET', KEYS[1], 'status', 'caller_id', 'run_at_ms')
if not h[1] then return redis.error_reply('NOTFOUND flow') end
if h[1] ~= FLOW_DISPATCHED then return {0, h[1], h[3] or ''} end
set_flow(flow, FLOW_SCHEDULED, 'run_at_ms', run_at, 'updated_at', now_s)
event(EV_FLOW_SCHEDULED, actor, now_ms, flow, '0', h[2] or '0', FLOW_SCHEDULED, 'run_at_ms ' .. run_at)
rcall('SELECT', '0')
rcall('ZADD', K_DELAYED, run_at, ctx .. ':flow:' .. flow)
rcall('PUBLISH', K_DELAYED_WAKE, run_at)
return {1, run_at}
