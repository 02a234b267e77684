-- complete: applies the ends of jobs of one flow, in order: a node completes (its
-- results go into the flow's result map, its dependents whose dependencies are all done
-- get ready), or fails (a retry is scheduled while attempts are left, else the node
-- fails, its job goes to the DLQ and its transitive dependents that have not run are
-- cancelled). The flow ends (finalize) when every node is final.
--
-- KEYS:
--   dag      coord:dag:<flow>
--   flow     flow:<flow>
--   results  coord:flowres:<flow>
--   events   coord:events
-- ARGV:
--   ctx           int     the context id
--   flow          int     the flow id
--   caller        int     the caller id
--   now_s         int     now (s)
--   now_ms        int     now (ms)
--   actor         string  who applies the ends
--   retention_ms  int     retention (ms)
--   ends          []end   the ends, applied in order
--     id       int     the job id
--     attempt  num     the attempt that ended
--     status   string  its status
--     err      string  its error
--     fatal    bool    no retry
--     retries  num     retries (-1: the job's own; lib/retry decides)
--     backoff  num     the delay of a retry (ms; lib/retry's Policy)
-- Libs: lib_busy lib_state lib_finalize lib_complete
-- Reply: []done per end (code 0 nothing changed: a stale or repeated end, 1 applied, 2 retry scheduled)
--   code       int     0, 1 or 2
--   status     string  the flow's status when it ended, else ""
--   due        int     when the retry is due (ms)
--   cancelled  int     the nodes the failure cancelled (its transitive dependents that
--                      had not run; those past CASCADE_CHUNK are flow_cascade_chunk's)
--   ...ready   []int   the dependents made ready
-- Derives, from the DAG: context DB: job:<caller>:<id> of the flow's jobs, context:<ctx>,
--   coord:idx:jobs[:<status>], coord:idx:flows[:<status>], coord:dlq, coord:cascade:<flow>
--   (a failure's cancel past CASCADE_CHUNK nodes); DB 0 (SELECT 0, then back to the
--   context's DB): coord:due (a retry; dependents left to release, or nodes left to
--   cancel, with a PUBLISH on coord:delayedwake), coord:flows:active, coord:expire,
--   coord:flowdone (PUBLISH).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow = ARGV[2]
local caller = ARGV[3]
local now_s = ARGV[4]
local now_ms = ARGV[5]
local actor = ARGV[6]
local retention_ms = ARGV[7]
local argi = 8
local ends
local n_ends = tonumber(ARGV[argi])
ends = {}
argi = argi + 1
for k = 1, n_ends do
  ends[k] = {id = ARGV[argi], attempt = tonumber(ARGV[argi + 1]), status = ARGV[argi + 2], err = ARGV[argi + 3], fatal = ARGV[argi + 4] == '1', retries = tonumber(ARGV[argi + 5]), backoff = tonumber(ARGV[argi + 6])}
  argi = argi + 7
end
-- luagen: end of the prologue

local dag, fk, rk, ek = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local res = {}
for i, e in ipairs(ends) do
  local r, cancelled = complete(dag, fk, rk, ek, ctx, flow, caller, now_s, now_ms, actor, retention_ms,
    e.id, e.attempt, e.status, e.err, e.fatal, e.retries, e.backoff)
  table.insert(r, 4, cancelled or 0) -- the reply's cancelled, before the ready ids
  res[i] = r
end
return res
