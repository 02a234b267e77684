-- flow_jobs: claims a flow's jobs, of one caller, for the flow before the flow is
-- stored (flow.create), or gives back what its claims took when it is refused. A
-- claim checks every job of its part first — each must exist and name no flow or this
-- one; the first that does not is returned and nothing is written — and then sets
-- flow_id on those that do not name the flow yet: of two flow.create calls naming the
-- same job at once, the first claim takes it and the other is refused, naming the
-- job and the flow (the check and the link were two steps that both calls could
-- pass: two flows stored with one job, the loser's never to end). A part whose jobs
-- all name the flow already (flow.begin's, a retried create's) writes nothing. With
-- flow 0, a claim that passes reserves the flow's id: the counter's next id whose
-- flow and stage keys are free (as create's id 0 and flow.begin take one). A release
-- (the flow refused: another part's claim refused, or its id stored with other
-- content) removes flow_id from the jobs its claims set it on where it still names
-- the flow, and gives a reserved id back while it is the counter's last. A
-- supervisor-daemon gone between a claim and the flow's creation leaves the jobs
-- naming a flow not stored, as jobs created with a flow_id are: flow.create of that
-- flow with them stores it; other flows are refused them, naming it. One call a part
-- of a large flow's jobs (lib/store flowJobsPart), where supervisor-daemon sent an
-- HMGET and an HSET a job in pipelines: ~15% of its CPU in a 10,000-job flow's
-- creation (docs/benchmarks.md, "Where (b)'s time goes on K").
--
-- KEYS:
--   flow_seq  coord:seq:flow
-- ARGV:
--   caller     string  the caller id
--   flow       string  the flow id (a claim's "0": reserve one)
--   release    bool    give back (else claim)
--   unreserve  bool    a release's: the flow's id was reserved by a claim
--   ids        string  the jobs' ids, separated by single spaces (a release's: the
--                      ones its claims set flow_id on)
-- Reply: record what the call did
--   flow     int     the flow's id (a claim's reserved one; 0: a refused claim of flow 0)
--   id       string  the first job refused ("": none)
--   owner    string  the flow it belongs to ("": it is missing)
--   claimed  string  the ids of the jobs this claim set flow_id on, separated by
--                    single spaces
-- Derives: the jobs' keys, job:<caller>:<id>; a reserved id's flow:<id> and
--   coord:flowstage:<id> (read: free).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local caller = ARGV[1]
local flow = ARGV[2]
local release = ARGV[3] == '1'
local unreserve = ARGV[4] == '1'
local ids = ARGV[5]
-- luagen: end of the prologue

local prefix = K_JOB .. caller .. ':'
if release then
  for id in string.gmatch(ids, '%d+') do
    local jk = prefix .. id
    if rcall('HGET', jk, 'flow_id') == flow then rcall('HDEL', jk, 'flow_id') end
  end
  if unreserve and rcall('GET', KEYS[1]) == flow then
    if flow == '1' then rcall('DEL', KEYS[1]) else rcall('DECR', KEYS[1]) end -- (as it was: none, or 0)
  end
  return {tonumber(flow), '', '', ''}
end
local todo, n = {}, 0
for id in string.gmatch(ids, '%d+') do
  local v = rcall('HMGET', prefix .. id, 'id', 'flow_id')
  if not v[1] then return {0, id, '', ''} end
  local f = v[2] or ''
  if f == '' or f == '0' then
    n = n + 1
    todo[n] = id
  elseif f ~= flow then
    return {0, id, f, ''}
  end
end
if flow == '0' then
  repeat
    flow = string.format('%d', rcall('INCR', KEYS[1]))
  until rcall('EXISTS', K_FLOW .. flow) == 0 and rcall('EXISTS', K_FLOW_STAGE .. flow) == 0
end
for k = 1, n do
  rcall('HSET', prefix .. todo[k], 'flow_id', flow)
end
return {tonumber(flow), '', '', table.concat(todo, ' ')}
