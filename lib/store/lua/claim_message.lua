-- claim_message: claims up to max messages of msg_out or msg_in and reads what
-- routing them needs, in one round trip.
--
-- With route, a job request whose job a runner of this node can take (lib_route's
-- route_queue: it names no runner, and some runner has its executor or serves its
-- script type) is routed by the script itself, with no lease: the message is
-- acknowledged and the job key pushed onto its queue with its wake tokens (lib_wake:
-- one per runner id that may take it; what the router would do; the script is atomic,
-- so no crash can fall in between). A job request of several jobs (field
-- job_ids) is routed so if every one of its jobs is plain; otherwise it is claimed
-- whole, for the router to split (split_request). Every other message is claimed:
-- moved to the processing list under a lease.
--
-- KEYS:
--   queue   the queue (msg_out or msg_in)
--   proc    the processing list
--   leases  coord:leases
--   wake    the queue's wake list (DB 0: coord:wake:msg_out or coord:wake:msg_in)
-- ARGV:
--   consumer    string    the consumer
--   queue_name  string    the queue's name
--   expiry_ms   int       the leases' expiry (ms)
--   max         num       the most messages claimed
--   token       string    the wake token
--   held        string    tokens held (as for claim_start; "-": leave the tokens alone)
--   route       bool      route plain job requests here
--   ctx         int       the context id
--   now_s       int       now (s)
--   claims      []string  max claim ids
-- Libs: lib_busy lib_state lib_wake lib_ck lib_route
-- Reply: raw {script types hash, {{item, message hash, job fields, claim id, partial}…},
--   {job key, queue…}}: the claimed messages (for a job request the routing fields of
--   its job, and the coord:script_types counts, read once; a job routed here has only
--   the fields its queue depends on read) and the routed jobs. Of a job
--   result only the fields kind, job (joined from its parts), caller_id and flow_id are
--   returned (partial = 1). false: nothing taken.
-- Derives: context DB: the messages' jobs job:<caller>:<id> (named in the messages),
--   coord:script_types, coord:executors, queue:<type>, queue:exec:<executor>,
--   coord:prio:<queue> and context:<ctx> (lib_route: a job with a priority),
--   coord:ckrun:<key>, coord:ckheld:<key> and the held jobs' hashes (lib_ck) and
--   coord:wakers:<queue>; DB 0 (SELECT 0, last):
--   the runners' wake lists coord:wake:runner:<id>:<queue> and coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local consumer = ARGV[1]
local queue_name = ARGV[2]
local expiry_ms = ARGV[3]
local max = tonumber(ARGV[4])
local token = ARGV[5]
local held = ARGV[6]
local route = ARGV[7] == '1'
local ctx = ARGV[8]
local now_s = ARGV[9]
local argi = 10
local claims
local n_claims = tonumber(ARGV[argi])
if n_claims <= 7000 then claims = {unpack(ARGV, argi + 1, argi + n_claims)} else claims = {}; for k = 1, n_claims do claims[k] = ARGV[argi + k] end end
argi = argi + 1 + n_claims
-- luagen: end of the prologue

-- The router may not publish job ends (coord:jobdone): a job at its concurrency
-- key's limit is held here whatever its policy (lib_ck).
ck_policies = false
local JOB_FIELDS = {'id', 'caller_id', 'context_id', 'flow_id', 'script_type', 'runner_id', 'attempt', 'status', 'function_name', 'priority'} -- RoutingJobFields (a test checks)
local out = {}
local taken = 0
-- routing is the queue a job goes to (routed here, lib_route), or else (nil) the job's
-- routing fields (jh: a flat list) for the router, with the script types.
local function routing(jk)
  local target = route and route_target(jk)
  if target then return {}, target end
  local v = rcall('HMGET', jk, unpack(JOB_FIELDS))
  local jh = {}
  for k = 1, #JOB_FIELDS do
    if v[k] then jh[#jh + 1] = JOB_FIELDS[k]; jh[#jh + 1] = v[k] end
  end
  if not route_types then route_types = rcall('HGETALL', K_SCRIPT_TYPES) end
  return jh, nil
end
for n = 1, max do
  local item = rcall('RPOP', KEYS[1])
  if not item then break end
  taken = taken + 1
  -- (job and job_ids may be stored in parts: lib_state's part_fields)
  local kj = rcall('HMGET', item, 'kind', 'job', 'job_ids', 'caller_id', 'job.n', 'job_ids.n', 'flow_id')
  local kind, job, ids = kj[1], read_parts(item, 'job', kj[2], kj[5]), read_parts(item, 'job_ids', kj[3], kj[6])
  local jh, done = {}, false
  if kind == 'job_request' and ids then
    -- Several jobs of a flow: routed here if every one of them is plain, else the
    -- router splits the message.
    local jobs = {}
    for id in string.gmatch(ids, '%d+') do
      local jk = K_JOB .. (kj[4] or '') .. ':' .. id
      local target = route and route_target(jk)
      if not target then jobs = nil; break end
      jobs[#jobs + 1] = {jk, target}
    end
    if jobs and #jobs > 0 then
      for _, j in ipairs(jobs) do route_add(j[1], j[2]) end
      done = true
    end
  elseif kind == 'job_request' then
    -- The job's ids open the JSON this code writes ([{"id":…,"caller_id":…); a
    -- message written otherwise is decoded whole.
    local id, caller = string.match(job or '', '^%[{"id":(%d+),"caller_id":(%d+)[,}]')
    if not id then
      local ok, jobs = pcall(cjson.decode, job or '')
      if ok and type(jobs) == 'table' and type(jobs[1]) == 'table' then
        caller, id = jobs[1].caller_id, jobs[1].id
      end
    end
    caller, id = tonumber(caller), tonumber(id)
    if caller and id then
      local jk = K_JOB .. string.format('%d:%d', caller, id)
      local target
      jh, target = routing(jk)
      if target then
        route_add(jk, target)
        done = true
      end
    end
  end
  if done then
    rcall('HSET', item, 'status', MSG_ACKNOWLEDGED, 'updated_at', now_s)
  else
    rcall('LPUSH', KEYS[2], item)
    rcall('ZADD', KEYS[3], expiry_ms, consumer .. '\t' .. queue_name .. '\t' .. item .. '\t' .. claims[n])
    if kind == 'job_result' then
      -- what a job result for this node's scheduler needs (its list's jobs are of
      -- its caller and flow); the rest is read if needed
      out[#out + 1] = {item, {'kind', kind, 'job', job or '', 'caller_id', kj[4] or '', 'flow_id', kj[7] or ''}, jh, claims[n], 1}
    else
      out[#out + 1] = {item, rcall('HGETALL', item), jh, claims[n], 0}
    end
  end
end
if taken == 0 then return false end
-- The routed jobs, in the order they were routed.
route_flush(ctx)
local extra = 0
if held ~= '-' then extra = taken - tonumber(held) end
if extra > 0 then
  rcall('SELECT', '0')
  rcall('LREM', KEYS[4], extra, token)
end
return {route_types or {}, out, route_routed}
