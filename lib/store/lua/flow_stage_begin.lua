-- flow_stage_begin: begins a flow's creation as a unit (flow.begin): reserves the
-- flow's id and a range of n job ids of its caller, and records the stage that the
-- flow's jobs are created under (each created with the flow's id, flow_id) until
-- flow.create stores the flow. A stage not renewed within its ttl expires: the
-- scheduler's retention deletes its jobs (flow_stage_sweep), so that an interrupted
-- creation leaves nothing outside a flow.
--
-- KEYS:
--   flow_seq  coord:seq:flow
--   job_seq   coord:seq:job:<caller>
-- ARGV:
--   ctx     string  the context id
--   caller  string  the caller id
--   n       num     the number of jobs (at least 1)
--   ttl_ms  int     the stage's ttl (ms)
--   now_ms  num     now (ms)
-- Reply: record the stage begun (error CONFLICT: the caller's job ids would pass 2^32-1)
--   flow     int  the flow's id
--   first    int  the first job id
--   last     int  the last job id
--   expires  int  the stage's expiry (ms)
-- Libs: lib_stage
-- Derives: context DB: flow:<flow> (a free id), coord:flowstage:<flow> (the stage:
--   caller, first, last, ttl_ms, expires_ms, state open); DB 0 (SELECT 0): coord:expire
--   (member <ctx>:stage:<flow> at the expiry).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local caller = ARGV[2]
local n = tonumber(ARGV[3])
local ttl_ms = ARGV[4]
local now_ms = tonumber(ARGV[5])
-- luagen: end of the prologue

local flow, first, last, expires = stage_begin(KEYS[1], KEYS[2], caller, n, ttl_ms, now_ms)
if not flow then return redis.error_reply(first) end
stage_expire(ctx, flow, expires)
return {tonumber(flow), first, last, expires}
