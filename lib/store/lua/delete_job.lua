-- delete_job: removes a job that belongs to no flow, with its log and messages.
--
-- KEYS:
--   job  job:<caller>:<id>
-- ARGV:
--   ctx     int     the context id
--   caller  int     the caller id
--   id      int     the job id
--   force   bool    even a started job
--   ended   bool    only an ended job (finished or error: retention's, which took the
--                   job's expiry before; a dlq.requeue meanwhile made it run again)
--   actor   string  who deletes
--   now_ms  int     now (ms)
-- Libs: lib_busy lib_state lib_delete_job
-- Reply: int 1 deleted; 0 not ended (ended). Errors: NOTFOUND job; CONFLICT the job belongs to a flow, or is running.
-- Derives: context DB: what lib_delete_job removes with the job,
--   flow:<flow> and coord:flowclaim:<flow> (is its flow still there, or being
--   stored?), coord:events; DB 0 (SELECT 0): coord:expire,
--   coord:due (its retry).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local caller = ARGV[2]
local id = ARGV[3]
local force = ARGV[4] == '1'
local ended = ARGV[5] == '1'
local actor = ARGV[6]
local now_ms = ARGV[7]
-- luagen: end of the prologue

local jk = KEYS[1]
local st = rcall('HGET', jk, 'status')
if not st then return redis.error_reply('NOTFOUND job') end
if ended and st ~= JOB_FINISHED and st ~= JOB_ERROR then return 0 end
local flow = rcall('HGET', jk, 'flow_id')
if flow and flow ~= '0' and flow ~= '' and rcall('EXISTS', K_FLOW .. flow, K_FLOW_CLAIM .. flow) > 0 then
  -- (a flow stored, or claiming its jobs before it is: lua/flow_jobs.lua's hold)
  return redis.error_reply('CONFLICT job ' .. id .. ' belongs to flow ' .. flow .. '; delete the flow (flow.delete) instead')
end
if st == JOB_STARTED and not force then
  return redis.error_reply('CONFLICT job ' .. id .. ' is running; stop it first (job.stop) or delete with force')
end
delete_job(caller, id)
event(EV_JOB_DELETED, actor, now_ms, '0', id, caller, st, '')
rcall('SELECT', '0')
rcall('ZREM', K_EXPIRE, ctx .. ':job:' .. caller .. ':' .. id)
rcall('ZREM', K_DUE, 'retry:' .. ctx .. ':0:' .. caller .. ':' .. id)
return 1
