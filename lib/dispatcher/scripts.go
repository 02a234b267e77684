package dispatcher

import "github.com/redis/go-redis/v9"

// Every transition of a job that involves more than one key is one Lua script, so that
// a crash between two commands cannot leave a job half-moved. Job hash keys that a
// script derives from a job id (the requeue script) are built from the prefix inside
// the script: the protocol runs on one Redis server, never a cluster.

// endStopped ends a job that was stopped before it started: status error, error
// "stopped", the reply pushed. Writing it twice changes nothing (no second reply).
const luaEndStopped = `
local function end_stopped(job, reply, now, ttl)
  local st = redis.call('HMGET', job, 'status', 'error')
  if st[1] == 'error' and st[2] == 'stopped' then return 0 end
  redis.call('HSET', job, 'status', 'error', 'error', 'stopped', 'updated_at', now)
  redis.call('LPUSH', reply, 'stopped')
  redis.call('PEXPIRE', reply, ttl)
  return 1
end
`

// startScript marks a claimed job started.
// KEYS: processing, job, claims, stopmark, reply, log
// ARGV: job id, process, now (ISO 8601), reply TTL (ms)
// Returns ok | lost (no longer in our processing list) | gone (no hash) | stopped |
// dropped (stopped before, by the process that took the stop request).
var startScript = redis.NewScript(luaEndStopped + `
if not redis.call('LPOS', KEYS[1], ARGV[1]) then return 'lost' end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  return 'gone'
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('DEL', KEYS[4])
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  if end_stopped(KEYS[2], KEYS[5], ARGV[3], ARGV[4]) == 1 then return 'stopped' end
  return 'dropped'
end
redis.call('HSET', KEYS[2], 'status', 'started', 'updated_at', ARGV[3])
redis.call('HDEL', KEYS[2], 'output', 'error')
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('DEL', KEYS[6])
return 'ok'
`)

// finishScript writes a job's end and its reply, and acknowledges the claim — only if
// this process still holds the claim.
// KEYS: processing, job, claims, reply, stopmark
// ARGV: job id, process, now, status (finished|error), output, error, reply payload, reply TTL (ms)
// Returns 1 written, 2 claim held but the hash is gone (reply only), 0 claim lost.
var finishScript = redis.NewScript(`
if redis.call('LREM', KEYS[1], 1, ARGV[1]) == 0 then return 0 end
if redis.call('HGET', KEYS[3], ARGV[1]) == ARGV[2] then redis.call('HDEL', KEYS[3], ARGV[1]) end
redis.call('DEL', KEYS[5])
local wrote = 2
if redis.call('EXISTS', KEYS[2]) == 1 then
  wrote = 1
  if ARGV[4] == 'finished' then
    redis.call('HSET', KEYS[2], 'status', 'finished', 'output', ARGV[5], 'updated_at', ARGV[3])
    redis.call('HDEL', KEYS[2], 'error')
  else
    redis.call('HSET', KEYS[2], 'status', 'error', 'error', ARGV[6], 'updated_at', ARGV[3])
    if ARGV[5] ~= '' then redis.call('HSET', KEYS[2], 'output', ARGV[5]) end
  end
end
redis.call('LPUSH', KEYS[4], ARGV[7])
redis.call('PEXPIRE', KEYS[4], ARGV[8])
return wrote
`)

// parkScript checks a claimed job's dependencies atomically and, when some have not
// finished, moves the job from the processing list to the waiting zset and registers
// it with each unfinished dependency.
// KEYS: processing, job, stopmark, reply, waiting, dep job 1..n, dependents 1..n
// ARGV: job id, now, reply TTL (ms), re-check at (ms), member "<worker_id>\t<job_id>", dependents TTL (ms), n
// Returns {ready} | {waiting, count} | {failed, index} | {stopped} | {dropped} | {lost}.
var parkScript = redis.NewScript(luaEndStopped + `
local n = tonumber(ARGV[7])
if not redis.call('LPOS', KEYS[1], ARGV[1]) then return {'lost'} end
if redis.call('EXISTS', KEYS[3]) == 1 then
  redis.call('DEL', KEYS[3])
  redis.call('LREM', KEYS[1], 1, ARGV[1])
  if redis.call('EXISTS', KEYS[2]) == 1 and end_stopped(KEYS[2], KEYS[4], ARGV[2], ARGV[3]) == 1 then return {'stopped'} end
  return {'dropped'}
end
local pending = {}
for i = 1, n do
  local st = string.lower(redis.call('HGET', KEYS[5 + i], 'status') or '')
  if st == 'error' then return {'failed', tostring(i)} end
  if st ~= 'finished' then table.insert(pending, i) end
end
if #pending == 0 then return {'ready'} end
redis.call('LREM', KEYS[1], 1, ARGV[1])
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[1])
for _, i in ipairs(pending) do
  local k = KEYS[5 + n + i]
  redis.call('SADD', k, ARGV[5])
  redis.call('PEXPIRE', k, ARGV[6])
end
return {'waiting', tostring(#pending)}
`)

