-- extend: extends a claim's lease while it is held, or takes a job's claim back when
-- its lease expired while the job still runs under it.
--
-- A lease that a sweep took back (its holder was frozen, or cut off from Redis, past
-- the lease) while no other claim has taken its job since is taken back as it was, in
-- one step: the job still names this claim and is started (the attempt the holder
-- runs is the job's latest), so its lease and its copy in the processing list return,
-- and the copy the sweep queued, not claimed since, leaves its queue. A message's
-- lease, or a job's under another claim now, stays lost.
--
-- KEYS:
--   leases  coord:leases
-- ARGV:
--   member     string  the lease member ("<consumer>\t<queue>\t<item>\t<claim>")
--   expiry_ms  int     the new expiry (ms)
--   ctx        int     the context id
-- Libs: lib_busy
-- Reply: int 1 extended, 2 taken back (it had expired and been swept), 0 the lease is gone
--   (the claim was taken back, or its job ended or runs under another claim).
-- Derives, from the lease member: context DB: coord:proc:<consumer>, the queue, the
--   job's hash; DB 0 (SELECT 0, last): coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local member = ARGV[1]
local expiry_ms = ARGV[2]
local ctx = ARGV[3]
-- luagen: end of the prologue

if rcall('ZSCORE', KEYS[1], member) then
  rcall('ZADD', KEYS[1], expiry_ms, member)
  return 1
end
local consumer, queue, item, claim = string.match(member, '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]+)$')
if not claim or not string.match(item, '^' .. K_JOB .. '%d+:%d+$') then return 0 end
local cur = rcall('HMGET', item, 'claim', 'status')
if cur[1] ~= claim or cur[2] ~= JOB_STARTED then return 0 end
rcall('ZADD', KEYS[1], expiry_ms, member)
local proc = K_PROCESSING .. consumer
if not rcall('LPOS', proc, item) then rcall('LPUSH', proc, item) end
-- the sweep pushed it at the consuming end (the tail)
rcall('LREM', queue, '-1', item)
rcall('SELECT', '0')
mark_busy(ctx)
return 2
