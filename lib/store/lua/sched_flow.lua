-- sched_flow: begins the run of a flow's schedule for one tick (docs/scheduling.md),
-- once: the tick's uniqueness key (keys.Unique of store.RunUniqueKey) names the run.
-- When it names a flow that exists (stored) or whose creation is under way (its
-- stage), or a job that exists (the schedule's run before it became a flow's), that
-- is the run and nothing changes. Otherwise (no run, or one whose creation was
-- interrupted and swept) the flow's creation begins as flow.begin's (lib_stage: the
-- flow's id and its n jobs' ids, a stage that expires unless stored in time) and the
-- key names the new flow for unique_ttl_ms.
--
-- KEYS:
--   unique    coord:unique:<sched:ctx:id:tick>
--   flow_seq  coord:seq:flow
--   job_seq   coord:seq:job:<caller>
-- ARGV:
--   ctx            string  the context id
--   caller         string  the caller id (the schedule's)
--   n              num     the number of the flow's jobs (at least 1)
--   ttl_ms         int     the stage's ttl (ms)
--   now_ms         num     now (ms)
--   unique_ttl_ms  int     how long the key names the run (ms)
-- Reply: record the tick's run (error CONFLICT: the caller's job ids would pass 2^32-1)
--   state  string  begun (a new flow's creation), stored (the flow exists), staging
--                  (its creation is under way elsewhere), job (a job is the run)
--   run    string  the flow's id, or the job's "<caller>:<id>" (job)
--   first  int     begun: the first job id (0 otherwise)
--   last   int     begun: the last job id (0 otherwise)
-- Libs: lib_stage
-- Derives: context DB: flow:<id> and coord:flowstage:<id> of the flow the key names
--   (read), job:<caller>:<id> of the job it names (read); lib_stage's (begun).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local caller = ARGV[2]
local n = tonumber(ARGV[3])
local ttl_ms = ARGV[4]
local now_ms = tonumber(ARGV[5])
local unique_ttl_ms = ARGV[6]
-- luagen: end of the prologue

local prev = rcall('GET', KEYS[1])
if prev then
  if string.sub(prev, 1, #K_FLOW) == K_FLOW then
    local id = string.sub(prev, #K_FLOW + 1)
    if rcall('EXISTS', prev) == 1 then return {'stored', id, 0, 0} end
    if rcall('EXISTS', K_FLOW_STAGE .. id) == 1 then return {'staging', id, 0, 0} end
  elseif rcall('EXISTS', K_JOB .. prev) == 1 then
    return {'job', prev, 0, 0}
  end
end
local flow, first, last, expires = stage_begin(KEYS[2], KEYS[3], caller, n, ttl_ms, now_ms)
if not flow then return redis.error_reply(first) end
rcall('SET', KEYS[1], K_FLOW .. flow, 'PX', unique_ttl_ms)
stage_expire(ctx, flow, expires)
return {'begun', flow, first, last}
