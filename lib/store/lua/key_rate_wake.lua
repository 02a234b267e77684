-- key_rate_wake: a scheduler's release of the jobs that a concurrency key's rate held
-- back (lib_limit's lim_key_take: coord:ckrate:<key>, and an entry
-- "<ctx>:keyrate:<key>" of coord:delayed at the time of the key's next token). While
-- the entry is due it goes; the key's bucket is refilled by Redis's clock and, for
-- each whole token, the oldest held job that still waits (dispatched) goes back to
-- its queue's consuming end with its token paid (rate_paid: its claim takes none
-- again), its held field removed, a job.released event; its queue's runners get a
-- wake token. Jobs left held make the entry due again at the next token. A key whose
-- rate was removed releases all its held jobs. Two schedulers releasing the same entry:
-- the second changes nothing.
--
-- KEYS:
--   held  coord:ckrate:<key> (context DB)
-- ARGV:
--   ctx     string  the context id
--   key     string  the concurrency key
--   member  string  the coord:delayed entry
--   now_ms  int     now (ms)
-- Libs: lib_busy lib_wake lib_limit
-- Reply: int the jobs released; -1 the entry was not due (or gone).
-- Derives: context DB: coord:limits (read), coord:limbucket:key:<key>, the held
--   jobs' hashes and queues (named by the list's items), coord:wakers:<queue>
--   (lib_wake), coord:events; DB 0 (SELECT 0, last): coord:delayed,
--   coord:delayedwake, the runners' wake lists of the queues, coord:busy.

-- luagen: the prologue, generated from the header by make lua-gen (do not edit)
local ctx = ARGV[1]
local key = ARGV[2]
local member = ARGV[3]
local now_ms = ARGV[4]
-- luagen: end of the prologue

rcall('SELECT', '0')
local due = tonumber(rcall('ZSCORE', K_DELAYED, member) or '')
if not due or due > tonumber(now_ms) then
  rcall('SELECT', ctx)
  return -1
end
rcall('ZREM', K_DELAYED, member)
rcall('SELECT', ctx)
local _, rate, per, burst = string.match(rcall('HGET', K_LIMITS, 'key:' .. key) or '', '^(%d+) (%d+) (%d+) (%d+)$')
rate, per, burst = tonumber(rate), tonumber(per), math.max(tonumber(burst) or 1, 1)
local limited = rate and rate > 0 and per and per > 0
local n, t, tokens, bk = math.huge, nil, nil, K_LIM_BUCKET .. 'key:' .. key
if limited then
  t = lim_time()
  tokens = lim_refill(bk, rate, per, burst, t)
  n = math.floor(tokens + 1e-9)
end
local released, queues, counts = 0, {}, {}
while released < n do
  local e = rcall('RPOP', KEYS[1])
  if not e then break end
  local q, jk = string.match(e, '^([^\t]*)\t(.*)$')
  if q then
    local v = rcall('HMGET', jk, 'status', 'flow_id', 'id', 'caller_id')
    if v[1] == JOB_DISPATCHED then
      rcall('HDEL', jk, 'held')
      if limited then rcall('HSET', jk, 'rate_paid', '1') end
      if not counts[q] then counts[q] = {}; queues[#queues + 1] = q end
      counts[q][#counts[q] + 1] = jk
      released = released + 1
      rcall('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP(), '*', 'type', EV_JOB_RELEASED, 'actor', 'coordinator', 'flow_id', v[2] or '0', 'job_id', v[3] or '', 'caller_id', v[4] or '', 'status', JOB_DISPATCHED, 'detail', 'limit key:' .. key .. ': queued')
    end
  end
end
if limited and released > 0 then
  rcall('HSET', bk, 'tokens', string.format('%.6f', tokens - released), 'at_ms', string.format('%d', t))
end
local again
if limited and rcall('LLEN', KEYS[1]) > 0 then
  again = t + math.max(math.ceil((1 - (tokens - released)) * per / rate), 1)
end
-- onto each queue's consuming end (its tail), the oldest last: it is claimed first
local targets = {}
for _, q in ipairs(queues) do
  local jks = counts[q]
  for i = #jks, 1, -1 do rcall('RPUSH', q, jks[i]) end
  targets[q] = wake_targets(q)
end
rcall('SELECT', '0')
if again then
  rcall('ZADD', K_DELAYED, 'LT', again, member)
  rcall('PUBLISH', K_DELAYED_WAKE, again)
end
for _, q in ipairs(queues) do wake_runners(ctx, q, targets[q], #counts[q]) end
if #queues > 0 then mark_busy(ctx) end
return released
