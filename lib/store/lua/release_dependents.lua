-- release_dependents: releases the next RELEASE_CHUNK dependents of a completed node
-- that has more than one call's worth (lib_complete's release_later left them, with
-- rel:<id> "<done> <fin>" in the DAG hash): each whose dependencies are now all
-- completed gets ready (its job dispatched, its ready time the node's end). When the
-- last is released, rel:<id> goes. The caller dispatches the ready ones and calls
-- again while more are left. Nothing is left to do when the DAG holds no rel:<id> (all
-- released, or the flow deleted).
--
-- KEYS:
--   dag  coord:dag:<flow>
-- ARGV:
--   caller  int  the flow's caller id
--   id      int  the completed node's job id
--   now_s   int  now (s)
-- Libs: lib_busy lib_state lib_finalize lib_complete
-- Reply: record what the call did
--   more      int    1 when dependents are left for another call, else 0
--   ...ready  []int  the dependents made ready
-- Derives: context DB: job:<caller>:<id> of the dependents, coord:idx:jobs[:<status>].

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local caller = ARGV[1]
local id = ARGV[2]
local now_s = ARGV[3]
-- luagen: end of the prologue

local dag = KEYS[1]
local rel = redis.call('HMGET', dag, 'rel:' .. id, 'd:' .. id)
if not rel[1] then return {0} end
local done, fin = string.match(rel[1], '^(%d+) (%d+)$')
done = tonumber(done)
local deps = cjson.decode(rel[2] or '[]')
local last = math.min(#deps, done + RELEASE_CHUNK)
local out = {0}
release(dag, caller, deps, done + 1, last, fin, now_s, out)
if last < #deps then
  redis.call('HSET', dag, 'rel:' .. id, last .. ' ' .. fin)
  out[1] = 1
else
  redis.call('HDEL', dag, 'rel:' .. id)
end
return out
