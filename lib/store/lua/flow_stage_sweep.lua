-- flow_stage_sweep: removes a staged flow's leftovers a chunk at a time. A stage
-- whose flow was stored is dropped (its jobs are the flow's). One that expired (or,
-- with force, flow.abort, one still open) is marked swept and loses up to chunk of its
-- job ids per call, from where the last call stopped: each id's job is deleted when it
-- names this flow (flow_id), with its index entries; the stage goes after the last.
-- A stage whose expiry was renewed is left, its expiry entry put back.
--
-- KEYS:
--   stage  coord:flowstage:<flow>
--   flow   flow:<flow>
-- ARGV:
--   ctx      string  the context id
--   flow_id  string  the flow id
--   now_ms   num     now (ms)
--   force    bool    sweep an open stage now (flow.abort)
--   chunk    num     job ids a call
--   hold_ms  num     the hold while swept (ms: the entry that takes up an interrupted sweep)
-- Reply: record what the call did (error CONFLICT: with force, a stage being stored)
--   more     int  1: call again
--   deleted  int  jobs deleted by this call
-- Derives: context DB: job:<caller>:<id> of the stage's range, coord:log:<caller>:<id>,
--   coord:idx:jobs[:<status>]; DB 0 (SELECT 0): coord:expire (member <ctx>:stage:<flow>).

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local flow_id = ARGV[2]
local now_ms = tonumber(ARGV[3])
local force = ARGV[4] == '1'
local chunk = tonumber(ARGV[5])
local hold_ms = tonumber(ARGV[6])
-- luagen: end of the prologue

local sk, fk = KEYS[1], KEYS[2]
local flow, now = flow_id, now_ms
local member = ctx .. ':stage:' .. flow
local st = rcall('HMGET', sk, 'caller', 'first', 'last', 'expires_ms', 'state', 'next')
if not st[1] then return {0, 0} end
if rcall('EXISTS', fk) == 1 then
  rcall('DEL', sk)
  rcall('SELECT', '0')
  rcall('ZREM', K_EXPIRE, member)
  return {0, 0}
end
if st[5] ~= 'swept' then
  if force and st[5] == 'storing' then
    return redis.error_reply('CONFLICT flow ' .. flow .. ' is being stored (flow.create)')
  end
  if not force and tonumber(st[4]) > now then
    rcall('SELECT', '0')
    rcall('ZADD', K_EXPIRE, st[4], member)
    return {0, 0}
  end
end
local caller, last = st[1], tonumber(st[3])
local from = tonumber(st[6] or st[2])
local to = math.min(from + chunk - 1, last)
local deleted = 0
for id = from, to do
  local sid = string.format('%d', id)
  local jk = K_JOB .. caller .. ':' .. sid
  local f = rcall('HMGET', jk, 'flow_id', 'status')
  if f[1] == flow then
    local m = caller .. ':' .. sid
    rcall('UNLINK', jk, K_JOB_LOG .. m)
    rcall('ZREM', K_JOB_INDEX, m)
    if f[2] then rcall('ZREM', K_JOB_INDEX .. ':' .. f[2], m) end
    deleted = deleted + 1
  end
end
if to >= last then
  rcall('DEL', sk)
  rcall('SELECT', '0')
  rcall('ZREM', K_EXPIRE, member)
  return {0, deleted}
end
rcall('HSET', sk, 'state', 'swept', 'next', string.format('%d', to + 1))
rcall('SELECT', '0')
rcall('ZADD', K_EXPIRE, string.format('%d', now + hold_ms), member)
return {1, deleted}
