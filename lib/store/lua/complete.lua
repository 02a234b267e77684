-- complete: applies the ends of jobs of one flow, in order: a node completes (its
-- results go into the flow's result map, its dependents whose dependencies are all done
-- get ready), or fails (a retry is scheduled while attempts are left, else the node
-- fails, its job goes to the DLQ and its transitive dependents that have not run are
-- cancelled). The flow ends (finalize) when every node is final.
--
-- KEYS: [1] coord:dag:<flow>, [2] flow:<flow>, [3] coord:flowres:<flow>, [4] coord:events.
-- ARGV: [1] context id, [2] flow id, [3] caller id, [4] now (s), [5] now (ms), [6] actor,
--   [7] retention (ms), then per end 7 items: job id, attempt, status, error, fatal (1/0),
--   retries (-1: the job's own), backoff (ms).
-- Reply: per end {code, flow status or "", retry due (ms), ready job ids…}: code 0
--   nothing changed (a stale or repeated end), 1 applied, 2 retry scheduled.
-- Derives, from the DAG: context DB: job:<caller>:<id> of the flow's jobs, context:<ctx>,
--   coord:idx:jobs[:<status>], coord:idx:flows[:<status>], coord:dlq; DB 0 (SELECT 0, then
--   back to the context's DB): coord:due (a retry), coord:flows:active, coord:expire,
--   coord:flowdone (PUBLISH).

local dag, fk, rk, ek = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ctx, flow, caller, now_s, now_ms, actor, retention_ms = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local res = {}
for i = 8, #ARGV, 7 do
  res[#res + 1] = complete(dag, fk, rk, ek, ctx, flow, caller, now_s, now_ms, actor, retention_ms,
    ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3], ARGV[i + 4] == '1', tonumber(ARGV[i + 5]), tonumber(ARGV[i + 6]))
end
return res
