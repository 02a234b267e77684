-- requeue: takes back leases and requeues their items. With a consumer, every
-- lease of that consumer is taken back at once, expired or not (a restarted consumer
-- hands back what its previous life held); with claim ids too, only those claims (a
-- claim whose answer was lost); without, the leases expired by now. For each lease: if
-- the item is still in the consumer's processing list, it is removed from there and
-- pushed back at the consuming end of its queue, with its wake tokens; the LREM makes
-- the requeue happen at most once per claim. A job that runs under another claim now
-- (the lease is stale) keeps running and is not queued again. With clear, a job taken
-- back also stops naming its claim (a claim released on purpose: its run never
-- happened, or its process is gone); without (an expired lease, a shutdown's hand-back),
-- the job keeps it, so that its holder, should it come back (a runner frozen past its
-- lease), may still record the run's end or take the lease back while no other claim
-- has taken the job (finish_jobs, extend, claim_start).
--
-- KEYS:
--   leases  coord:leases
-- ARGV:
--   now_ms    int       now (ms)
--   limit     num       the most leases taken back
--   ctx       int       the context id
--   consumer  string    the consumer ("": leases expired by now, of any consumer)
--   clear     bool      the jobs taken back stop naming their claims
--   claims    []string  only these claims (only with a consumer; none: all)
-- Libs: lib_busy lib_wake
-- Reply: []string {queue, item…} of the items requeued.
-- Derives, from the lease members ("<consumer>\t<queue>\t<item>\t<claim>"): context DB:
--   coord:proc:<consumer>, the queues, the items' job hashes, coord:wakers:<queue>;
--   DB 0 (SELECT 0, last): coord:wake:msg_out / coord:wake:msg_in for a message,
--   coord:wake:runner:<id>:<queue> for a job (lib_wake), coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local now_ms = ARGV[1]
local limit = tonumber(ARGV[2])
local ctx = ARGV[3]
local consumer = ARGV[4]
local clear = ARGV[5] == '1'
local argi = 6
local claims
local n_claims = tonumber(ARGV[argi])
if n_claims <= 7000 then claims = {unpack(ARGV, argi + 1, argi + n_claims)} else claims = {}; for k = 1, n_claims do claims[k] = ARGV[argi + k] end end
argi = argi + 1 + n_claims
-- luagen: end of the prologue

local expired
if consumer ~= '' then
  expired = {}
  local prefix = consumer .. '\t'
  local only
  if #claims > 0 then
    only = {}
    for _, c in ipairs(claims) do only[c] = true end
  end
  for _, m in ipairs(rcall('ZRANGE', KEYS[1], 0, -1)) do
    if string.sub(m, 1, #prefix) == prefix and (not only or only[string.match(m, '[^\t]*$')]) then expired[#expired + 1] = m end
  end
else
  expired = rcall('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms, 'LIMIT', 0, limit)
end
local moved = {}
for _, m in ipairs(expired) do
  rcall('ZREM', KEYS[1], m)
  local t1 = string.find(m, '\t', 1, true)
  local t2 = t1 and string.find(m, '\t', t1 + 1, true)
  if t2 then
    local holder = string.sub(m, 1, t1 - 1)
    local queue = string.sub(m, t1 + 1, t2 - 1)
    local item = string.sub(m, t2 + 1)
    local claim = ''
    local t3 = string.find(item, '\t', 1, true)
    if t3 then claim = string.sub(item, t3 + 1); item = string.sub(item, 1, t3 - 1) end
    local proc = K_PROCESSING .. holder
    -- A job that runs under another claim now (this lease is stale: its claim's
    -- answer was lost, and the job was queued and claimed again since) keeps running:
    -- only this lease's copy in the processing list goes, never the running claim's,
    -- and nothing is queued (that would run the job a second time at once).
    local cur = {}
    if claim ~= '' and string.match(item, '^' .. K_JOB .. '%d+:%d+$') then cur = rcall('HMGET', item, 'claim', 'status', 'worker') end
    if cur[2] == JOB_STARTED and cur[1] and cur[1] ~= claim then
      if cur[3] ~= holder or #rcall('LPOS', proc, item, 'COUNT', 2) > 1 then rcall('LREM', proc, '1', item) end
    elseif rcall('LREM', proc, '1', item) == 1 then
      if clear and cur[1] == claim then
        -- the last run's trace id, which a claim of ClaimStartsFresh left to its claim
        -- id (lib/model TraceOfClaim), stays with the job once the claim goes
        if rcall('HEXISTS', item, 'trace_id') == 0 then rcall('HSET', item, 'trace_id', string.sub(redis.sha1hex('trace ' .. claim), 1, 32)) end
        rcall('HDEL', item, 'claim')
      end
      rcall('RPUSH', queue, item)
      moved[#moved + 1] = queue
      moved[#moved + 1] = item
    end
  end
end
if #moved > 0 then
  local wakers = {}
  for i = 1, #moved, 2 do
    local q = moved[i]
    if q ~= K_MSG_OUT and q ~= K_MSG_IN and not wakers[q] then wakers[q] = wake_targets(q) end
  end
  rcall('SELECT', '0')
  for i = 1, #moved, 2 do
    local q = moved[i]
    if q == K_MSG_OUT or q == K_MSG_IN then
      rcall('LPUSH', q == K_MSG_OUT and K_WAKE_MSG_OUT or K_WAKE_MSG_IN, ctx) -- the routers' wake lists
    else
      wake_runners(ctx, q, wakers[q], 1)
    end
  end
  mark_busy(ctx)
end
return moved
