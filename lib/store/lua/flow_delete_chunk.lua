-- flow_delete_chunk: deletes a chunk of a large flow's jobs (and of its messages)
-- before delete_flow removes the flow, so that no one call walks the whole flow
-- (DeleteFlow: a flow of more than deleteFlowChunk jobs). A job is deleted only when it
-- names this flow. A started flow is refused unless force, as delete_flow refuses it.
-- The flow is marked deleting (its field deleting): the start's scripts refuse it. A
-- call of no ids that leaves no message empties the flow's job list (delete_flow then
-- removes only the flow's own keys).
-- NOTFOUND: no such flow; CONFLICT: a started flow without force.
--
-- KEYS:
--   flow  flow:<flow>
--   msgs  coord:flowmsgs:<flow>
-- ARGV:
--   ctx      string    the context id
--   flow_id  string    the flow id
--   force    bool      even a started flow
--   ended    bool      only an ended flow (finished or error; retention's)
--   caller   string    the flow's caller
--   nmsgs    num       messages of the flow's set to delete in this call
--   ids      []string  the job ids of this chunk
-- Reply: record what the call did (with ended, of a flow not ended: nothing, msgs_left -1)
--   deleted    int  jobs deleted
--   msgs_left  int  messages left in the flow's set
-- Libs: lib_delete_job
-- Derives: context DB: per job what delete_job (lib_delete_job) removes; DB 0 (SELECT
--   0): coord:due (the jobs' retries).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow_id = ARGV[2]
local force = ARGV[3] == '1'
local ended = ARGV[4] == '1'
local caller = ARGV[5]
local nmsgs = tonumber(ARGV[6])
local argi = 7
local ids
local n_ids = tonumber(ARGV[argi])
if n_ids <= 7000 then ids = {unpack(ARGV, argi + 1, argi + n_ids)} else ids = {}; for k = 1, n_ids do ids[k] = ARGV[argi + k] end end
argi = argi + 1 + n_ids
-- luagen: end of the prologue

local st = rcall('HGET', KEYS[1], 'status')
if not st then return redis.error_reply('NOTFOUND flow') end
if ended and st ~= FLOW_FINISHED and st ~= FLOW_ERROR then return {0, -1} end
if st == FLOW_STARTED and not force then
  return redis.error_reply('CONFLICT flow ' .. flow_id .. ' is running; cancel it first (flow.cancel)')
end
-- the flow is being deleted: a start (start_flow, flow_start_begin, _chunk, _commit)
-- refuses it from now on (a start between two chunks started a flow whose jobs were
-- going: nodes never to run); a flow.delete again finishes it
if #ids > 0 then rcall('HSET', KEYS[1], 'deleting', '1') end
local deleted = 0
for _, id in ipairs(ids) do
  if rcall('HGET', K_JOB .. caller .. ':' .. id, 'flow_id') == flow_id then
    delete_job(caller, id)
    deleted = deleted + 1
  end
end
if nmsgs > 0 then
  for _, mk in ipairs(rcall('SPOP', KEYS[2], nmsgs)) do delete_message(mk) end
end
local left = rcall('SCARD', KEYS[2])
if #ids == 0 and left == 0 then
  -- the jobs and messages are gone: delete_flow has only the flow's own keys to remove
  rcall('HSET', KEYS[1], 'jobs', '[]')
end
if #ids > 0 then
  rcall('SELECT', '0')
  for _, id in ipairs(ids) do
    rcall('ZREM', K_DUE, 'retry:' .. ctx .. ':' .. flow_id .. ':' .. caller .. ':' .. id)
  end
end
return {deleted, left}
