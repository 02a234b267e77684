-- flow_retry_chunk: resets a chunk of a large failed flow's nodes for its retry, as
-- retry_flow resets a whole flow (flow_retry_begin came first; flow_retry_commit
-- follows): each failed or cancelled node gets a fresh attempt, ready when its
-- dependencies are all completed, else pending (its job waiting for its
-- prerequisites), its job's fields of the last run cleared and its DLQ entry removed;
-- the DAG's counters lose the nodes reset (terminal, failed, cancelled). The chunk is
-- the flow's jobs from done (the flow's retrying): a call whose from is not where the
-- retry is changes nothing (another caller did this chunk). The flow's kept results
-- (its result map as it ended) go back into the results hash a part per chunk.
--
-- KEYS:
--   flow     flow:<flow>
--   dag      coord:dag:<flow>
--   results  coord:flowres:<flow>
-- ARGV:
--   now_s    int       now (s)
--   now_ms   int       now (ms)
--   from     int       where the chunk starts in the flow's job list (0-based)
--   ids      []string  the chunk's job ids
--   results  []raw     field/value pairs of the flow's result map for the results hash
-- Libs: lib_busy lib_state
-- Reply: record what the call did
--   done      int    1 the chunk was done; 0 not (the retry is not where from says)
--   ...ready  []int  the nodes ready to run again (dispatched after the commit)
-- Derives: from the flow's caller: context DB: job:<caller>:<id> of the chunk's jobs,
--   coord:dlq, coord:idx:jobs[:<status>].

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local now_s = ARGV[1]
local now_ms = ARGV[2]
local from = ARGV[3]
local argi = 4
local ids
local n_ids = tonumber(ARGV[argi])
if n_ids <= 7000 then ids = {unpack(ARGV, argi + 1, argi + n_ids)} else ids = {}; for k = 1, n_ids do ids[k] = ARGV[argi + k] end end
argi = argi + 1 + n_ids
local results
local n_results = tonumber(ARGV[argi])
if n_results <= 7000 then results = {unpack(ARGV, argi + 1, argi + n_results)} else results = {}; for k = 1, n_results do results[k] = ARGV[argi + k] end end
argi = argi + 1 + n_results
-- luagen: end of the prologue

local fk, dag, rk = KEYS[1], KEYS[2], KEYS[3]
local h = rcall('HMGET', fk, 'retrying', 'caller_id')
if h[1] ~= from then return {0} end
local caller = h[2] or '0'
local out = {1}
local failed, cancelled = 0, 0
for _, id in ipairs(ids) do
  local s = rcall('HGET', dag, 's:' .. id)
  if s == NODE_FAILED or s == NODE_CANCELLED then
    if s == NODE_FAILED then failed = failed + 1 else cancelled = cancelled + 1 end
    if retry_node(dag, caller, id, now_s, now_ms) then out[#out + 1] = id end
  end
end
if failed + cancelled > 0 then
  rcall('HINCRBY', dag, 'terminal', int(-(failed + cancelled)))
  if failed > 0 then rcall('HINCRBY', dag, 'failed', int(-failed)) end
  if cancelled > 0 then rcall('HINCRBY', dag, 'cancelled', int(-cancelled)) end
end
if #results > 0 then call_each('HSET', rk, results, 2) end
rcall('HSET', fk, 'retrying', int(tonumber(from) + #ids))
return out