// releaseScript puts a waiting job back at the consuming end of its work queue,
// exactly once.
// KEYS: waiting, work queue
// ARGV: job id
var releaseScript = redis.NewScript(`
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 then
  redis.call('RPUSH', KEYS[2], ARGV[1])
  return 1
end
return 0
`)

// stopScript handles a stop request for a job that does not run in the process that
// popped the request.
// KEYS: job, claims, stopmark, waiting, reply
// ARGV: job id, now, stop mark TTL (ms), reply TTL (ms)
// Returns {claimed, process} | {final, status} | {foreign} | {stopped} | {missing}.
var stopScript = redis.NewScript(luaEndStopped + `
if redis.call('EXISTS', KEYS[1]) == 0 then return {'missing'} end
local owner = redis.call('HGET', KEYS[2], ARGV[1])
if owner then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
  return {'claimed', owner}
end
local st = string.lower(redis.call('HGET', KEYS[1], 'status') or '')
if st == 'finished' or st == 'error' then return {'final', st} end
redis.call('SET', KEYS[3], '1', 'PX', ARGV[3])
if st == 'started' then return {'foreign'} end
redis.call('ZREM', KEYS[4], ARGV[1])
end_stopped(KEYS[1], KEYS[5], ARGV[2], ARGV[4])
return {'stopped'}
`)

// requeueScript hands every job of one of our processes back to its work queue (at
// the consuming end, oldest first) and removes the process: for a process that
// stopped heart-beating (only if its heartbeat is still older than the cutoff), or
// for this process at shutdown (cutoff "-").
// KEYS: procs, proc, ctl, claims, then (processing, work queue) pairs
// ARGV: process, cutoff (ms) or "-", now, job key prefix
// Returns the number of jobs moved, or -1 when the process is alive after all.
var requeueScript = redis.NewScript(`
if ARGV[2] ~= '-' then
  local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if s and tonumber(s) > tonumber(ARGV[2]) then return -1 end
end
local n = 0
for i = 5, #KEYS, 2 do
  while true do
    local id = redis.call('LPOP', KEYS[i])
    if not id then break end
    redis.call('RPUSH', KEYS[i + 1], id)
    if redis.call('HGET', KEYS[4], id) == ARGV[1] then
      redis.call('HDEL', KEYS[4], id)
      local jk = ARGV[4] .. id
      if redis.call('HGET', jk, 'status') == 'started' then
        redis.call('HSET', jk, 'status', 'dispatched', 'updated_at', ARGV[3])
      end
    end
    n = n + 1
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('DEL', KEYS[2], KEYS[3])
return n
`)

// heartbeatScript refreshes this process's heartbeat, unless another process removed
// it as stale (then 0: the caller re-registers after giving up what it lost).
// KEYS: procs
// ARGV: process, now (ms)
var heartbeatScript = redis.NewScript(`
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  return 1
end
return 0
`)

// appendLogScript appends to a job's bounded Redis copy of its output.
// KEYS: log
// ARGV: chunk, max bytes, TTL (ms)
var appendLogScript = redis.NewScript(`
local cur = redis.call('STRLEN', KEYS[1])
local max = tonumber(ARGV[2])
if cur >= max then return cur end
local c = ARGV[1]
if cur + #c > max then
  c = string.sub(c, 1, max - cur) .. '\n[hero] output truncated: Redis keeps the first ' .. max .. ' bytes\n'
end
redis.call('APPEND', KEYS[1], c)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return cur + #c
`)
