-- flow_retry_begin: the first call of a large failed flow's retry in chunks (RetryFlow:
-- a flow of more than cancelChunk jobs; a smaller one is retried whole by retry_flow).
-- It checks what retry_flow checks (the flow failed and was started) and records that
-- the retry is under way: the flow's field retrying (how many of the flow's jobs the
-- chunks have done, in its job list's order) and the DAG's hold (lib_dispatch: no node
-- is dispatched before the retry's last call). The flow stays error until
-- flow_retry_commit marks it started (its retention ends at once); it is in
-- coord:flows:active meanwhile, where the scheduler's safety sweep finds a retry that
-- its caller left unfinished (a restart) and finishes it. A retry already under way is not begun again: the reply says where
-- it is, for the caller to go on. A flow being cancelled in chunks is refused.
--
-- KEYS:
--   flow  flow:<flow>
--   dag   coord:dag:<flow>
-- ARGV:
--   ctx   int  the context id
--   flow  int  the flow id
-- Reply: raw {1, "0"} begun; {2, retrying} under way already (how many jobs are
--   done). Errors NOTFOUND flow, CONFLICT (not failed, never started, or being
--   cancelled).
-- Derives: DB 0 (SELECT 0): coord:flows:active, coord:expire (its retention ends:
--   the retry goes on, whatever stops its caller).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
-- luagen: end of the prologue

local fk, dag = KEYS[1], KEYS[2]
local h = rcall('HMGET', fk, 'status', 'retrying', 'cancelling', 'deleting')
local st = h[1]
if not st then return redis.error_reply('NOTFOUND flow') end
if h[4] then -- (flow_delete_chunk's mark: its jobs are going)
  return redis.error_reply('CONFLICT flow ' .. flow .. ' is being deleted (a flow.delete again finishes it)')
end
if h[2] then return {2, h[2]} end
if st ~= FLOW_ERROR then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' is ' .. st .. '; only a failed flow can be retried')
end
if h[3] then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' is being cancelled; retry it once the cancel is done')
end
if rcall('EXISTS', dag) == 0 then
  return redis.error_reply('CONFLICT flow ' .. flow .. ' never started; start it (flow.start)')
end
rcall('HSET', fk, 'retrying', '0')
rcall('HSET', dag, 'hold', 'retry')
rcall('SELECT', '0')
rcall('SADD', K_ACTIVE_FLOWS, ctx .. ':' .. flow)
rcall('ZREM', K_EXPIRE, ctx .. ':flow:' .. flow)
return {1, '0'}
