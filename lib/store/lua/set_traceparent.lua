-- set_traceparent: a producer's W3C traceparent stored on a part of a flow's jobs and,
-- with the last part, on the flow (flow.start's trace: the jobs' attempts continue it),
-- each hash only while it exists and, a job's, names the flow: a plain HSET made the
-- hashes of a flow deleted meanwhile again, holding the traceparent alone (neither
-- flow.load nor a delete could take them).
--
-- KEYS:
--   flow  flow:<flow>
-- ARGV:
--   caller  string  the flow's caller
--   flow    string  the flow id
--   tp      string  the traceparent
--   last    bool    the flow's own hash too (after the part's jobs)
--   ids     string  the part's job ids, separated by single spaces
-- Reply: int the hashes written
-- Derives: the jobs' keys, job:<caller>:<id>.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local caller = ARGV[1]
local flow = ARGV[2]
local tp = ARGV[3]
local last = ARGV[4] == '1'
local ids = ARGV[5]
-- luagen: end of the prologue

local prefix, n = K_JOB .. caller .. ':', 0
for id in string.gmatch(ids, '%d+') do
  local jk = prefix .. id
  if rcall('HGET', jk, 'flow_id') == flow then
    rcall('HSET', jk, 'traceparent', tp)
    n = n + 1
  end
end
if last and rcall('EXISTS', KEYS[1]) == 1 then
  rcall('HSET', KEYS[1], 'traceparent', tp)
  n = n + 1
end
return n
