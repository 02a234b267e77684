-- flow_jobs: a flow's jobs, of one caller, checked before the flow is created
-- (flow.create) and then linked to it: without link, finds the first of them that is
-- missing or belongs to another flow, and counts those that do not name the flow yet;
-- with link, sets each one's flow_id (repeated on a retried create, so that a crash
-- between the flow's creation and this heals; a part whose jobs all name the flow
-- already, as flow.begin's jobs do, is not linked again). One
-- call a part of a large flow's jobs (lib/store flowJobsPart), where supervisor-daemon
-- sent an HMGET and an HSET a job in pipelines: ~15% of its CPU in a 10,000-job flow's
-- creation (docs/benchmarks.md, "Where (b)'s time goes on K").
--
-- KEYS: none
-- ARGV:
--   caller  string  the caller id
--   flow    string  the flow id
--   link    bool    set the jobs' flow_id (else check them)
--   ids     string  the jobs' ids, separated by single spaces
-- Reply: record the first job refused (a check's; a link's: none)
--   id        string  its id ("": none)
--   flow      string  the flow it belongs to ("": it is missing)
--   unlinked  int     a check's: the jobs that do not name the flow (0 with a refusal)
-- Derives: the jobs' keys, job:<caller>:<id>.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local caller = ARGV[1]
local flow = ARGV[2]
local link = ARGV[3] == '1'
local ids = ARGV[4]
-- luagen: end of the prologue

local prefix = K_JOB .. caller .. ':'
local unlinked = 0
for id in string.gmatch(ids, '%d+') do
  local jk = prefix .. id
  if link then
    rcall('HSET', jk, 'flow_id', flow)
  else
    local v = rcall('HMGET', jk, 'id', 'flow_id')
    if not v[1] then return {id, '', 0} end
    local f = v[2] or ''
    if f ~= '' and f ~= '0' and f ~= flow then return {id, f, 0} end
    if f ~= flow then unlinked = unlinked + 1 end
  end
end
return {'', '', unlinked}
