-- retry_flow: re-runs a failed flow's failed and cancelled nodes (fresh attempts),
-- keeping the completed ones and their results.
--
-- KEYS:
--   flow     flow:<flow>
--   dag      coord:dag:<flow>
--   results  coord:flowres:<flow>
-- ARGV:
--   ctx     int     the context id
--   flow    int     the flow id
--   actor   string  who retries
--   now_s   int     now (s)
--   now_ms  int     now (ms)
-- Libs: lib_busy lib_state
-- Reply: retried {1, ready job ids…}; errors NOTFOUND flow, CONFLICT (not failed, or never started)
--   one       int    1
--   ...ready  []int  the jobs ready to run again (the caller dispatches them)
-- Derives, from the flow's job list: context DB: job:<caller>:<id> of its jobs, coord:dlq,
--   coord:idx:jobs[:<status>], coord:idx:flows[:<status>], coord:events; DB 0
--   (SELECT 0): coord:flows:active, coord:expire.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local actor = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
-- luagen: end of the prologue

local fk, dag, rk = KEYS[1], KEYS[2], KEYS[3]
local st = rcall('HGET', fk, 'status')
if not st then return redis.error_reply('NOTFOUND flow') end
if st ~= FLOW_ERROR then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' is ' .. st .. '; only a failed flow can be retried')
end
if rcall('EXISTS', dag) == 0 then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' never started; start it (flow.start)')
end
local caller = rcall('HGET', fk, 'caller_id') or '0'
local res = rcall('HGET', fk, 'result')
if res and res ~= '' and res ~= '{}' then
  local ok, m = pcall(cjson.decode, res)
  if ok and type(m) == 'table' then
    for k, v in pairs(m) do rcall('HSET', rk, k, v) end
  end
end
local jobs = cjson.decode(rcall('HGET', fk, 'jobs') or '[]')
local rerun = {}
for _, id in ipairs(jobs) do
  id = tostring(id)
  local s = rcall('HGET', dag, 's:' .. id)
  if s == NODE_FAILED or s == NODE_CANCELLED then rerun[id] = true end
end
local out = {1}
local terminal = 0
for _, id in ipairs(jobs) do
  id = tostring(id)
  if rerun[id] then
    if retry_node(dag, caller, id, now_s, now_ms) then out[#out + 1] = id end
  else
    terminal = terminal + 1
  end
end
rcall('HSET', dag, 'terminal', terminal, 'failed', 0, 'cancelled', 0)
set_flow(flow, FLOW_STARTED, 'updated_at', now_s)
rcall('HDEL', fk, 'error', 'failed_job', 'cancelled_by', 'finished_at', 'finished_at_ms', 'result')
event(EV_FLOW_RETRIED, actor, now_ms, flow, '0', caller, FLOW_STARTED, (#out - 1) .. ' job(s) ready to run again')
rcall('SELECT', '0')
rcall('SADD', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
rcall('ZREM', K_EXPIRE, ctx .. ':flow:' .. flow)
return out
