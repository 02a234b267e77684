-- materialize: creates, on the node that runs it, the job of a request from another
-- node. A job of the same origin is replaced (the origin retried it); a local job with
-- that key is a conflict.
--
-- KEYS:
--   job  job:<caller>:<id>
-- ARGV:
--   caller      int     the caller id
--   id          int     the job id
--   origin_msg  string  the origin's message key
--   now_s       int     now (s)
--   now_ms      int     now (ms)
--   job_fields  []raw   the job's field/value pairs (with origin, a JSON object holding
--                       msg_key and pk)
-- Libs: lib_busy lib_state
-- Reply: int 1 created, 0 a duplicate of the same request. Error: CONFLICT the key belongs to
--   a local job of this context.
-- Derives (the prelude's keys; context DB): coord:idx:jobs[:<status>], coord:events. A
--   replaced job keeps its msgs (this node's messages about it, deleted with it).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local caller = ARGV[1]
local id = ARGV[2]
local origin_msg = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local argi = 6
local job_fields
local n_job_fields = tonumber(ARGV[argi])
if n_job_fields <= 7000 then job_fields = {unpack(ARGV, argi + 1, argi + n_job_fields)} else job_fields = {}; for k = 1, n_job_fields do job_fields[k] = ARGV[argi + k] end end
argi = argi + 1 + n_job_fields
-- luagen: end of the prologue

local jk = KEYS[1]
local prev = rcall('HGET', jk, 'origin')
local kept
if rcall('EXISTS', jk) == 1 then
  if not prev then
    return redis.error_reply('CONFLICT job key ' .. jk .. ' belongs to a local job of this context')
  end
  local ok, o = pcall(cjson.decode, prev)
  if ok and o.msg_key == origin_msg then return 0 end
  local st = rcall('HGET', jk, 'status')
  if st then rcall('ZREM', K_JOB_INDEX .. ':' .. st, caller .. ':' .. id) end
  kept = rcall('HGET', jk, 'msgs') -- this node's messages about the job stay its
  rcall('DEL', jk)
end
local fields = {}
for i = 1, #job_fields, 2 do
  if job_fields[i] ~= 'msgs' then -- this node's own record, never the origin's to set
    fields[#fields + 1] = job_fields[i]
    fields[#fields + 1] = job_fields[i + 1]
  end
end
if kept then fields[#fields + 1] = 'msgs'; fields[#fields + 1] = kept end
rcall('HSET', jk, unpack(fields))
rcall('ZADD', K_JOB_INDEX, now_ms, caller .. ':' .. id)
local st = rcall('HGET', jk, 'status')
if st then rcall('ZADD', K_JOB_INDEX .. ':' .. st, now_ms, caller .. ':' .. id) end
event(EV_JOB_CREATED, 'router', now_ms, rcall('HGET', jk, 'flow_id') or '0', id, caller, st, 'from node ' .. (cjson.decode(rcall('HGET', jk, 'origin')).pk or '?'))
return 1
