-- flow_jobs: claims a flow's jobs, of one caller, for the flow before the flow is
-- stored (flow.create), or ends the claim: given back when the flow is refused, or
-- done once it is stored. A claim checks every job of its part first — each must
-- exist and name no flow or this one; the first that does not is returned and
-- nothing is written — and then sets flow_id on those that do not name the flow yet:
-- of two flow.create calls naming the same job at once, the first claim takes it and
-- the other is refused, naming the job and the flow (the check and the link were two
-- steps that both calls could pass: two flows stored with one job, the loser's never
-- to end). A part whose jobs all name the flow already (flow.begin's, a retried
-- create's) writes no job. The claims of one create hold the flow's id with their
-- token (coord:flowclaim:<flow>, ttl hold_ms, taken by the first part's call; the
-- others must find it theirs): another create of the same id meanwhile is refused
-- as busy, so that no two creates of one id mix their claims (one's give-back would
-- take jobs from the other's stored flow), and job.delete refuses a job whose flow
-- is held so (lua/delete_job.lua). With flow 0, the first part's claim that passes
-- reserves the flow's id: the counter's next id whose flow, stage and claim keys are
-- free (as create's id 0 and flow.begin take one). A give-back removes flow_id from
-- the jobs its claims set it on where it still names the flow, and gives a reserved id
-- back while it is the counter's last; a give-back or a done drops the hold when it is
-- the token's. A supervisor-daemon gone between a claim and the flow's store leaves
-- the jobs naming a flow not stored, as jobs created with a flow_id are: flow.create
-- of that flow with them stores it (after the hold's ttl); other flows are refused
-- them, naming it. One call a part of a large flow's jobs (lib/store flowJobsPart),
-- where supervisor-daemon sent an HMGET and an HSET a job in pipelines: ~15% of its
-- CPU in a 10,000-job flow's creation (docs/benchmarks.md, "Where (b)'s time goes on
-- K").
--
-- KEYS:
--   flow_seq  coord:seq:flow
-- ARGV:
--   caller     string  the caller id
--   flow       string  the flow id (a first claim's "0": reserve one)
--   token      string  the create's token (its claims' and their end's)
--   mode       string  "first" (the first part's claim: takes the hold), "claim" (a
--                      later part's), "release" (give back), "done" (stored)
--   hold_ms    int     the hold's ttl (ms)
--   ids        string  the jobs' ids, separated by single spaces (a give-back's: the
--                      ones its claims set flow_id on)
-- Reply: record what the call did
--   flow     int     the flow's id (a first claim's reserved one; 0: a refused claim
--                    of flow 0)
--   id       string  the first job refused ("": none)
--   owner    string  the flow it belongs to ("": it is missing, or busy)
--   busy     int     1: refused, another create of the flow holds it
--   claimed  string  the ids of the jobs this claim set flow_id on, separated by
--                    single spaces
-- Derives: the jobs' keys, job:<caller>:<id>; the flow's coord:flowclaim:<flow>; a
--   reserved id's flow:<id>, coord:flowstage:<id> and coord:flowclaim:<id> (read:
--   free).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local caller = ARGV[1]
local flow = ARGV[2]
local token = ARGV[3]
local mode = ARGV[4]
local hold_ms = ARGV[5]
local ids = ARGV[6]
-- luagen: end of the prologue

local prefix = K_JOB .. caller .. ':'
if mode == 'release' or mode == 'done' then
  if mode == 'release' then
    for id in string.gmatch(ids, '%d+') do
      local jk = prefix .. id
      if rcall('HGET', jk, 'flow_id') == flow then rcall('HDEL', jk, 'flow_id') end
    end
  end
  if rcall('GET', K_FLOW_CLAIM .. flow) == token then rcall('DEL', K_FLOW_CLAIM .. flow) end
  -- a reserved id (a first claim's of flow 0: the token names it) given back
  if mode == 'release' and string.sub(token, 1, 2) == '0.' and rcall('GET', KEYS[1]) == flow then
    if flow == '1' then rcall('DEL', KEYS[1]) else rcall('DECR', KEYS[1]) end -- (as it was: none, or 0)
  end
  return {tonumber(flow), '', '', 0, ''}
end
if flow ~= '0' then
  local holder = rcall('GET', K_FLOW_CLAIM .. flow)
  if holder ~= token and (holder or mode ~= 'first') then return {0, '', '', 1, ''} end
end
local todo, n = {}, 0
for id in string.gmatch(ids, '%d+') do
  local v = rcall('HMGET', prefix .. id, 'id', 'flow_id')
  if not v[1] then return {0, id, '', 0, ''} end
  local f = v[2] or ''
  if f == '' or f == '0' then
    n = n + 1
    todo[n] = id
  elseif f ~= flow then
    return {0, id, f, 0, ''}
  end
end
if flow == '0' then
  repeat
    flow = string.format('%d', rcall('INCR', KEYS[1]))
  until rcall('EXISTS', K_FLOW .. flow, K_FLOW_STAGE .. flow, K_FLOW_CLAIM .. flow) == 0
end
if mode == 'first' then rcall('SET', K_FLOW_CLAIM .. flow, token, 'PX', hold_ms) end
for k = 1, n do
  rcall('HSET', prefix .. todo[k], 'flow_id', flow)
end
return {tonumber(flow), '', '', 0, table.concat(todo, ' ')}
