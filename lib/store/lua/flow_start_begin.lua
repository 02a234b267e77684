-- flow_start_begin: the first call of a large flow's start in chunks (StartFlow: a
-- flow of more than startChunk jobs; a smaller one is started whole by start_flow):
-- checks that the flow is dispatched (or scheduled: its time came), empties its DAG
-- state and results (UNLINK: what an earlier, interrupted start wrote), and writes the
-- DAG's counters with the start's token (starting), which each flow_start_chunk and the
-- flow_start_commit check: a start begun again by another call takes the token over,
-- and the calls of the first one then change nothing. The flow stays dispatched (its
-- DAG not yet read by anyone) until flow_start_commit marks it started. The DAG hash
-- of a flow of 256 jobs or more is made a hash table at once: its s: and a: fields
-- pass Redis's listpack limit (hash-max-listpack-entries, 512 by default) while it
-- runs anyway, and each of the hundreds of fields inserted into a listpack before
-- scans it whole (~14M instructions for the 512 of a 1,000-job flow's start).
--
-- KEYS:
--   flow     flow:<flow>
--   dag      coord:dag:<flow>
--   results  coord:flowres:<flow>
-- ARGV:
--   caller  int     the caller id
--   total   int     the flow's number of jobs
--   token   string  this start's token
-- Reply: raw {1} begun; {0, status} the flow was not dispatched (or scheduled),
--   status "deleting" when a flow.delete in chunks marked it (flow_delete_chunk).
--   Error NOTFOUND flow.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local caller = ARGV[1]
local total = ARGV[2]
local token = ARGV[3]
-- luagen: end of the prologue

local st, deleting = unpack(rcall('HMGET', KEYS[1], 'status', 'deleting'))
if not st then return redis.error_reply('NOTFOUND flow') end
if deleting then return {0, 'deleting'} end -- (flow_delete_chunk's mark)
if st ~= FLOW_DISPATCHED and st ~= FLOW_SCHEDULED then return {0, st} end
rcall('UNLINK', KEYS[2], KEYS[3])
rcall('HSET', KEYS[2], 'caller', caller, 'total', total, 'terminal', 0, 'failed', 0, 'completed', 0, 'cancelled', 0, 'starting', token)
if tonumber(total) >= 256 then
  -- a value longer than hash-max-listpack-value (64 by default) converts the hash;
  -- deleting it does not convert it back
  rcall('HSET', KEYS[2], 'ht', string.rep('-', 65))
  rcall('HDEL', KEYS[2], 'ht')
end
return {1}
